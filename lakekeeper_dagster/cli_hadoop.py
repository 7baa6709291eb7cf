"""`lakekeeper-dagster hadoop start|stop|status`: a local HDFS (`spark_resources/hadoop.py`) beside the local
metastore, and the config that puts the warehouse (so new databases and their tables) on it."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from lakekeeper_dagster.config import LakekeeperConfig
from spark_resources.hadoop import LocalHadoop

HDFS_CONFIG_NAME = "lakekeeper-hdfs.yaml"


def local_hadoop(config: LakekeeperConfig) -> LocalHadoop:
    """The HDFS whose files live beside the local metastore's (`<metastore.home>/hadoop`)."""
    return LocalHadoop(home=Path(config.metastore.home) / "hadoop")


def hdfs_config(config: LakekeeperConfig, hadoop: LocalHadoop) -> dict:
    """The config of `config`'s metastore with Spark's warehouse on the running HDFS: databases created through it
    (`demo create`) and their tables live there."""
    return {
        "metastore": {
            "uri": config.metastore.uri,
            "home": str(Path(config.metastore.home).absolute()),
            "warehouse_dir": f"{hadoop.uri}/warehouse",
        },
        "spark_submit": {"extra_conf": hadoop.spark_conf()},
    }


def cmd_hadoop(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    hadoop = local_hadoop(config)
    if args.action == "start":
        print(
            f"starting a local HDFS: a NameNode and {hadoop.datanodes} DataNode(s) (home {hadoop.home}) ...", flush=True
        )
        print(f"HDFS running: {hadoop.start()} (client configuration for HADOOP_CONF_DIR: {hadoop.conf_dir})")
        written = Path(args.write_config) if args.write_config else hadoop.home / HDFS_CONFIG_NAME
        text = yaml.safe_dump(hdfs_config(config, hadoop), sort_keys=False)
        written.write_text(f"# Written by `lakekeeper-dagster hadoop start`: the warehouse on the local HDFS.\n{text}")
        print(f"a config with the warehouse on it: {written} (--config-file or LAKEKEEPER_CONFIG)")
    elif args.action == "stop":
        print("HDFS stopped (its files stay for the next start)" if hadoop.stop() else "HDFS was not running")
    else:
        print(hadoop.status())
        return 0 if hadoop.is_running() else 3
    return 0


def add_hadoop_parser(sub: argparse._SubParsersAction) -> None:
    """The `hadoop` subcommand."""
    parser = sub.add_parser("hadoop", help="run a local HDFS (Hadoop's minicluster, fetched with Maven once)")
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument(
        "--write-config", help=f"with start: where to write the config using it (default: <home>/{HDFS_CONFIG_NAME})"
    )
    parser.set_defaults(func=cmd_hadoop)
