"""Reading a unit's files with the table's own schema, and arranging rows for the write."""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import OperationError, UnitFailure
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.rewrite.footers import FileFooter

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

# Parquet as Hive's readers expect it (decimals as fixed-length binaries, lists and maps in the legacy layout), where
# the input files do not say otherwise (`encodings.py` keeps the layout their decimals use).
HIVE_COMPATIBLE_WRITES = {"spark.sql.parquet.writeLegacyFormat": "true"}


def line_schema() -> StructType:
    """A text table's content as its files are compared (`textconcat.py`): lines, as Spark's text source reads them
    (without their line end; decompressed by the files' extension, as Hive's reader does)."""
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType([StructField("value", StringType())])


def data_schema(info: TableInfo) -> StructType:
    """The table's columns (not its partition columns), as the metastore defines them; a text table's lines."""
    from pyspark.sql.types import StructType

    if info.file_format == "text":
        return line_schema()
    schema = StructType.fromJson(json.loads(info.schema_json))
    return StructType([f for f in schema.fields if f.name not in info.partition_columns])


LISTED_ON_DRIVER_MAX = 10_000  # more paths than this: listed by Spark's parallel listing job after all


def listed_on_driver(paths: list[str]) -> dict[str, str]:
    """The SQL setting under which a read of `paths` lists them on the driver: past Spark's threshold (32) it lists
    them in a Spark job of one task per path, which for a batch's thousands of small input files costs more than
    the read; past `LISTED_ON_DRIVER_MAX`, one status call after another on the driver would cost more."""
    return {"spark.sql.sources.parallelPartitionDiscovery.threshold": str(min(len(paths), LISTED_ON_DRIVER_MAX) + 1)}


def read_files(spark: SparkSession, info: TableInfo, schema: StructType, paths: list[str]) -> DataFrame:
    """Exactly these data files, read with the table's schema (columns missing from old files come out null).

    `spark` is the run's reading session (`encodings.READER_SETTINGS`): no file is skipped, names match as in Hive.
    """
    return spark.read.schema(schema).format(info.file_format).load(paths)


def undeclared_columns(info: TableInfo, footers: list[FileFooter]) -> dict[str, str]:
    """Columns the files hold that the table does not declare (a rewrite would drop them), each with a file.

    Names match as Hive and Spark's reader match them: case-insensitively; ORC files with Hive's positional names
    (`_col0`, `_col1`...) by position. A partition column stored in the files counts as declared (its value is the
    directory's).
    """
    declared = {c.name.lower() for c in info.data_columns} | {c.lower() for c in info.partition_columns}
    found: dict[str, str] = {}
    for footer in footers:
        if footer.columns and all(re.fullmatch(r"_col\d+", c) for c in footer.columns):
            extra = footer.columns[len(info.data_columns) :]
        else:
            extra = tuple(c for c in footer.columns if c.lower() not in declared)
        for column in extra:
            found.setdefault(column, footer.path)
    return found


def refuse_undeclared(info: TableInfo, footers: list[FileFooter], label: str, drop: bool) -> list[str]:
    """Refuse files with columns the table does not declare, unless `drop` (drop_undeclared_columns: then say so);
    the columns dropped."""
    extra = undeclared_columns(info, footers)
    if not extra:
        return []
    listed = ", ".join(f"{column} (in {path})" for column, path in sorted(extra.items()))
    if not drop:
        raise UnitFailure(
            f"{label}: its files hold column(s) the table does not declare: {listed}; rewriting would drop them, "
            "so it is not compacted and nothing was changed. Declare them (ALTER TABLE ... ADD COLUMNS), or set "
            "drop_undeclared_columns: true to compact dropping them."
        )
    log.warning("%s: dropping column(s) the table does not declare (drop_undeclared_columns): %s", label, listed)
    return sorted(extra)


def resolve_sort_columns(info: TableInfo, requested: tuple[str, ...]) -> tuple[str, ...]:
    """Sort columns to apply: the requested ones, else the table's SORTED BY; partition columns are dropped."""
    columns = tuple(requested) or info.sort_columns
    data = {c.name.lower() for c in info.data_columns}
    partition = {c.lower() for c in info.partition_columns}
    unknown = [c for c in columns if c.lower() not in data | partition]
    if unknown:
        raise OperationError(
            f"sort column(s) {', '.join(unknown)} are not columns of {info.qualified_name} "
            f"(columns: {', '.join(sorted(data))}); fix sort_columns / --sort-columns"
        )
    dropped = [c for c in columns if c.lower() in partition]
    if dropped:
        log.info(
            "%s: partition column(s) %s are constant within a partition; not sorting by them",
            info.qualified_name,
            ", ".join(dropped),
        )
    return tuple(c for c in columns if c.lower() not in partition)


def arrange(df: DataFrame, sort_columns: tuple[str, ...], target: int) -> DataFrame:
    """`target` output files: range-partitioned and sorted by the sort columns, else coalesced."""
    if sort_columns:
        return df.repartitionByRange(target, *sort_columns).sortWithinPartitions(*sort_columns)
    return df.coalesce(target)
