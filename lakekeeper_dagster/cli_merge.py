"""`lakekeeper-dagster merge --table D.T [--older-than 60d] [--[no-]dry-run] [--skip-trash]`: merge a table's old fine
partitions into coarse ones of its merged table, read through a union view (`table_overrides.<D.T>.merge`). The
config file's `dry_run: true` makes it a dry run too, unless `--no-dry-run`."""

from __future__ import annotations

import argparse

from lakekeeper_dagster.cli_retention import add_retention_parser, partition_failures
from lakekeeper_dagster.config import LakekeeperConfig, run_owner
from lakekeeper_dagster.engine.errors import CatalogError
from lakekeeper_dagster.engine.hive.catalog import table_exists
from lakekeeper_dagster.engine.hive.model import split_table_name
from lakekeeper_dagster.engine.ops.merge import merge_table
from lakekeeper_dagster.engine.policies import policy_age


def cmd_merge(args: argparse.Namespace, config: LakekeeperConfig, open_spark) -> int:
    database, table = split_table_name(args.table, "--table")
    policies = config.policies_for(database, table)
    policy_age(args.older_than, policies.merge.older_than, "merge.older_than", args.table)  # before Spark
    spark = open_spark(config)
    if not table_exists(spark, database, table):
        raise CatalogError(f"table {database}.{table} does not exist in the metastore (named by --table)")
    outcome = merge_table(
        spark,
        database,
        table,
        policies,
        args.older_than,
        dry_run=config.dry_run,  # --dry-run / --no-dry-run over the config file's dry_run
        skip_trash=args.skip_trash,
        owner=run_owner(None),
    )
    print("\n".join(outcome.lines))
    return partition_failures(outcome.failed, args.table, "merged")


def add_merge_parser(sub: argparse._SubParsersAction, open_spark) -> None:
    """The `merge` subcommand; `open_spark` is the CLI's session opener (it checks the metastore first)."""
    parser = sub.add_parser("merge", help="merge old fine partitions into coarse ones, behind a union view")
    parser.add_argument("--table", required=True, help="DB.TABLE")
    parser.add_argument("--older-than", help="60d, 36h, 2w (default: table_overrides.<D.T>.merge.older_than)")
    parser.add_argument(
        "--dry-run", dest="dry_run", action="store_const", const=True, help="list the periods and partitions only"
    )
    parser.add_argument("--no-dry-run", dest="dry_run", action="store_const", const=False)
    parser.add_argument("--skip-trash", action="store_true", help="delete the merged fine data instead of the Trash")
    parser.set_defaults(func=lambda args, config: cmd_merge(args, config, open_spark))


def add_partition_parsers(sub: argparse._SubParsersAction, open_spark) -> None:
    """The partition-management subcommands that drop or move partitions: `retention`, `merge`."""
    add_retention_parser(sub, open_spark)
    add_merge_parser(sub, open_spark)
