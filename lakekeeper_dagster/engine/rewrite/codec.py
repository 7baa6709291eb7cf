"""Which codec a rewrite writes: the table's TBLPROPERTIES, else what the existing files use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.fs.storage import DataFile
from lakekeeper_dagster.engine.hive.model import TableInfo
from spark_resources.py4j import hadoop_conf, jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def normalize_codec(codec: str) -> str:
    return codec.strip().lower()


def existing_codec(spark: SparkSession, info: TableInfo, file: DataFile) -> str:
    """The codec of an existing data file, read from its footer (Parquet) or postscript (ORC)."""
    java = jvm(spark)
    conf = hadoop_conf(spark)
    path = java.org.apache.hadoop.fs.Path(file.path)
    if info.file_format == "parquet":
        reader = java.org.apache.parquet.hadoop.ParquetFileReader.open(
            java.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(path, conf)
        )
        try:
            blocks = reader.getFooter().getBlocks()
            if blocks.isEmpty() or blocks.get(0).getColumns().isEmpty():
                return "snappy"
            return str(blocks.get(0).getColumns().get(0).getCodec().name()).lower()
        finally:
            reader.close()
    reader = java.org.apache.orc.OrcFile.createReader(path, java.org.apache.orc.OrcFile.readerOptions(conf))
    try:
        return str(reader.getCompressionKind().name()).lower()
    finally:
        reader.close()


def choose_codec(spark: SparkSession, info: TableInfo, files: list[DataFile]) -> str:
    """TBLPROPERTIES' codec, else the codec the existing files use."""
    if info.codec_property:
        return normalize_codec(info.codec_property)
    return existing_codec(spark, info, files[0])
