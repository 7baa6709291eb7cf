"""Analyze tables for small files: catalog + storage listing + planning, no writes."""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import CatalogError
from lakekeeper_dagster.engine.fs.listing import Listing, list_directories
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.catalog import read_table, table_units
from lakekeeper_dagster.engine.hive.model import TableInfo, Unit
from lakekeeper_dagster.engine.plan.thresholds import Thresholds
from lakekeeper_dagster.engine.plan.units import TablePlan, UnitPlan, plan_table, plan_unit, skipped_table
from lakekeeper_dagster.engine.protocol.suspension import TABLE_UNIT, FailedRuns, read_failures, suspended_units
from lakekeeper_dagster.engine.statuses import PlanStatus

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


def with_suspensions(storage: Storage, info: TableInfo, plans: list[UnitPlan], suspend_after: int) -> list[UnitPlan]:
    """The table's unit plans, those of its suspended units marked SUSPENDED with why (`protocol/suspension.py`):
    what analyze shows, the observations record (none of them counts as needing compaction) and a run skips."""
    return mark_suspended(info, plans, suspended_units(read_failures(storage, info.location), suspend_after))


def mark_suspended(info: TableInfo, plans: list[UnitPlan], suspended: dict[str, FailedRuns]) -> list[UnitPlan]:
    """The plans of the `suspended` units (`protocol/suspension.py`) marked SUSPENDED with why."""
    return [
        replace(plan, status=PlanStatus.SUSPENDED, reason=failed.describe(plan.partition, info.qualified_name))
        if (failed := suspended.get(plan.partition or TABLE_UNIT)) is not None
        else plan
        for plan in plans
    ]


def analyze_table_info(spark: SparkSession, info: TableInfo, thresholds: Thresholds, suspend_after: int) -> TablePlan:
    """Plan one table whose metadata is already read (one listing job for all its partitions); `suspend_after`: the
    setting that says which units are suspended."""
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
    plans = with_suspensions(Storage(spark), info, plan_listed(units, listing, thresholds), suspend_after)
    return plan_table(info.database, info.name, info.file_format, plans)


def analyze_tables(
    spark: SparkSession, pairs: list[tuple[str, str]], thresholds: Thresholds, suspend_after: int
) -> list[TablePlan]:
    """Plan every table; a table that cannot be read is reported as skipped and the others go on."""
    plans = []
    for database, table in pairs:
        try:
            info = read_table(spark, database, table)
        except CatalogError as error:
            plans.append(skipped_table(database, table, str(error)))
            continue
        plans.append(analyze_table_info(spark, info, thresholds, suspend_after))
    return plans
