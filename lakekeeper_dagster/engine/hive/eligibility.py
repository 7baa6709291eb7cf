"""Which tables the engine may rewrite, and the one refusal rule shared by the engine and the Dagster surface."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import ConfigError, OperationError
from lakekeeper_dagster.engine.hive.catalog import read_table
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.hive.textserde import text_refusal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REWRITABLE_FORMATS = ("parquet", "orc", "text", "avro")
# Compacted by copying their files' bytes (text concatenated, Avro blocks appended): no value is read and written again
COPIED_FORMATS = ("text", "avro")
_AVRO_INPUT_FORMAT = "org.apache.hadoop.hive.ql.io.avro.AvroContainerInputFormat"


def avro_refusal(info: TableInfo) -> str | None:
    """Why the Avro table's files cannot be block-copied as Hive reads them, or None: only Hive AvroSerDe tables
    (a Spark datasource `USING avro` table is read by spark-avro, which this engine does not prove against)."""
    if (info.provider or "hive").lower() != "hive":
        return f"a Spark datasource table (USING {info.provider}): only Hive Avro (AvroSerDe) tables are compacted"
    if info.input_format != _AVRO_INPUT_FORMAT:
        return f"its input format is {info.input_format}, not {_AVRO_INPUT_FORMAT}: its files may not be Avro files"
    return None


def refusal(info: TableInfo) -> str | None:
    """Why the engine will not rewrite this table, or None."""
    reason = info.skip_reason()
    if reason is None and info.file_format not in REWRITABLE_FORMATS:
        reason = f"{info.file_format} tables cannot be compacted yet (supported: {', '.join(REWRITABLE_FORMATS)})"
    if reason is None and info.file_format == "text":
        reason = text_refusal(info)
    if reason is None and info.file_format == "avro":
        reason = avro_refusal(info)
    return reason


def refuse_copy_options(info: TableInfo, codec: str | None, recompress_only: bool, sort_columns: tuple) -> None:
    """Text and Avro tables are compacted by copying their files' bytes: they keep their codec and row order
    (ConfigError else)."""
    if info.file_format not in COPIED_FORMATS:
        return
    options = (("codec", codec), ("recompress", recompress_only), ("sort_columns", sort_columns))
    asked = [what for what, given in options if given]
    if asked:
        how = "concatenating their files" if info.file_format == "text" else "appending their files' blocks"
        raise ConfigError(
            f"{info.qualified_name}: {info.file_format} tables are compacted by {how}, which keeps their codec "
            f"and row order: {' / '.join(asked)} cannot apply; nothing was changed"
        )


def load_compactable(spark: SparkSession, database: str, table: str) -> TableInfo:
    """The table's metadata, or a clear refusal when it cannot be compacted."""
    info = read_table(spark, database, table)
    reason = refusal(info)
    if reason:
        raise OperationError(f"table {info.qualified_name} cannot be compacted: {reason}")
    return info
