"""The `lakekeeper-dagster` command line: metastore, config, analyze, demo (and compaction commands)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

from lakekeeper_dagster.cli_archive import add_archive_parser, dry_run_notes
from lakekeeper_dagster.cli_cluster import add_cluster_parser
from lakekeeper_dagster.cli_hadoop import add_hadoop_parser
from lakekeeper_dagster.cli_history import add_history_parser, recorded_run
from lakekeeper_dagster.cli_merge import add_partition_parsers
from lakekeeper_dagster.cli_progress import shown
from lakekeeper_dagster.cli_resume import add_resume_parser
from lakekeeper_dagster.cli_session import open_spark
from lakekeeper_dagster.cli_submit import run_submitted, wants_submission
from lakekeeper_dagster.config import LakekeeperConfig, config_template, load_config, run_owner, with_overrides
from lakekeeper_dagster.demo_config import ensure_demo_config
from lakekeeper_dagster.demo_tables import create_demo_tables
from lakekeeper_dagster.engine.errors import CatalogError, ConfigError, LakekeeperError
from lakekeeper_dagster.engine.hive.catalog import table_exists
from lakekeeper_dagster.engine.hive.model import split_table_name, validated_name, validated_partition
from lakekeeper_dagster.engine.hive.selection import resolve_tables
from lakekeeper_dagster.engine.ops.analyze import analyze_tables
from lakekeeper_dagster.engine.ops.cleanup import cleanup_backups, matching_backups, parse_duration
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.rollback import rollback_table
from lakekeeper_dagster.engine.plan.report import render_report
from lakekeeper_dagster.engine.plan.thresholds import human_bytes
from lakekeeper_dagster.engine.protocol.recovery import recover
from lakekeeper_dagster.engine.statuses import UnitStatus
from spark_resources.errors import ResourceError
from spark_resources.metastore import MetastoreServer
from spark_resources.py4j import java_cause
from spark_resources.session import stopped_application

USER_ERRORS = (LakekeeperError, ResourceError)  # the engine's and the resource layer's: a message, not a traceback
# Exit 2: the run could not start as asked (flags, config, a missing database/table/partition, metastore or Kerberos
# set-up); nothing was done for what it names. Exit 1: an operation was refused or failed. See README "Command line".
BAD_INPUT = (ConfigError, CatalogError, ResourceError)
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2
# Flags that name one thing: an empty, blank or padded value is refused before anything starts.
NAME_FLAGS = {
    "config_file": "--config-file",
    "database": "--database",
    "backup": "--backup",
    "output": "--output",
    "dagster_home": "--dagster-home",
}


def metastore_server(config: LakekeeperConfig) -> MetastoreServer:
    return MetastoreServer(home=Path(config.metastore.home) / "metastore", uri=config.metastore.uri)


def _table_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--database", help="every table of this database")
    group.add_argument("--table", help="one table, DB.TABLE")
    group.add_argument("--tables", help="comma-separated DB.TABLE names")


def _threshold_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--block-size", dest="block_size_mb", type=int, help="target file size in MB")
    parser.add_argument("--ratio-threshold", dest="compaction_ratio_threshold", type=float)
    parser.add_argument("--size-statistic", choices=["average", "median"])


def check_flags(args: argparse.Namespace) -> None:
    """Refuse bad flag values before the metastore or Spark is touched: an empty, blank or padded name, a name with
    control characters, a malformed DB.TABLE, partition name or age (an unset shell variable must not select
    everything)."""
    for attr, flag in NAME_FLAGS.items():
        if getattr(args, attr, None) is not None:
            validated_name(getattr(args, attr), flag)
    if getattr(args, "table", None) is not None:
        split_table_name(args.table, "--table")
    if getattr(args, "tables", None) is not None:
        for name in validated_name(args.tables, "--tables").split(","):
            split_table_name(name, "an entry of --tables")
    if getattr(args, "partition", None) is not None:
        validated_partition(args.partition, "--partition")
    if getattr(args, "sort_columns", None) is not None:
        for column in validated_name(args.sort_columns, "--sort-columns").split(","):
            validated_name(column, "a column of --sort-columns")
    if getattr(args, "older_than", None) is not None:
        parse_duration(args.older_than, "--older-than")


def _selected_tables(args: argparse.Namespace) -> list[str] | None:
    if getattr(args, "table", None) is not None:
        return [args.table]
    if getattr(args, "tables", None) is not None:
        return args.tables.split(",")
    return None


def spark_and_tables(args: argparse.Namespace, config: LakekeeperConfig, verb: str):
    """A Spark session and the (db, table) pairs the flags name, else the ones the config manages.

    A table named on the command line that does not exist refuses the whole command (CatalogError, exit 2) before
    anything is done.
    """
    spark = open_spark(config)
    named = _selected_tables(args)
    pairs = resolve_tables(spark, config.tables, args.database, named)
    missing = [f"{d}.{t}" for d, t in pairs if not table_exists(spark, d, t)] if named is not None else []
    if missing:
        raise CatalogError(
            f"table {', '.join(missing)} does not exist in the metastore (named by --table/--tables); check the "
            f"name (`SHOW TABLES IN {missing[0].split('.')[0]}`). Nothing was done"
        )
    if not pairs:
        raise ConfigError(f"no tables to {verb}: pass --database/--table/--tables or set `tables:` in the config")
    return spark, pairs


def cmd_metastore(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    server = metastore_server(config)
    if args.action == "start":
        print(f"starting the Hive Metastore at {server.uri} (home {server.home}) ...", flush=True)
        server.start()
        print(f"metastore running: {server.uri}")
    elif args.action == "stop":
        print("metastore stopped" if server.stop() else "metastore was not running")
    else:
        print(server.status())
        return 0 if server.is_running() else 3
    return 0


def cmd_generate_config(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    output = Path(args.output)
    if output.exists() and not args.force:
        raise ConfigError(f"{output} already exists; pass --force to overwrite it")
    output.write_text(config_template())
    print(f"wrote {output}")
    return 0


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


def render_results(results) -> str:
    """One line per unit: status, files and bytes before/after, rows, checksum, seconds, backup, late files carried,
    the originals' owner or group the new files could not be given."""
    lines = []
    for r in results:
        label = f"{r.database}.{r.table} {r.partition or '(whole table)'}"
        if r.status != UnitStatus.COMPACTED:
            lines.append(f"{label}: {r.status.upper()}: {r.reason}")
            continue
        lines.append(
            f"{label}: COMPACTED files {r.files_before} -> {r.files_after}, "
            f"{human_bytes(r.bytes_before)} -> {human_bytes(r.bytes_after)}, rows {r.rows_before} -> {r.rows_after}, "
            f"checksum {'ok' if r.checksum_matches else 'MISMATCH'}, {r.seconds:.1f}s, backup {r.backup_table}"
            + (f", {r.carried_files} late file(s) carried over" if r.carried_files else "")
            + (f", {', '.join(r.not_carried)} not carried (this process may not set them)" if r.not_carried else "")
        )
    return "\n".join(lines)


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
        print(render_results(results) or f"{name}: nothing to compact", flush=True)
        codes.add(EXIT_FAILED if any(r.status == UnitStatus.FAILED for r in results) else EXIT_OK)
    return exit_code(codes)


