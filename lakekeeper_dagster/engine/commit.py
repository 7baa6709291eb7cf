"""Commit: the only step that touches what readers see, shared by compaction, rollback and recovery."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakekeeper_dagster.engine import backup as backups
from lakekeeper_dagster.engine.faults import kill_point
from lakekeeper_dagster.engine.journal import COMMITTED, INSTALLED, Journal
from lakekeeper_dagster.engine.model import TableInfo, partition_clause
from lakekeeper_dagster.engine.storage import Storage
from lakekeeper_dagster.engine.swap import finish_swap

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def refresh(spark: SparkSession, info: TableInfo) -> None:
    """Drop Spark's cached file listings and metadata of the table, so readers in this session see the swap."""
    spark.catalog.refreshTable(info.sql_name)


def commit_unit(
    spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, index: int, analyze_stats: bool
) -> None:
    """Swap (re-entrant), point the backup at the retired originals, refresh caches and statistics."""
    unit = journal.units[index]
    carried = finish_swap(storage, unit)
    journal.record(storage, INSTALLED, index, carried=carried + int(unit.details.get("carried", 0)))
    kill_point(INSTALLED)
    backup_sql = backups.table_sql(info.database, journal.backup_table)
    backups.set_location(spark, backup_sql, unit.spec, unit.retired)
    refresh(spark, info)
    if analyze_stats:
        clause = f" {partition_clause(unit.spec)}" if unit.spec else ""
        spark.sql(f"ANALYZE TABLE {info.sql_name}{clause} COMPUTE STATISTICS NOSCAN")
    journal.record(storage, COMMITTED, index)
    kill_point(COMMITTED)


def finish_run(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal) -> None:
    """Mark a run done; a run that committed nothing leaves no backup and no journal behind."""
    journal.record(storage, "done")
    if not journal.committed_units():
        if journal.backup_table:
            backups.drop_backup(spark, info.database, journal.backup_table)
        storage.delete(journal.directory)
