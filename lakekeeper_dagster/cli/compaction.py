"""`lakekeeper-dagster analyze` (which tables and partitions need compaction, no writes) and `compact` (compact them,
safely; `--dry-run` prints the plan)."""

from __future__ import annotations

import argparse
import json
import sys

from lakekeeper_dagster.cli.common import (
    BAD_INPUT,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    USER_ERRORS,
    add_table_args,
    add_threshold_args,
    exit_code,
    spark_and_tables,
    unit_lines,
)
from lakekeeper_dagster.cli.progress import shown
from lakekeeper_dagster.config import LakekeeperConfig, run_owner
from lakekeeper_dagster.engine.errors import ConfigError
from lakekeeper_dagster.engine.hive.catalog import table_exists
from lakekeeper_dagster.engine.ops.analyze import analyze_tables
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.options import DEFAULT_ARCHIVE_CODECS
from lakekeeper_dagster.engine.plan.report import render_report
from lakekeeper_dagster.engine.plan.units import TablePlan
from lakekeeper_dagster.engine.statuses import UnitStatus


def cmd_analyze(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    spark, pairs = spark_and_tables(args, config, "analyze")
    missing = [f"{d}.{t}" for d, t in pairs if not table_exists(spark, d, t)]  # managed by the config, yet gone
    plans = analyze_tables(spark, pairs, config.thresholds(), config.suspend_after_failures)
    if args.json:
        print(json.dumps([p.to_dict() for p in plans], indent=2))
    else:
        print(render_report(plans))
    if missing:
        print(f"error: table {', '.join(missing)} does not exist in the metastore (from the config)", file=sys.stderr)
        return EXIT_BAD_INPUT
    return EXIT_OK


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


def cmd_compact(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    if args.partition is not None and args.table is None:
        raise ConfigError("--partition goes with --table DB.TABLE")
    if args.sort_columns is not None and args.table is None:
        raise ConfigError("--sort-columns goes with a single --table (use sort_columns in the config for several)")
    spark, pairs = spark_and_tables(args, config, "compact")
    if config.dry_run:
        plans = analyze_tables(spark, pairs, config.thresholds(), config.suspend_after_failures)
        print(render_report(plans), *dry_run_notes(config, plans, args.codec), sep="\n")
        return 0
    sort = args.sort_columns.split(",") if args.sort_columns is not None else None
    codes = {EXIT_OK}
    for database, table in pairs:
        name = f"{database}.{table}"
        try:
            owner = run_owner(None)
            options = config.compaction_options(
                database, table, owner=owner, sort_columns=sort, force=args.force, codec=args.codec
            )
            partitions = [args.partition] if args.partition is not None else None
            with shown(name) as progress:  # on stderr: a bar on a terminal, else plain lines
                results = compact_table(spark, database, table, options, partitions, progress)
        except USER_ERRORS as error:
            print(f"{name}: REFUSED: {error}", flush=True)
            codes.add(EXIT_BAD_INPUT if isinstance(error, BAD_INPUT) else EXIT_FAILED)
            continue
        print(unit_lines(results) or f"{name}: nothing to compact", flush=True)
        codes.add(EXIT_FAILED if any(r.status == UnitStatus.FAILED for r in results) else EXIT_OK)
    return exit_code(codes)


def add_compaction_parsers(sub: argparse._SubParsersAction) -> None:
    """The `analyze` and `compact` subcommands."""
    analyze = sub.add_parser("analyze", help="report which tables and partitions need compaction (no writes)")
    add_table_args(analyze)
    add_threshold_args(analyze)
    analyze.add_argument("--json", action="store_true", help="machine-readable output")
    analyze.set_defaults(func=cmd_analyze)

    compact = sub.add_parser("compact", help="compact the partitions that need it, safely")
    add_table_args(compact)
    add_threshold_args(compact)
    compact.add_argument("--partition", help="one Hive partition name, e.g. date=2024-01-01/ref=FR (with --table)")
    compact.add_argument("--sort-columns", help="a,b: sort before writing (single table)")
    compact.add_argument("--force", action="store_true", help="rewrite partitions even above the size threshold")
    compact.add_argument("--codec", help="recompress into this codec (e.g. zstd), partitions in another codec too")
    compact.add_argument("--dry-run", dest="dry_run", action="store_const", const=True, help="report only")
    compact.add_argument("--no-dry-run", dest="dry_run", action="store_const", const=False)
    compact.add_argument("--analyze-stats", dest="analyze_after_compaction", action="store_const", const=True)
    compact.add_argument("--no-analyze-stats", dest="analyze_after_compaction", action="store_const", const=False)
    compact.set_defaults(func=cmd_compact)