def exit_code(codes: set[int]) -> int:
    """A multi-table run's status: 1 when any table was refused or any partition failed (it needs looking at),
    else 2 when a table or partition was missing, else 0."""
    return EXIT_FAILED if EXIT_FAILED in codes else max(codes)


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


def cmd_demo(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    if args.action == "run":
        from lakekeeper_dagster.demo_run import run_demo

        check = run_demo(config, args.database, Path(args.dagster_home).absolute())
        return 0 if check else 1
    spark = open_spark(config)
    names = create_demo_tables(spark, args.database)
    print("\n".join(f"created {name}" for name in names))
    print(ensure_demo_config(config, args.config_file, args.database, names))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakekeeper-dagster", description=__doc__)
    parser.add_argument("--config-file", help="YAML config (default: $LAKEKEEPER_CONFIG or ./lakekeeper.yaml)")
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True)

    metastore = sub.add_parser("metastore", help="run the local Hive Metastore thrift server")
    metastore.add_argument("action", choices=["start", "stop", "status"])
    metastore.set_defaults(func=cmd_metastore)
    add_cluster_parser(sub)
    add_hadoop_parser(sub)

    generate = sub.add_parser("generate-config", help="write a fully commented config template")
    generate.add_argument("--output", default="lakekeeper.yaml")
    generate.add_argument("--force", action="store_true", help="overwrite an existing file")
    generate.set_defaults(func=cmd_generate_config)

    analyze = sub.add_parser("analyze", help="report which tables and partitions need compaction (no writes)")
    _table_args(analyze)
    _threshold_args(analyze)
    analyze.add_argument("--json", action="store_true", help="machine-readable output")
    analyze.set_defaults(func=cmd_analyze)

    compact = sub.add_parser("compact", help="compact the partitions that need it, safely")
    _table_args(compact)
    _threshold_args(compact)
    compact.add_argument("--partition", help="one Hive partition name, e.g. date=2024-01-01/ref=FR (with --table)")
    compact.add_argument("--sort-columns", help="a,b: sort before writing (single table)")
    compact.add_argument("--force", action="store_true", help="rewrite partitions even above the size threshold")
    compact.add_argument("--codec", help="recompress into this codec (e.g. zstd), partitions in another codec too")
    compact.add_argument("--dry-run", dest="dry_run", action="store_const", const=True, help="report only")
    compact.add_argument("--no-dry-run", dest="dry_run", action="store_const", const=False)
    compact.add_argument("--analyze-stats", dest="analyze_after_compaction", action="store_const", const=True)
    compact.add_argument("--no-analyze-stats", dest="analyze_after_compaction", action="store_const", const=False)
    compact.set_defaults(func=cmd_compact)

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
    add_archive_parser(sub, open_spark)

    recover = sub.add_parser("recover", help="finish or undo runs a crash interrupted, from their journals")
    _table_args(recover)
    recover.set_defaults(func=cmd_recover)
    add_resume_parser(sub, open_spark)
    add_partition_parsers(sub, open_spark)
    add_history_parser(sub, open_spark)

    demo = sub.add_parser("demo", help="demo tables of the Lakekeeper runbook")
    demo.add_argument("action", choices=["create", "run"], help="create the tables, or run the main job (Dagster)")
    demo.add_argument("--dagster-home", default=".dagster_home", help="Dagster instance directory for `run`")
    demo.add_argument("--database", default="lakekeeper_demo")
    demo.set_defaults(func=cmd_demo)
    return parser


