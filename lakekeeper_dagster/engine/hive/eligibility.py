"""Which tables the engine may rewrite, and the one refusal rule shared by the engine and the Dagster surface."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import OperationError
from lakekeeper_dagster.engine.hive.catalog import read_table
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.hive.textserde import text_refusal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REWRITABLE_FORMATS = ("parquet", "orc", "text")  # text: LazySimpleSerDe files, concatenated


def refusal(info: TableInfo) -> str | None:
    """Why the engine will not rewrite this table, or None."""
    reason = info.skip_reason()
    if reason is None and info.file_format not in REWRITABLE_FORMATS:
        reason = f"{info.file_format} tables cannot be compacted yet (supported: {', '.join(REWRITABLE_FORMATS)})"
    if reason is None and info.file_format == "text":
        reason = text_refusal(info)
    return reason


def load_compactable(spark: SparkSession, database: str, table: str) -> TableInfo:
    """The table's metadata, or a clear refusal when it cannot be compacted."""
    info = read_table(spark, database, table)
    reason = refusal(info)
    if reason:
        raise OperationError(f"table {info.qualified_name} cannot be compacted: {reason}")
    return info
