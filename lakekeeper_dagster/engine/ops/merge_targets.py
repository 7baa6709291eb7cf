"""The targets of a merge: the source, its merged table and union view, where a new merged table goes, and their
creation (`merge.py` runs the merge)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import ConfigError, OperationError
from lakekeeper_dagster.engine.fs.locations import child, split_location
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.catalog import read_table, table_exists
from lakekeeper_dagster.engine.hive.model import (
    MERGED_SOURCE_PROPERTY,
    TableInfo,
    quote_identifier,
    sql_string,
)
from lakekeeper_dagster.engine.plan.merge import (
    MergeLayout,
    merge_layout,
    merge_names,
)
from lakekeeper_dagster.engine.plan.merge_view import UnionView
from lakekeeper_dagster.engine.plan.partition_time import PartitionClock
from lakekeeper_dagster.engine.policies import TablePolicies

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MERGED_FORMATS = ("parquet", "orc")  # merge reads and writes rows with Spark: not text (its files are concatenated)


@dataclass(frozen=True)
class MergeTargets:
    """The source, its layout and clock, and the merged table and view (database, name)."""

    info: TableInfo
    clock: PartitionClock
    layout: MergeLayout
    merged: tuple[str, str]
    view: tuple[str, str]

    @property
    def union(self) -> UnionView:
        merged = ".".join(quote_identifier(n) for n in self.merged)
        return UnionView(self.info.sql_name, merged, self.layout)

    @property
    def view_sql(self) -> str:
        return ".".join(quote_identifier(n) for n in self.view)


def merge_targets(spark: SparkSession, database: str, table: str, policies: TablePolicies) -> MergeTargets:
    """The source and what its `merge` policy names, checked; a ConfigError names the key, an OperationError a
    table that may not take part."""
    info = read_table(spark, database, table)
    name = info.qualified_name
    reason = info.unmanaged_reason() or (None if info.is_partitioned else "it is not partitioned")
    if not reason and info.file_format not in MERGED_FORMATS:
        reason = f"its format {info.file_format} is not one merge writes ({', '.join(MERGED_FORMATS)})"
    if reason:
        raise OperationError(f"table {name} cannot be merged: {reason}; nothing was changed")
    clock = policies.clock(name)
    clock.check_columns(info.partition_columns, name)
    layout = merge_layout(info, clock, policies.merge.into)
    key = f"table_overrides.{name}.merge"
    merged, view = merge_names(database, table, policies.merge.view, policies.merge.table)
    for what, (db, obj) in (("table", merged), ("view", view)):
        if table_exists(spark, db, obj):
            found = read_table(spark, db, obj)
            if found.table_properties.get(MERGED_SOURCE_PROPERTY) != name or (what == "view") != (
                found.table_type == "VIEW"
            ):
                raise ConfigError(
                    f"{key}.{what}: {db}.{obj} exists and is not the merged {what} of {name}; name another; "
                    "nothing was changed"
                )
            if what == "table" and (discovering := found.discovery_reason()):
                raise OperationError(f"{db}.{obj}, the merged table of {name}: {discovering}; nothing was changed")
            expected = [c.name.lower() for c in info.data_columns] + [n.lower() for n, _ in layout.merged_columns()]
            if what == "table" and [c.name.lower() for c in found.data_columns] != expected:
                raise OperationError(  # the view over both could not be altered: refused before any step
                    f"{db}.{obj}: its columns differ from {name}'s (a column added to the source since?); add the "
                    f"same columns to {db}.{obj}, in order, then retry; nothing was changed"
                )
    return MergeTargets(info, clock, layout, merged, view)


def _merged_location(targets: MergeTargets) -> str:
    """Where a new merged table goes: beside the source, under the merged table's name."""
    return child(split_location(targets.info.location or "")[0], targets.merged[1])


def merged_location_refusal(spark: SparkSession, storage: Storage, targets: MergeTargets) -> str | None:
    """Why the merged table cannot be created at its location, or None (it exists already, and is this source's:
    `merge_targets` checks that). A directory already there is someone's (another source of the same name under the
    same parent, whose merged table lives there): adopting it would mix both, and moving it away takes their data."""
    if table_exists(spark, *targets.merged):
        return None
    location = _merged_location(targets)
    if storage.exists(location) and (storage.list_names(location, False) or storage.list_names(location, True)):
        return (
            f"{targets.info.qualified_name}: the merged table {'.'.join(targets.merged)} would be created at "
            f"{location}, which exists and is not empty: another source's merged data, or this source's own after its "
            f"merged table was dropped (then re-create that table over it, with the table property "
            f"{MERGED_SOURCE_PROPERTY}={targets.info.qualified_name}, and add its partitions; naming another merged "
            "table would hide those periods from the view). Otherwise name another merged table "
            f"(table_overrides.{targets.info.qualified_name}.merge.table). Nothing was changed"
        )
    return None


def create_targets(spark: SparkSession, targets: MergeTargets) -> TableInfo:
    """The merged table (beside the source, same format) and the view over both, when missing."""
    info, layout = targets.info, targets.layout
    prop = f"TBLPROPERTIES ({sql_string(MERGED_SOURCE_PROPERTY)}={sql_string(info.qualified_name)})"
    if not table_exists(spark, *targets.merged):
        columns = [(c.name, c.type) for c in info.data_columns] + layout.merged_columns()
        location = _merged_location(targets)
        declared = ", ".join(f"{quote_identifier(n)} {t}" for n, t in columns)
        spark.sql(
            f"CREATE EXTERNAL TABLE {targets.union.merged} ({declared}) "
            f"PARTITIONED BY ({', '.join(f'{quote_identifier(c)} STRING' for c, _ in layout.coarse)}) "
            f"STORED AS {info.file_format.upper()} LOCATION {sql_string(location)} {prop}"
        )
    if not table_exists(spark, *targets.view):
        spark.sql(f"CREATE VIEW {targets.view_sql} {prop} AS {targets.union.base()}")
    return read_table(spark, *targets.merged)
