"""`lakekeeper-dagster archive --table D.T [--older-than 365d] [--codec gzip|zstd] [--dry-run]`: cold archive, the
partitions older than an age rewritten in a heavier codec through the compaction protocol (`engine/ops/archive.py`).
The age and codec come from the flags, else from `table_overrides.D.T.archive`."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from lakekeeper_dagster.cli_progress import shown
from lakekeeper_dagster.config import LakekeeperConfig, run_owner
from lakekeeper_dagster.engine.hive.model import split_table_name
from lakekeeper_dagster.engine.ops.archive import archive_table, plan_archive
from lakekeeper_dagster.engine.ops.options import DEFAULT_ARCHIVE_CODECS, UnitResult
from lakekeeper_dagster.engine.plan.thresholds import human_bytes
from lakekeeper_dagster.engine.plan.units import TablePlan
from lakekeeper_dagster.engine.statuses import UnitStatus


def render_archived(results: list[UnitResult], codec: str) -> str:
    """One line per archive-aged partition: ARCHIVED with files, bytes and rows before/after, or why not."""
    lines = []
    for r in results:
        label = f"{r.database}.{r.table} {r.partition}"
        if r.status != UnitStatus.COMPACTED:
            lines.append(f"{label}: {r.status.upper()}: {r.reason}")
            continue
        lines.append(
            f"{label}: ARCHIVED to {codec}, files {r.files_before} -> {r.files_after}, {human_bytes(r.bytes_before)} "
            f"-> {human_bytes(r.bytes_after)}, rows {r.rows_before} -> {r.rows_after}, checksum "
            f"{'ok' if r.checksum_matches else 'MISMATCH'}, {r.seconds:.1f}s, backup {r.backup_table}"
        )
    return "\n".join(lines)


def dry_run_notes(config: LakekeeperConfig, plans: list[TablePlan], codec: str | None) -> list[str]:
    """The lines after compact's dry-run report: what a run does that the report cannot show (recompressions to a
    run codec, found from footers; the archive codec archive-aged partitions are written in), then that nothing
    was changed."""
    notes = []
    if codec or config.codec:  # found by reading every file's footer, which a dry run does not
        notes.append("codec: a run also recompresses the partitions marked OK whose files use another codec")
    for plan in (p for p in plans if p.file_format in DEFAULT_ARCHIVE_CODECS):
        rule = config.policies_for(plan.database, plan.table).standing_archive(plan.qualified_name)
        if rule is not None:
            notes.append(
                f"{plan.qualified_name}: archive: the partitions ended before {rule.cutoff:%Y-%m-%d %H:%M} UTC that "
                f"a run rewrites are written in {rule.codec_of(plan.file_format)} "
                f"(table_overrides.{plan.qualified_name}.archive)"
            )
    return [*notes, "dry run: nothing was changed"]


def cmd_archive(
    args: argparse.Namespace, config: LakekeeperConfig, open_spark: Callable[[LakekeeperConfig], Any]
) -> int:
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
    print(render_archived(results, rule.codec) or f"{name}: no partition ended before {rule.cutoff:%Y-%m-%d %H:%M}")
    return 1 if any(r.status == UnitStatus.FAILED for r in results) else 0


def add_archive_parser(sub: argparse._SubParsersAction, open_spark: Callable[[LakekeeperConfig], Any]) -> None:
    """The `archive` subcommand; `open_spark` is the CLI's session opener (`cli.open_spark`)."""
    parser = sub.add_parser("archive", help="recompress old partitions with a heavier codec, safely (cold archive)")
    parser.add_argument("--table", required=True, help="DB.TABLE")
    parser.add_argument("--older-than", help="partitions whose period ended this long ago: 365d, 12w, 36h "
                        "(default: table_overrides.D.T.archive.older_than)")  # fmt: skip
    parser.add_argument(
        "--codec", help="the archive codec, e.g. gzip or zstd (default: table_overrides.D.T.archive.codec)"
    )
    parser.add_argument("--dry-run", dest="dry_run", action="store_const", const=True, help="report only")
    parser.add_argument("--no-dry-run", dest="dry_run", action="store_const", const=False)
    parser.set_defaults(func=lambda args, config: cmd_archive(args, config, open_spark))
