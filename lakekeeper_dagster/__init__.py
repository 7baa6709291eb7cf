"""lakekeeper-dagster: Hive small-file compaction as a Dagster code location."""

from lakekeeper_dagster.definitions import defs

__all__ = ["defs"]