def config_from_args(args: argparse.Namespace) -> LakekeeperConfig:
    """The file's config with the flags that were actually given layered on top."""
    config = load_config(args.config_file)
    keys = "block_size_mb compaction_ratio_threshold size_statistic log_level dry_run analyze_after_compaction"
    return with_overrides(config, **{key: getattr(args, key, None) for key in keys.split()})


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    try:
        check_flags(args)
        config = config_from_args(args)
        logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("py4j").setLevel(logging.WARNING)
        if wants_submission(args, config):  # deploy_mode cluster: the driver runs in a YARN ApplicationMaster
            return run_submitted(args, argv, config)
        return recorded_run(args, config)  # every run the command finishes appends its history
    except BAD_INPUT as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except USER_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_FAILED
    except (Py4JJavaError, PySparkException) as error:  # e.g. HDFS's AccessControlException: its message, no frames
        logging.getLogger(__name__).debug("Spark or Hadoop call failed", exc_info=True)
        application = stopped_application()
        if application is not None:
            print(
                f"error: the Spark application {application} was stopped under the run (killed on the cluster?), and "
                f"a Spark call failed: {java_cause(error)}. `lakekeeper-dagster recover` finishes or undoes a "
                "compaction that was under way.",
                file=sys.stderr,
            )
            return EXIT_FAILED
        print(
            f"error: a Spark or Hadoop call failed: {java_cause(error)}. Check the permissions of the user running "
            "lakekeeper on the table's location; `--log-level DEBUG` shows the Java stack. If a compaction was under "
            "way, `lakekeeper-dagster recover` finishes or undoes it.",
            file=sys.stderr,
        )
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
