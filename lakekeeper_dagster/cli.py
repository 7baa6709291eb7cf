"""The `lakekeeper-dagster` command line: metastore, config, analyze, demo (and compaction commands)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from lakekeeper_dagster.engine.analyze import analyze_tables, resolve_tables, thresholds_from
from lakekeeper_dagster.engine.catalog import CatalogError
from lakekeeper_dagster.engine.config import ConfigError, LakekeeperConfig, load_config, with_overrides
from lakekeeper_dagster.engine.config_template import CONFIG_TEMPLATE
from lakekeeper_dagster.engine.planning import render_report
from lakekeeper_dagster.engine.storage import StorageError
from spark_resources.kerberos import KerberosError
from spark_resources.metastore import MetastoreError, MetastoreServer, parse_thrift_uri, port_is_open

USER_ERRORS = (ConfigError, CatalogError, MetastoreError, StorageError, KerberosError)


def metastore_server(config: LakekeeperConfig) -> MetastoreServer:
    return MetastoreServer(home=Path(config.metastore.home) / "metastore", uri=config.metastore.uri)


def open_spark(config: LakekeeperConfig):
    """Spark session for the CLI, after checking the metastore answers (a clear error instead of retries)."""
    host, port = parse_thrift_uri(config.metastore.uri)
    if not port_is_open(host, port):
        raise MetastoreError(
            f"the Hive Metastore at {config.metastore.uri} is not reachable. Start the local one with "
            "`lakekeeper-dagster metastore start`, or point metastore.uri / LAKEKEEPER_METASTORE_URI at yours."
        )
    from spark_resources.session import start_spark_session

    return start_spark_session(config.spark_conf())


def _table_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--database", help="every table of this database")
    group.add_argument("--table", help="one table, DB.TABLE")
    group.add_argument("--tables", help="comma-separated DB.TABLE names")


def _threshold_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--block-size", dest="block_size_mb", type=int, help="target file size in MB")
    parser.add_argument("--ratio-threshold", dest="compaction_ratio_threshold", type=float)
    parser.add_argument("--size-statistic", choices=["average", "median"])


def _selected_tables(args: argparse.Namespace) -> list[str] | None:
    if args.table:
        return [args.table]
    if args.tables:
        return [t for t in args.tables.split(",") if t.strip()]
    return None


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
    output.write_text(CONFIG_TEMPLATE)
    print(f"wrote {output}")
    return 0


def cmd_analyze(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    spark = open_spark(config)
    pairs = resolve_tables(spark, config, args.database, _selected_tables(args))
    if not pairs:
        raise ConfigError("no tables to analyze: pass --database/--table/--tables or set `tables:` in the config")
    plans = analyze_tables(spark, pairs, thresholds_from(config))
    if args.json:
        print(json.dumps([p.to_dict() for p in plans], indent=2))
    else:
        print(render_report(plans))
    return 0


def cmd_demo(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    from lakekeeper_dagster.engine.demo import create_demo_tables

    spark = open_spark(config)
    for name in create_demo_tables(spark, args.database):
        print(f"created {name}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakekeeper-dagster", description=__doc__)
    parser.add_argument("--config-file", help="YAML config (default: $LAKEKEEPER_CONFIG or ./lakekeeper.yaml)")
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True)

    metastore = sub.add_parser("metastore", help="run the local Hive Metastore thrift server")
    metastore.add_argument("action", choices=["start", "stop", "status"])
    metastore.set_defaults(func=cmd_metastore)

    generate = sub.add_parser("generate-config", help="write a fully commented config template")
    generate.add_argument("--output", default="lakekeeper.yaml")
    generate.add_argument("--force", action="store_true", help="overwrite an existing file")
    generate.set_defaults(func=cmd_generate_config)

    analyze = sub.add_parser("analyze", help="report which tables and partitions need compaction (no writes)")
    _table_args(analyze)
    _threshold_args(analyze)
    analyze.add_argument("--json", action="store_true", help="machine-readable output")
    analyze.set_defaults(func=cmd_analyze)

    demo = sub.add_parser("demo", help="demo tables of the Lakekeeper runbook")
    demo.add_argument("action", choices=["create"])
    demo.add_argument("--database", default="lakekeeper_demo")
    demo.set_defaults(func=cmd_demo)
    return parser


def config_from_args(args: argparse.Namespace) -> LakekeeperConfig:
    """The file's config with the flags that were actually given layered on top."""
    config = load_config(args.config_file)
    overrides = {
        key: getattr(args, key, None)
        for key in ("block_size_mb", "compaction_ratio_threshold", "size_statistic", "log_level", "dry_run")
    }
    return with_overrides(config, **overrides)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = config_from_args(args)
        logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        logging.getLogger("py4j").setLevel(logging.WARNING)
        return args.func(args, config)
    except USER_ERRORS as error:
        print(f"error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
