"""The Hive tables the code location manages, read once when the definitions load."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.errors import CatalogError
from lakekeeper_dagster.engine.hive.catalog import read_table, table_units
from lakekeeper_dagster.engine.hive.eligibility import refusal
from lakekeeper_dagster.engine.hive.model import TableInfo, Unit
from lakekeeper_dagster.engine.hive.selection import resolve_tables

# How a user makes the location read the metastore again (a reload rebuilds from the same stored state).
REFRESH_HOW = "run refresh_tables_job (or `dg utils refresh-defs-state` in the project folder)"

log = logging.getLogger(__name__)


@dataclass
class ManagedTables:
    tables: list[TableInfo] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # db.table -> why it is not an asset


def load_managed_tables(spark, config: LakekeeperConfig) -> ManagedTables:
    """Read the configured tables' metadata; unmanageable ones are skipped with their reason (and logged)."""
    managed = ManagedTables()
    for database, table in resolve_tables(spark, config.tables):
        try:
            info = read_table(spark, database, table)
        except CatalogError as error:
            managed.skipped[f"{database}.{table}"] = str(error)
            continue
        reason = refusal(info)
        if reason:
            managed.skipped[info.qualified_name] = reason
        else:
            managed.tables.append(info)
    for name, reason in managed.skipped.items():
        log.warning("%s is not an asset: %s", name, reason)
    return managed


def current_table(spark, info: TableInfo) -> TableInfo:
    """The table as the metastore has it now; CatalogError when it is gone or no longer has the shape the
    definitions were built from (partition columns, location): a run on stale definitions could cover more than
    the user chose, so it must not start."""
    now = read_table(spark, info.database, info.name)
    was = (info.partition_columns, info.location)
    if (now.partition_columns, now.location) != was:
        raise CatalogError(
            f"table {info.qualified_name} changed since the code location loaded (partition columns "
            f"{list(info.partition_columns)} at {info.location} -> {list(now.partition_columns)} at {now.location}): "
            f"{REFRESH_HOW}, so its asset matches the table. Nothing was done"
        )
    return now


def current_units(spark, tables: list[TableInfo], say: Callable[[str], None]) -> dict[str, list[Unit]]:
    """Each table's units as the metastore lists them now (its current location, never the one the definitions were
    built from); a table gone or changed is said with `say` and left out, so it does not stop the others."""
    units = {}
    for info in tables:
        try:
            units[info.qualified_name] = table_units(spark, current_table(spark, info))
        except CatalogError as error:
            say(f"{info.qualified_name} skipped: {error}")
    return units
