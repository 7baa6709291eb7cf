"""Analyze tables for small files: catalog + storage listing + planning, no writes."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import CatalogError
from lakekeeper_dagster.engine.fs.listing import Listing, list_directories
from lakekeeper_dagster.engine.hive.catalog import read_table, table_units
from lakekeeper_dagster.engine.hive.model import TableInfo, Unit
from lakekeeper_dagster.engine.plan.thresholds import Thresholds
from lakekeeper_dagster.engine.plan.units import TablePlan, UnitPlan, plan_table, plan_unit, skipped_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def plan_listed(units: list[Unit], listing: Listing, thresholds: Thresholds) -> list[UnitPlan]:
    """The plan of every unit whose location the listing found."""
    plans = []
    for unit in units:
        stats = listing.stats.get(unit.location)
        if stats is not None:
            nested = unit.location in listing.nested
            plans.append(plan_unit(unit.partition, unit.location, stats, thresholds, subdirectories=nested))
    return plans


def analyze_table_info(spark: SparkSession, info: TableInfo, thresholds: Thresholds) -> TablePlan:
    """Plan one table whose metadata is already read (one listing job for all its partitions)."""
    reason = info.skip_reason()
    if reason:
        return skipped_table(info.database, info.name, reason, info.file_format)
    units = table_units(spark, info)
    locations = [unit.location for unit in units]
    listing = list_directories(spark, locations, f"analyze {info.qualified_name}", thresholds.min_file_bytes)
    if not info.is_partitioned and info.location in listing.missing:
        return skipped_table(
            info.database, info.name, f"table location {info.location} is not reachable", info.file_format
        )
    for unit in units:
        if unit.location in listing.missing:
            log.warning(
                "partition %s of %s: location %s does not exist", unit.partition, info.qualified_name, unit.location
            )
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
