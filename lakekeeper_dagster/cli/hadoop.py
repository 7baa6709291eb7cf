"""`lakekeeper-dagster hadoop start|stop|status`: a local HDFS, and with `--yarn` a local YARN
(`spark_resources/hadoop.py`), beside the local metastore, and the config that puts the warehouse (so new databases
and their tables) on it and, with YARN, runs Spark there."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from lakekeeper_dagster.config import LakekeeperConfig
from spark_resources.hadoop import LocalHadoop
from spark_resources.local_yarn import LocalYarn

HDFS_CONFIG_NAME = "lakekeeper-hdfs.yaml"
YARN_NODEMANAGERS = 2


def local_hadoop(config: LakekeeperConfig, nodemanagers: int = 0) -> LocalHadoop:
    """The Hadoop whose files live beside the local metastore's (`<metastore.home>/hadoop`)."""
    return LocalHadoop(home=Path(config.metastore.home) / "hadoop", nodemanagers=nodemanagers)


def hdfs_config(config: LakekeeperConfig, hadoop: LocalHadoop) -> dict:
    """The config of `config`'s metastore with Spark's warehouse on the running HDFS: databases created through it
    (`demo create`) and their tables live there. With YARN, Spark runs there in client mode (the driver in the
    calling process, as on an edge node; HADOOP_CONF_DIR must name `hadoop.conf_dir`)."""
    spark_submit = LocalYarn(hadoop).spark_submit() if hadoop.has_yarn else {"extra_conf": hadoop.spark_conf()}
    return {
        "metastore": {
            "uri": config.metastore.uri,
            "home": str(Path(config.metastore.home).absolute()),
            "warehouse_dir": f"{hadoop.uri}/warehouse",
        },
        "spark_submit": spark_submit,
    }


def cmd_hadoop(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    hadoop = local_hadoop(config, YARN_NODEMANAGERS if args.yarn else 0)
    if args.action == "start":
        nodes = f"a NameNode and {hadoop.datanodes} DataNode(s)"
        if args.yarn:
            nodes += f", a ResourceManager and {hadoop.nodemanagers} NodeManagers"
        print(f"starting a local Hadoop: {nodes} (home {hadoop.home}) ...", flush=True)
        print(f"HDFS running: {hadoop.start()}")
        if hadoop.has_yarn:
            print(hadoop.status())
        print(f"client configuration: export HADOOP_CONF_DIR={hadoop.conf_dir}")
        written = Path(args.write_config) if args.write_config else hadoop.home / HDFS_CONFIG_NAME
        text = yaml.safe_dump(hdfs_config(config, hadoop), sort_keys=False)
        what = "the warehouse on the local HDFS" + (", Spark on its YARN (HADOOP_CONF_DIR above)" if args.yarn else "")
        written.write_text(f"# Written by `lakekeeper-dagster hadoop start`: {what}.\n{text}")
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
        "--yarn",
        action="store_true",
        help=f"with start: also a YARN (a ResourceManager and {YARN_NODEMANAGERS} NodeManagers) for Spark to run on",
    )
    parser.add_argument(
        "--write-config", help=f"with start: where to write the config using it (default: <home>/{HDFS_CONFIG_NAME})"
    )
    parser.set_defaults(func=cmd_hadoop)
