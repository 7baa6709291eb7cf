"""Analyze tables for small files: catalog + storage listing + planning, no writes."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.catalog import CatalogError, list_partitions, list_tables, read_table
from lakekeeper_dagster.engine.config import LakekeeperConfig
from lakekeeper_dagster.engine.model import TableInfo
from lakekeeper_dagster.engine.planning import TablePlan, Thresholds, plan_table, plan_unit, skipped_table
from lakekeeper_dagster.engine.storage import Storage, StorageError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def thresholds_from(config: LakekeeperConfig) -> Thresholds:
    return Thresholds(config.block_size_bytes, config.compaction_ratio_threshold, config.size_statistic.value)


def split_table_name(name: str) -> tuple[str, str]:
    """`db.table` -> (db, table), with a clear error for anything else."""
    parts = name.strip().split(".")
    if len(parts) != 2 or not all(parts):
        raise CatalogError(f"table name {name!r} must be of the form DATABASE.TABLE")
    return parts[0], parts[1]


def resolve_tables(
    spark: SparkSession,
    config: LakekeeperConfig,
    database: str | None = None,
    tables: list[str] | None = None,
) -> list[tuple[str, str]]:
    """The (db, table) pairs named on the command line, or else the ones the config manages."""
    if tables:
        return [split_table_name(t) for t in tables]
    if database:
        return [(database, t) for t in list_tables(spark, database)]
    selection = config.tables
    pairs = [split_table_name(t) for t in selection.tables]
    for db in selection.databases:
        pairs += [(db, t) for t in list_tables(spark, db) if selection.matches(db, t)]
    return list(dict.fromkeys(pairs))


def analyze_table_info(spark: SparkSession, info: TableInfo, thresholds: Thresholds) -> TablePlan:
    """Plan one table whose metadata is already read."""
    reason = info.skip_reason()
    if reason:
        return skipped_table(info.database, info.name, reason, info.file_format)
    storage = Storage(spark)
    if info.is_partitioned:
        targets = [(p.name, p.location) for p in list_partitions(spark, info)]
    else:
        targets = [(None, info.location)]
    units = []
    for name, location in targets:
        try:
            stats = storage.dir_stats(location)
        except StorageError:
            if name is None:
                return skipped_table(
                    info.database, info.name, f"table location {location} is not reachable", info.file_format
                )
            log.warning("partition %s of %s: location %s does not exist", name, info.qualified_name, location)
            continue
        units.append(plan_unit(name, location, stats.file_count, stats.total_bytes, stats.median_bytes, thresholds))
    return plan_table(info.database, info.name, info.file_format, units)


def analyze_tables(spark: SparkSession, pairs: list[tuple[str, str]], thresholds: Thresholds) -> list[TablePlan]:
    """Plan every table; a table that cannot be read is reported as skipped and the others go on."""
    plans = []
    for database, table in pairs:
        try:
            info = read_table(spark, database, table)
        except CatalogError as error:
            plans.append(skipped_table(database, table, str(error)))
            continue
        plans.append(analyze_table_info(spark, info, thresholds))
    return plans
