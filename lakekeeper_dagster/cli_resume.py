"""`lakekeeper-dagster resume --table D.T [--partition P]`: let the suspended (or failing) partitions of a table
be compacted again, their failed runs forgotten (`engine/protocol/suspension.py`)."""

from __future__ import annotations

import argparse

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.hive.model import split_table_name
from lakekeeper_dagster.engine.protocol.suspension import resume_table


def cmd_resume(args: argparse.Namespace, config: LakekeeperConfig, open_spark) -> int:
    database, table = split_table_name(args.table, "--table")
    partitions = [args.partition] if args.partition is not None else None
    print("\n".join(resume_table(open_spark(config), database, table, partitions)))
    return 0


def add_resume_parser(sub: argparse._SubParsersAction, open_spark) -> None:
    """The `resume` subcommand; `open_spark` is the CLI's session opener (it checks the metastore first)."""
    parser = sub.add_parser("resume", help="compact suspended partitions again (their failed runs forgotten)")
    parser.add_argument("--table", required=True, help="DB.TABLE")
    parser.add_argument("--partition", help="only this Hive partition (default: every one of the table)")
    parser.set_defaults(func=lambda args, config: cmd_resume(args, config, open_spark))
