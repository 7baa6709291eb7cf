"""Avro compaction by block copy: a unit's files are appended, block by block and still encoded, into files of about
the block size (Avro's `DataFileWriter.appendAllFrom`, no recompression); no record is decoded or written again.

Only files whose headers agree go into one output: the same writer schema (so a table whose schema evolved keeps
its old files' records under their old schema, and Hive's AvroSerDe resolves them against the table's schema,
`avro.schema.literal` or `avro.schema.url`, exactly as before), the same codec and the same user metadata, which the
output's header repeats. Each output's header is checked right after it is written; its records are compared with
its inputs' by the unit's verification (`avrofiles.avro_fingerprints`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import UnitFailure
from lakekeeper_dagster.engine.fs.locations import child
from lakekeeper_dagster.engine.fs.storage import DataFile
from lakekeeper_dagster.engine.rewrite.avrofiles import AvroHeader, avro_fingerprints, open_stream, read_header
from lakekeeper_dagster.engine.rewrite.concat import ConcatOutcome
from lakekeeper_dagster.engine.rewrite.fingerprint import combine
from spark_resources.py4j import hadoop_conf, java_cause, job_description, jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def _headers(spark: SparkSession, inputs: list[DataFile], label: str) -> list[AvroHeader]:
    headers = []
    for file in inputs:
        try:
            headers.append(read_header(spark, file.path))
        except Exception as error:
            raise UnitFailure(
                f"{label}: could not read or write its data: data file {file.path} is not a readable Avro container "
                f"file (empty, truncated or corrupt?): {java_cause(error)}. Nothing was changed; repair or remove the "
                "file, then retry."
            ) from error
    return headers


def _bins(files: list[tuple[DataFile, AvroHeader]], target_bytes: int) -> list[list[tuple[DataFile, AvroHeader]]]:
    """Files of one header each, in runs of about `target_bytes` (a bigger file goes alone); headers in order of
    first appearance, files in their listing order."""
    by_header: dict[AvroHeader, list[tuple[DataFile, AvroHeader]]] = {}
    for entry in files:
        by_header.setdefault(entry[1], []).append(entry)
    bins: list[list[tuple[DataFile, AvroHeader]]] = []
    for group in by_header.values():
        size = target_bytes + 1
        for entry in group:
            if size + entry[0].size <= target_bytes:
                bins[-1].append(entry)
                size += entry[0].size
            else:
                bins.append([entry])
                size = entry[0].size
    return bins


def _append(spark: SparkSession, header: AvroHeader, inputs: list[DataFile], output: str) -> None:
    """Write `output` (created exclusively) with `header`, its inputs' blocks copied in order."""
    java = jvm(spark)
    avro, conf = java.org.apache.avro, hadoop_conf(spark)
    location = java.org.apache.hadoop.fs.Path(output)
    fs = location.getFileSystem(conf)
    writer = avro.file.DataFileWriter(avro.generic.GenericDatumWriter())
    writer.setCodec(avro.file.CodecFactory.fromString(header.codec))
    for key, value in header.metadata:
        writer.setMeta(key, bytearray(value))
    writer.create(avro.Schema.Parser().parse(header.schema), fs.create(location, False))
    try:
        for file in inputs:
            stream = open_stream(spark, file.path)
            try:
                writer.appendAllFrom(stream, False)
            finally:
                stream.close()
    finally:
        writer.close()


def append_unit(
    spark: SparkSession, inputs: list[DataFile], staging: tuple[str, str], target_bytes: int, label: str
) -> ConcatOutcome:
    """Append an Avro unit's `inputs` into `staging` (directory, file name prefix), files of about `target_bytes`,
    each output's header checked; the inputs' fingerprint read by `spark`, the run's reading session."""
    headers = _headers(spark, inputs, label)
    directory, prefix = staging
    java = jvm(spark)
    location = java.org.apache.hadoop.fs.Path(directory)
    location.getFileSystem(hadoop_conf(spark)).mkdirs(location)
    bins = _bins(list(zip(inputs, headers, strict=True)), target_bytes)
    for number, group in enumerate(bins):
        output = child(directory, f"{prefix}-{number}.avro")
        header = group[0][1]
        _append(spark, header, [file for file, _ in group], output)
        if read_header(spark, output) != header:
            raise UnitFailure(
                f"{label}: verification failed: {output} does not repeat its inputs' writer schema, codec and "
                "metadata; the output was deleted and the original files are untouched"
            )
        log.info("%s: appended %d Avro file(s) into %s", label, len(group), output)
    paths = [file.path for file in inputs]
    with job_description(spark, f"lakekeeper compact {label}: fingerprint {len(paths)} Avro file(s)"):
        before = combine(list(avro_fingerprints(spark, paths).values()))
    return ConcatOutcome([], len(paths), len(bins), before)
