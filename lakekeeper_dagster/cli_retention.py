"""`lakekeeper-dagster retention --table D.T [--older-than 90d] [--[no-]dry-run] [--force] [--skip-trash]`: drop a
table's partitions older than an age (`table_overrides.<D.T>.retention`), metastore entry and data (to the Trash).
The config file's `dry_run: true` makes it a dry run too, unless `--no-dry-run`."""

from __future__ import annotations

import argparse
import sys

from lakekeeper_dagster.config import LakekeeperConfig, run_owner
from lakekeeper_dagster.engine.errors import CatalogError
from lakekeeper_dagster.engine.hive.catalog import table_exists
from lakekeeper_dagster.engine.hive.model import split_table_name
from lakekeeper_dagster.engine.ops.retention import retain_table
from lakekeeper_dagster.engine.policies import policy_age


def cmd_retention(args: argparse.Namespace, config: LakekeeperConfig, open_spark) -> int:
    database, table = split_table_name(args.table, "--table")
    policies = config.policies_for(database, table)
    policy_age(args.older_than, policies.retention.older_than, "retention.older_than", args.table)  # before Spark
    spark = open_spark(config)
    if not table_exists(spark, database, table):
        raise CatalogError(f"table {database}.{table} does not exist in the metastore (named by --table)")
    outcome = retain_table(
        spark,
        database,
        table,
        policies,
        args.older_than,
        dry_run=config.dry_run,  # --dry-run / --no-dry-run over the config file's dry_run
        force=args.force,
        skip_trash=args.skip_trash,
        owner=run_owner(None),
    )
    print("\n".join(outcome.lines))
    return partition_failures(outcome.failed, args.table, "dropped")


def partition_failures(failed: dict[str, str], table: str, verb: str) -> int:
    """The exit status of a run over a table's partitions: 1 when any failed, named on stderr (the lines printed
    above say why each failed), else 0."""
    if not failed:
        return 0
    names = ", ".join(failed)
    print(f"error: {len(failed)} partition(s) of {table} not {verb} ({names}); see the lines above", file=sys.stderr)
    return 1


def add_retention_parser(sub: argparse._SubParsersAction, open_spark) -> None:
    """The `retention` subcommand; `open_spark` is the CLI's session opener (it checks the metastore first)."""
    parser = sub.add_parser("retention", help="drop partitions older than an age (metastore entry and data)")
    parser.add_argument("--table", required=True, help="DB.TABLE")
    parser.add_argument("--older-than", help="90d, 36h, 2w (default: table_overrides.<D.T>.retention.older_than)")
    parser.add_argument(
        "--dry-run", dest="dry_run", action="store_const", const=True, help="list partition, time, files, bytes only"
    )
    parser.add_argument("--no-dry-run", dest="dry_run", action="store_const", const=False)
    parser.add_argument("--force", action="store_true", help="drop more than retention.max_fraction of partitions")
    parser.add_argument("--skip-trash", action="store_true", help="delete the data instead of moving it to the Trash")
    parser.set_defaults(func=lambda args, config: cmd_retention(args, config, open_spark))
