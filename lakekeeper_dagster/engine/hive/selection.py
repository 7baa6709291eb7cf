"""Which tables are managed: the `tables` setting, and its resolution against the catalog."""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lakekeeper_dagster.engine.errors import ConfigError
from lakekeeper_dagster.engine.hive.catalog import list_tables
from lakekeeper_dagster.engine.hive.model import split_table_name, validated_name

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

    @field_validator("databases", "tables", "include", "exclude")
    @classmethod
    def _usable_names(cls, values: list[str]) -> list[str]:
        """An empty or blank entry would select nothing or everything: refused, never trimmed."""
        for value in values:
            validated_name(value, "entry")
        return values

    @field_validator("tables")
    @classmethod
    def _qualified(cls, values: list[str]) -> list[str]:
        for value in values:
            split_table_name(value, "entry")
        return values

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
    """The (db, table) pairs named on the command line (or run config), or else the ones the selection manages.

    A name given but empty or blank is refused (ConfigError), never read as "not given": it would select everything.
    """
    if tables is not None:
        if not tables:
            raise ConfigError("the list of tables is empty: name at least one DB.TABLE. Nothing was done")
        return [split_table_name(t, "table") for t in tables]
    if database is not None:
        return [(database, t) for t in list_tables(spark, validated_name(database, "database"))]
    pairs = [split_table_name(t) for t in selection.tables]
    for db in selection.databases:
        pairs += [(db, t) for t in list_tables(spark, db) if selection.matches(db, t)]
    return list(dict.fromkeys(pairs))
