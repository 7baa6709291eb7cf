"""The `lakekeeper-dagster` command line: compaction, its recovery and maintenance, partition management, history,
and the local services (metastore, HDFS/YARN, a Spark cluster) and demo."""

from __future__ import annotations

import argparse
import logging
import sys

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

from lakekeeper_dagster.cli.archive import add_archive_parser
from lakekeeper_dagster.cli.cluster import add_cluster_parser
from lakekeeper_dagster.cli.common import BAD_INPUT, EXIT_BAD_INPUT, EXIT_FAILED, USER_ERRORS, recorded_run
from lakekeeper_dagster.cli.compaction import add_compaction_parsers
from lakekeeper_dagster.cli.hadoop import add_hadoop_parser
from lakekeeper_dagster.cli.history import add_history_parsers
from lakekeeper_dagster.cli.partitions import add_partition_parsers
from lakekeeper_dagster.cli.recovery import add_recovery_parsers
from lakekeeper_dagster.cli.setup import add_setup_parsers
from lakekeeper_dagster.cli.submit import run_submitted, wants_submission
from lakekeeper_dagster.config import LakekeeperConfig, load_config, with_overrides
from lakekeeper_dagster.engine.hive.model import split_table_name, validated_name, validated_partition
from lakekeeper_dagster.engine.ops.cleanup import parse_duration
from lakekeeper_dagster.engine.protocol.history import tool_version
from spark_resources.py4j import java_cause
from spark_resources.session import stopped_application

# Flags that name one thing: an empty, blank or padded value is refused before anything starts.
NAME_FLAGS = {
    "config_file": "--config-file",
    "database": "--database",
    "backup": "--backup",
    "output": "--output",
    "dagster_home": "--dagster-home",
}


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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lakekeeper-dagster", description=__doc__)
    parser.add_argument("--version", action="version", version=f"%(prog)s {tool_version()}")
    parser.add_argument("--config-file", help="YAML config (default: $LAKEKEEPER_CONFIG or ./lakekeeper.yaml)")
    parser.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True)
    add_setup_parsers(sub)
    add_cluster_parser(sub)
    add_hadoop_parser(sub)
    add_compaction_parsers(sub)
    add_recovery_parsers(sub)
    add_archive_parser(sub)
    add_partition_parsers(sub)
    add_history_parsers(sub)
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
