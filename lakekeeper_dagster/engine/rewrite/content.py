"""The content fingerprints a run compares, per file or per directory, by the table's format: Parquet, ORC and text
read by Spark's file sources with the table's schema, Avro files decoded record by record (`avrofiles.py`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.rewrite.avrofiles import avro_fingerprints
from lakekeeper_dagster.engine.rewrite.fingerprint import (
    Fingerprint,
    combine,
    fingerprints_by_directory,
    fingerprints_by_path,
)
from lakekeeper_dagster.engine.rewrite.schema import read_files

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType


def _avro_grouped(spark: SparkSession, paths: list[str], key) -> dict[str, Fingerprint]:
    parts: dict[str, list[Fingerprint]] = {}
    for path, found in avro_fingerprints(spark, paths).items():
        parts.setdefault(key(path), []).append(found)
    return {name: combine(found) for name, found in parts.items()}


def path_fingerprints(
    spark: SparkSession, info: TableInfo, schema: StructType, paths: list[str]
) -> dict[str, Fingerprint]:
    """The fingerprint of each data file under `paths` (files or directories), keyed by its path as Hadoop's
    `Path.toString()` prints it, in one Spark job (labelled by the caller); `spark` is the run's reading session.
    Files that hold no rows do not appear."""
    if info.file_format == "avro":
        return _avro_grouped(spark, paths, lambda path: path)
    return fingerprints_by_path(read_files(spark, info, schema, paths), schema)


def directory_fingerprints(
    spark: SparkSession, info: TableInfo, schema: StructType, paths: list[str]
) -> dict[str, Fingerprint]:
    """The fingerprint of the data files of each directory under `paths`, keyed by the directory as Hadoop's
    `Path.toString()` prints it, in one Spark job (labelled by the caller)."""
    if info.file_format == "avro":
        return _avro_grouped(spark, paths, lambda path: path.rsplit("/", 1)[0])
    return fingerprints_by_directory(read_files(spark, info, schema, paths), schema)
