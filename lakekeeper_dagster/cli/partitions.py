"""The partition-management commands that drop or move partitions, built by one command builder
(`add_policy_command`): both take `--table D.T [--older-than AGE] [--[no-]dry-run] [--skip-trash]`, the age defaulting
to the table's policy, and the config file's `dry_run: true` makes either a dry run unless `--no-dry-run`.

- `retention` (`--force` too): drop the partitions older than the age (`table_overrides.<D.T>.retention`),
  metastore entry and data (to the Trash).
- `merge`: merge the old fine partitions into coarse ones of the table's merged table, read through a union view
  (`table_overrides.<D.T>.merge`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from lakekeeper_dagster.cli.common import open_spark, partition_failures
from lakekeeper_dagster.config import LakekeeperConfig, run_owner
from lakekeeper_dagster.engine.errors import CatalogError
from lakekeeper_dagster.engine.hive.catalog import table_exists
from lakekeeper_dagster.engine.hive.model import split_table_name
from lakekeeper_dagster.engine.ops.merge import merge_table
from lakekeeper_dagster.engine.ops.retention import retain_table
from lakekeeper_dagster.engine.policies import TablePolicies, policy_age

OpenSpark = Callable[[LakekeeperConfig], Any]


def run_policy_command(
    args: argparse.Namespace,
    config: LakekeeperConfig,
    setting: str,
    verb: str,
    operate: Callable[..., Any],
    open_session: OpenSpark = open_spark,
    **options: Any,
) -> int:
    """Check the age against the table's `setting` policy (before Spark), then run `operate` (the engine's operation)
    on the table and print its lines; exit 1 when a partition was not `verb`."""
    database, table = split_table_name(args.table, "--table")
    policies: TablePolicies = config.policies_for(database, table)
    policy_age(args.older_than, getattr(policies, setting).older_than, f"{setting}.older_than", args.table)
    spark = open_session(config)
    if not table_exists(spark, database, table):
        raise CatalogError(f"table {database}.{table} does not exist in the metastore (named by --table)")
    outcome = operate(
        spark,
        database,
        table,
        policies,
        args.older_than,
        dry_run=config.dry_run,  # --dry-run / --no-dry-run over the config file's dry_run
        skip_trash=args.skip_trash,
        owner=run_owner(None),
        **options,
    )
    print("\n".join(outcome.lines))
    return partition_failures(outcome.failed, args.table, verb)


def cmd_retention(args: argparse.Namespace, config: LakekeeperConfig, open_session: OpenSpark = open_spark) -> int:
    return run_policy_command(args, config, "retention", "dropped", retain_table, open_session, force=args.force)


def cmd_merge(args: argparse.Namespace, config: LakekeeperConfig, open_session: OpenSpark = open_spark) -> int:
    return run_policy_command(args, config, "merge", "merged", merge_table, open_session)


def add_policy_command(
    sub: argparse._SubParsersAction, name: str, help: str, default_age: str, dry_run_help: str, skip_trash_help: str
) -> argparse.ArgumentParser:
    """A `name` subcommand with the flags every policy command takes."""
    parser = sub.add_parser(name, help=help)
    parser.add_argument("--table", required=True, help="DB.TABLE")
    parser.add_argument("--older-than", help=f"{default_age} (default: table_overrides.<D.T>.{name}.older_than)")
    parser.add_argument("--dry-run", dest="dry_run", action="store_const", const=True, help=dry_run_help)
    parser.add_argument("--no-dry-run", dest="dry_run", action="store_const", const=False)
    parser.add_argument("--skip-trash", action="store_true", help=skip_trash_help)
    return parser


def add_partition_parsers(sub: argparse._SubParsersAction) -> None:
    """The `retention` and `merge` subcommands."""
    retention = add_policy_command(
        sub,
        "retention",
        "drop partitions older than an age (metastore entry and data)",
        "90d, 36h, 2w",
        "list partition, time, files, bytes only",
        "delete the data instead of moving it to the Trash",
    )
    retention.add_argument("--force", action="store_true", help="drop more than retention.max_fraction of partitions")
    retention.set_defaults(func=cmd_retention)
    merge = add_policy_command(
        sub,
        "merge",
        "merge old fine partitions into coarse ones, behind a union view",
        "60d, 36h, 2w",
        "list the periods and partitions only",
        "delete the merged fine data instead of the Trash",
    )
    merge.set_defaults(func=cmd_merge)
