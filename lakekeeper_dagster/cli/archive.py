"""`lakekeeper-dagster archive --table D.T [--older-than 365d] [--codec gzip|zstd] [--dry-run]`: cold archive, the
partitions older than an age rewritten in a heavier codec through the compaction protocol (`engine/ops/archive.py`).
The age and codec come from the flags, else from `table_overrides.D.T.archive`."""

from __future__ import annotations

import argparse

from lakekeeper_dagster.cli.common import open_spark, unit_lines
from lakekeeper_dagster.cli.progress import shown
from lakekeeper_dagster.config import LakekeeperConfig, run_owner
from lakekeeper_dagster.engine.hive.model import split_table_name
from lakekeeper_dagster.engine.ops.archive import archive_table, plan_archive
from lakekeeper_dagster.engine.statuses import UnitStatus


def cmd_archive(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    """Print the dry run, or archive and print each partition's figures; exit 1 when a partition failed."""
    database, table = split_table_name(args.table, "--table")
    name = f"{database}.{table}"
    rule = config.archive_rule(database, table, args.older_than, args.codec, ("--older-than", "--codec"))  # no Spark
    spark = open_spark(config)
    if config.dry_run:
        print("\n".join(plan_archive(spark, database, table, rule).lines()))
        print("dry run: nothing was changed")
        return 0
    options = config.compaction_options(database, table, owner=run_owner(None))
    with shown(name) as progress:  # on stderr: a bar on a terminal, else plain lines
        rule, results = archive_table(spark, database, table, options, rule, progress)
    print(
        unit_lines(results, f"ARCHIVED to {rule.codec},")
        or f"{name}: no partition ended before {rule.cutoff:%Y-%m-%d %H:%M}"
    )
    return 1 if any(r.status == UnitStatus.FAILED for r in results) else 0


def add_archive_parser(sub: argparse._SubParsersAction) -> None:
    """The `archive` subcommand."""
    parser = sub.add_parser("archive", help="recompress old partitions with a heavier codec, safely (cold archive)")
    parser.add_argument("--table", required=True, help="DB.TABLE")
    parser.add_argument("--older-than", help="partitions whose period ended this long ago: 365d, 12w, 36h "
                        "(default: table_overrides.D.T.archive.older_than)")  # fmt: skip
    parser.add_argument(
        "--codec", help="the archive codec, e.g. gzip or zstd (default: table_overrides.D.T.archive.codec)"
    )
    parser.add_argument("--dry-run", dest="dry_run", action="store_const", const=True, help="report only")
    parser.add_argument("--no-dry-run", dest="dry_run", action="store_const", const=False)
    parser.set_defaults(func=cmd_archive)
