"""What every command shares: the Spark session (logged in as the Dagster resource logs in), the table arguments,
the exit codes, the unit lines, and the run recorder."""

from __future__ import annotations

import argparse
import atexit
import logging
import os
import sys

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.errors import CatalogError, ConfigError, LakekeeperError
from lakekeeper_dagster.engine.hive.catalog import table_exists
from lakekeeper_dagster.engine.hive.selection import resolve_tables
from lakekeeper_dagster.engine.ops.options import UnitResult
from lakekeeper_dagster.engine.plan.thresholds import human_bytes
from lakekeeper_dagster.engine.protocol.history import recorded
from lakekeeper_dagster.engine.statuses import UnitStatus
from spark_resources.errors import ResourceError
from spark_resources.hive_session import kerberized_conf, open_hive_session, require_metastore
from spark_resources.kerberos import login_for

USER_ERRORS = (LakekeeperError, ResourceError)  # the engine's and the resource layer's: a message, not a traceback
# Exit 2: the run could not start as asked (flags, config, a missing database/table/partition, metastore or Kerberos
# set-up); nothing was done for what it names. Exit 1: an operation was refused or failed.
BAD_INPUT = (ConfigError, CatalogError, ResourceError)
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

# Set in the ApplicationMaster's environment by a `deploy_mode: cluster` submission (`submit`): this process is the
# submitted driver. It never submits again, and spark-submit's --principal/--keytab did its Kerberos login.
SUBMITTED_ENV = "LAKEKEEPER_SUBMITTED"


def in_application_master() -> bool:
    """Whether this process is the driver a `deploy_mode: cluster` submission started (the re-submission guard)."""
    return os.environ.get(SUBMITTED_ENV) == "1"


def session_conf(config: LakekeeperConfig) -> dict[str, str]:
    """The session's Spark conf. In the ApplicationMaster without the keytab and principal: they name a file of the
    edge node; spark-submit shipped the keytab and logged the ApplicationMaster in with it."""
    if not in_application_master():
        return config.spark_conf()
    settings = config.spark_submit.model_copy(update={"principal": None, "keytab": None})
    return config.model_copy(update={"spark_submit": settings}).spark_conf()


def open_spark(config: LakekeeperConfig):
    """Spark session for the CLI, logged in as the Dagster resource logs in (`hive_session.open_hive_session`), once
    the metastore answers (a clear error, no retries). The private credential cache goes when the command exits."""
    submit = config.spark_submit
    login = None if in_application_master() else login_for(submit.principal, submit.keytab, submit.krb5_conf)

    def reachable() -> None:
        require_metastore(config.metastore.uri, "this command")

    conf = kerberized_conf(session_conf(config), login)
    spark, _ = open_hive_session(conf, config.metastore.uri, login, reachable, logging.getLogger(__name__).info)
    if login is not None:
        atexit.register(login.close)
    return spark


def add_table_args(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--database", help="every table of this database")
    group.add_argument("--table", help="one table, DB.TABLE")
    group.add_argument("--tables", help="comma-separated DB.TABLE names")


def add_threshold_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--block-size", dest="block_size_mb", type=int, help="target file size in MB")
    parser.add_argument("--ratio-threshold", dest="compaction_ratio_threshold", type=float)
    parser.add_argument("--size-statistic", choices=["average", "median"])


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


def exit_code(codes: set[int]) -> int:
    """A multi-table run's status: 1 when any table was refused or any partition failed (it needs looking at),
    else 2 when a table or partition was missing, else 0."""
    return EXIT_FAILED if EXIT_FAILED in codes else max(codes)


def partition_failures(failed: dict[str, str], table: str, verb: str) -> int:
    """The exit status of a run over a table's partitions: 1 when any failed, named on stderr (the lines printed
    above say why each failed), else 0."""
    if not failed:
        return 0
    names = ", ".join(failed)
    print(f"error: {len(failed)} partition(s) of {table} not {verb} ({names}); see the lines above", file=sys.stderr)
    return 1


def recorded_run(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    """Run the command, every run it finishes recorded in the history (`history.*`)."""
    with recorded(config.history_sink()):
        return args.func(args, config)


def unit_lines(results: list[UnitResult], done: str = "COMPACTED") -> str:
    """One line per unit: `done` (e.g. COMPACTED, "ARCHIVED to zstd,") with files, bytes and rows before -> after,
    checksum, seconds, backup, late files carried and the originals' owner or group the new files could not be given;
    or the unit's status and why."""
    lines = []
    for r in results:
        label = f"{r.database}.{r.table} {r.partition or '(whole table)'}"
        if r.status != UnitStatus.COMPACTED:
            lines.append(f"{label}: {r.status.upper()}: {r.reason}")
            continue
        lines.append(
            f"{label}: {done} files {r.files_before} -> {r.files_after}, "
            f"{human_bytes(r.bytes_before)} -> {human_bytes(r.bytes_after)}, rows {r.rows_before} -> {r.rows_after}, "
            f"checksum {'ok' if r.checksum_matches else 'MISMATCH'}, {r.seconds:.1f}s, backup {r.backup_table}"
            + (f", {r.carried_files} late file(s) carried over" if r.carried_files else "")
            + (f", {', '.join(r.not_carried)} not carried (this process may not set them)" if r.not_carried else "")
        )
    return "\n".join(lines)
