"""`lakekeeper-dagster rollback` (the pre-compaction files back from a backup), `cleanup` (delete old backups),
`recover` (finish or undo runs a crash interrupted, from their journals) and `resume` (compact suspended partitions
again, their failed runs forgotten: `engine/protocol/suspension.py`)."""

from __future__ import annotations

import argparse
import sys

from lakekeeper_dagster.cli.common import add_table_args, open_spark, spark_and_tables
from lakekeeper_dagster.config import LakekeeperConfig, run_owner
from lakekeeper_dagster.engine.hive.model import split_table_name
from lakekeeper_dagster.engine.ops.cleanup import cleanup_backups, matching_backups, parse_duration
from lakekeeper_dagster.engine.ops.rollback import rollback_table
from lakekeeper_dagster.engine.protocol.recovery import recover
from lakekeeper_dagster.engine.protocol.suspension import resume_table


def cmd_rollback(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    database, table = split_table_name(args.table, "--table")
    spark = open_spark(config)
    for line in rollback_table(
        spark,
        database,
        table,
        args.partition,
        args.backup,
        owner=run_owner(None),
        accepted_schemes=config.non_atomic_rename_schemes_accepted,
    ):
        print(line)
    return 0


def cmd_cleanup(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    """List the matching backups; unless a dry run, ask on a terminal (not with --yes), then delete exactly those.

    Without --older-than every matching backup goes (Lakekeeper's behaviour, for scripts). Exit 1 when the answer
    is not `yes` (nothing deleted).
    """
    older = parse_duration(args.older_than) if args.older_than is not None else None
    spark = open_spark(config)
    selection = {"database": args.database, "table": args.table, "older_than_seconds": older}
    names = [backup.qualified_name for backup in matching_backups(spark, **selection)]
    listed = cleanup_backups(spark, **selection, dry_run=True, only=names)
    print("\n".join(listed) or "no backups matched", flush=True)
    if args.dry_run or not names:
        return 0
    print(
        "cleanup is irreversible: the original files of these backups are removed and rollback is no longer "
        "possible for them" + ("" if args.skip_trash else " (moved to the Trash where the filesystem has one)"),
        flush=True,
    )
    if sys.stdin.isatty() and not args.yes:
        try:
            answer = input("delete them? type yes to confirm: ")
        except EOFError:
            answer = ""
        if answer.strip().lower() != "yes":
            print("nothing was deleted")
            return 1
    lines = cleanup_backups(
        spark, **selection, skip_trash=args.skip_trash, dry_run=False, owner=run_owner(None), only=names
    )
    print("\n".join(lines) or "no backups matched")
    return 0


def cmd_recover(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    spark, pairs = spark_and_tables(args, config, "recover")
    print("\n".join(recover(spark, pairs, owner=run_owner(None))) or "nothing to recover")
    return 0


def cmd_resume(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    database, table = split_table_name(args.table, "--table")
    partitions = [args.partition] if args.partition is not None else None
    print("\n".join(resume_table(open_spark(config), database, table, partitions)))
    return 0


def add_recovery_parsers(sub: argparse._SubParsersAction) -> None:
    """The `rollback`, `cleanup`, `recover` and `resume` subcommands."""
    rollback = sub.add_parser("rollback", help="restore the pre-compaction files from a backup")
    rollback.add_argument("--table", required=True, help="DB.TABLE")
    rollback.add_argument("--partition", help="only this Hive partition")
    rollback.add_argument("--backup", help="this backup table (default: the most recent)")
    rollback.set_defaults(func=cmd_rollback)

    cleanup = sub.add_parser("cleanup", help="delete the data of old backups and drop them (irreversible)")
    group = cleanup.add_mutually_exclusive_group(required=True)
    group.add_argument("--table", help="backups of DB.TABLE")
    group.add_argument("--database", help="every backup in this database")
    cleanup.add_argument("--older-than", help="only backups older than this (7d, 12h, 30m)")
    cleanup.add_argument("--skip-trash", action="store_true", help="delete at once instead of moving to the Trash")
    cleanup.add_argument("--dry-run", dest="dry_run", action="store_const", const=True, help="list, remove nothing")
    cleanup.add_argument("--yes", action="store_true", help="do not ask on a terminal before deleting")
    cleanup.set_defaults(func=cmd_cleanup)

    recover = sub.add_parser("recover", help="finish or undo runs a crash interrupted, from their journals")
    add_table_args(recover)
    recover.set_defaults(func=cmd_recover)
    resume = sub.add_parser("resume", help="compact suspended partitions again (their failed runs forgotten)")
    resume.add_argument("--table", required=True, help="DB.TABLE")
    resume.add_argument("--partition", help="only this Hive partition (default: every one of the table)")
    resume.set_defaults(func=cmd_resume)
