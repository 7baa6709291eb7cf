"""Analyze tables for small files: catalog + storage listing + planning, no writes."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.catalog import CatalogError, list_partitions, list_tables, read_table
from lakekeeper_dagster.engine.config import LakekeeperConfig
from lakekeeper_dagster.engine.listing import Listing, list_directories
from lakekeeper_dagster.engine.model import TableInfo
from lakekeeper_dagster.engine.planning import (
    Batching,
    PartitionPlan,
    TablePlan,
    Thresholds,
    plan_table,
    plan_unit,
    skipped_table,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def thresholds_from(config: LakekeeperConfig) -> Thresholds:
    return Thresholds(config.block_size_bytes, config.compaction_ratio_threshold, config.size_statistic.value)


def batching_from(config: LakekeeperConfig) -> Batching:
    settings = config.batching
    return Batching(settings.max_partitions, settings.max_mb * 1024 * 1024, settings.concurrent_jobs)


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


Unit = tuple[str | None, str]  # (Hive partition name or None for a whole table, location)


def table_units(spark: SparkSession, info: TableInfo) -> list[Unit]:
    """The units a table is compacted by: each partition, or the whole table directory."""
    if info.is_partitioned:
        return [(p.name, p.location) for p in list_partitions(spark, info)]
    return [(None, info.location)]


def plan_listed(units: list[Unit], listing: Listing, thresholds: Thresholds) -> list[PartitionPlan]:
    """The plan of every unit whose location the listing found."""
    plans = []
    for name, location in units:
        stats = listing.stats.get(location)
        if stats is not None:
            plans.append(
                plan_unit(
                    name,
                    location,
                    stats.file_count,
                    stats.total_bytes,
                    stats.median_bytes,
                    thresholds,
                    subdirectories=location in listing.nested,
                )
            )
    return plans


def analyze_table_info(spark: SparkSession, info: TableInfo, thresholds: Thresholds) -> TablePlan:
    """Plan one table whose metadata is already read (one listing job for all its partitions)."""
    reason = info.skip_reason()
    if reason:
        return skipped_table(info.database, info.name, reason, info.file_format)
    units = table_units(spark, info)
    listing = list_directories(spark, [location for _, location in units])
    if not info.is_partitioned and info.location in listing.missing:
        return skipped_table(
            info.database, info.name, f"table location {info.location} is not reachable", info.file_format
        )
    for name, location in units:
        if location in listing.missing:
            log.warning("partition %s of %s: location %s does not exist", name, info.qualified_name, location)
    return plan_table(info.database, info.name, info.file_format, plan_listed(units, listing, thresholds))


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
