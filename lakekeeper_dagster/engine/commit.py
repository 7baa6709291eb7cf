"""Commit: the only step that touches what readers see, shared by compaction, rollback and recovery."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakekeeper_dagster.engine import backup as backups
from lakekeeper_dagster.engine.faults import kill_point
from lakekeeper_dagster.engine.journal import COMMITTED, Journal
from lakekeeper_dagster.engine.model import TableInfo, partition_clause
from lakekeeper_dagster.engine.storage import Storage
from lakekeeper_dagster.engine.swap import finish_swap

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def refresh(spark: SparkSession, info: TableInfo) -> None:
    """Drop Spark's cached file listings and metadata of the table, so readers in this session see the swap."""
    spark.catalog.refreshTable(info.sql_name)


def swap_unit(storage: Storage, journal: Journal, index: int) -> int:
    """Swap one unit (re-entrant from any point a crash left it at); return the late files carried over."""
    carried = finish_swap(storage, journal.units[index])
    kill_point("installed")
    return carried


def commit_swapped(
    spark: SparkSession,
    storage: Storage,
    info: TableInfo,
    journal: Journal,
    carried: dict[int, int],
    analyze_stats: bool,
) -> None:
    """After the swaps of a batch: point the backup at the retired originals (one metastore call), refresh the
    table's caches once, refresh statistics, then mark the units committed in one journal record."""
    if not carried:
        return
    units = [journal.units[i] for i in carried]
    backups.set_locations(spark, info.database, journal.backup_table, [(u.spec, u.retired) for u in units])
    refresh(spark, info)
    if analyze_stats:
        for unit in units:
            clause = f" {partition_clause(unit.spec)}" if unit.spec else ""
            spark.sql(f"ANALYZE TABLE {info.sql_name}{clause} COMPUTE STATISTICS NOSCAN")
    previously = {i: int(journal.units[i].details.get("carried", 0)) for i in carried}
    journal.record_units(storage, COMMITTED, {i: {"carried": n + previously[i]} for i, n in carried.items()})
    kill_point(COMMITTED)


def commit_units(
    spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, indices: list[int], analyze_stats: bool
) -> None:
    """Finish the swaps of these units (re-entrant) and commit them: what recovery does for a run cut off mid-swap."""
    carried = {i: swap_unit(storage, journal, i) for i in indices}
    commit_swapped(spark, storage, info, journal, carried, analyze_stats)


def finish_run(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal) -> None:
    """Mark a run done; a run that committed nothing leaves no backup and no journal behind."""
    journal.record(storage, "done")
    if not journal.committed_units():
        if journal.backup_table:
            backups.drop_backup(spark, info.database, journal.backup_table)
        storage.delete(journal.directory)
