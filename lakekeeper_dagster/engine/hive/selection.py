"""Which tables are managed: the `tables` setting, and its resolution against the catalog."""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from lakekeeper_dagster.engine.hive.catalog import list_tables
from lakekeeper_dagster.engine.hive.model import split_table_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class TableSelection(BaseModel):
    """Which tables are managed: whole databases and/or named tables, filtered by glob patterns on `db.table`."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    databases: list[str] = Field(
        default_factory=list, description="Every table of these databases (filtered by include and exclude)."
    )
    tables: list[str] = Field(default_factory=list, description="And these tables, named DB.TABLE.")
    include: list[str] = Field(
        default_factory=lambda: ["*"], description="Glob patterns on DB.TABLE a database's table must match."
    )
    exclude: list[str] = Field(
        default_factory=list, description="Glob patterns on DB.TABLE that leave a database's table out."
    )

    def matches(self, database: str, table: str) -> bool:
        """True when `database.table` passes the include and exclude patterns."""
        name = f"{database}.{table}".lower()
        included = any(fnmatch.fnmatchcase(name, p.lower()) for p in self.include)
        return included and not any(fnmatch.fnmatchcase(name, p.lower()) for p in self.exclude)


def resolve_tables(
    spark: SparkSession,
    selection: TableSelection,
    database: str | None = None,
    tables: list[str] | None = None,
) -> list[tuple[str, str]]:
    """The (db, table) pairs named on the command line, or else the ones the selection manages."""
    if tables:
        return [split_table_name(t) for t in tables]
    if database:
        return [(database, t) for t in list_tables(spark, database)]
    pairs = [split_table_name(t) for t in selection.tables]
    for db in selection.databases:
        pairs += [(db, t) for t in list_tables(spark, db) if selection.matches(db, t)]
    return list(dict.fromkeys(pairs))
