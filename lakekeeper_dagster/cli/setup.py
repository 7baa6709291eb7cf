"""`lakekeeper-dagster metastore start|stop|status` (the local Hive Metastore), `generate-config` (a commented config
template) and `demo create|run` (the runbook's demo tables; the main job through Dagster)."""

from __future__ import annotations

import argparse
from pathlib import Path

from lakekeeper_dagster.cli.common import open_spark
from lakekeeper_dagster.config import LakekeeperConfig, config_template
from lakekeeper_dagster.demo.config import ensure_demo_config
from lakekeeper_dagster.demo.tables import create_demo_tables
from lakekeeper_dagster.engine.errors import ConfigError
from spark_resources.metastore import MetastoreServer


def metastore_server(config: LakekeeperConfig) -> MetastoreServer:
    return MetastoreServer(home=Path(config.metastore.home) / "metastore", uri=config.metastore.uri)


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


def cmd_demo(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    if args.action == "run":
        from lakekeeper_dagster.demo.run import run_demo

        check = run_demo(config, args.database, Path(args.dagster_home).absolute())
        return 0 if check else 1
    spark = open_spark(config)
    names = create_demo_tables(spark, args.database)
    print("\n".join(f"created {name}" for name in names))
    print(ensure_demo_config(config, args.config_file, args.database, names))
    return 0


def add_setup_parsers(sub: argparse._SubParsersAction) -> None:
    """The `metastore`, `generate-config` and `demo` subcommands."""
    metastore = sub.add_parser("metastore", help="run the local Hive Metastore thrift server")
    metastore.add_argument("action", choices=["start", "stop", "status"])
    metastore.set_defaults(func=cmd_metastore)

    generate = sub.add_parser("generate-config", help="write a fully commented config template")
    generate.add_argument("--output", default="lakekeeper.yaml")
    generate.add_argument("--force", action="store_true", help="overwrite an existing file")
    generate.set_defaults(func=cmd_generate_config)

    demo = sub.add_parser("demo", help="demo tables of the Lakekeeper runbook")
    demo.add_argument("action", choices=["create", "run"], help="create the tables, or run the main job (Dagster)")
    demo.add_argument("--dagster-home", default=".dagster_home", help="Dagster instance directory for `run`")
    demo.add_argument("--database", default="lakekeeper_demo")
    demo.set_defaults(func=cmd_demo)
