"""`lakekeeper-dagster cluster start|stop|status`: the local Spark standalone cluster (`spark_resources/cluster.py`),
beside the local metastore, for runs whose executors live in JVMs of their own (client mode, as on YARN)."""

from __future__ import annotations

import argparse
from pathlib import Path

from lakekeeper_dagster.config import LakekeeperConfig
from spark_resources.cluster import SparkCluster


def local_cluster(config: LakekeeperConfig) -> SparkCluster:
    """The cluster whose files live beside the local metastore's (`<metastore.home>/cluster`)."""
    return SparkCluster(home=Path(config.metastore.home) / "cluster")


def cmd_cluster(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    cluster = local_cluster(config)
    if args.action == "start":
        print(f"starting a Spark Master and {cluster.workers} Workers (home {cluster.home}) ...", flush=True)
        print(f"cluster running: {cluster.start()}")
        print(f"to run on it, put this block in the config file:\n{cluster.config_block()}", end="")
    elif args.action == "stop":
        print("cluster stopped" if cluster.stop() else "cluster was not running")
    else:
        print(cluster.status())
        return 0 if cluster.is_running() else 3
    return 0


def add_cluster_parser(sub: argparse._SubParsersAction) -> None:
    """The `cluster` subcommand."""
    parser = sub.add_parser("cluster", help="run a local Spark standalone cluster (a Master and 2 Workers)")
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.set_defaults(func=cmd_cluster)
