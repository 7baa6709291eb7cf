"""Avro container files: their headers, and the rows and content checksum of each, read by a labelled Spark job.

A file's content fingerprint is taken where its bytes are (Spark's `binaryFile` source lists and reads the files,
hidden files skipped, as the Parquet and ORC reads do): each record decoded with the file's own writer schema
(`fastavro`, an implementation independent of the Java library that writes, `avroappend.py`) and its decoded values
(logical types applied: a decimal's scale, a date) hashed together with the schema's Parsing Canonical Form, so a
record lost, doubled, changed or read under another schema changes the sum. Files are read whole: an Avro file over
2 GiB (Spark's limit for one binary value) fails the read, named.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakekeeper_dagster.engine.rewrite.fingerprint import Fingerprint, combine
from spark_resources.py4j import hadoop_conf, jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RESERVED_META = "avro."  # header keys the Avro library writes itself (schema, codec)


@dataclass(frozen=True)
class AvroHeader:
    """What a file's header fixes for every block it holds: its writer schema, codec and user metadata."""

    schema: str
    codec: str
    metadata: tuple[tuple[str, bytes], ...]


def open_stream(spark: SparkSession, path: str) -> Any:
    """An Avro `DataFileStream` over the file at `path`, its header read (a non-Avro file raises, nothing left open);
    the caller closes it."""
    java = jvm(spark)
    location = java.org.apache.hadoop.fs.Path(path)
    opened = location.getFileSystem(hadoop_conf(spark)).open(location)
    try:
        return java.org.apache.avro.file.DataFileStream(opened, java.org.apache.avro.generic.GenericDatumReader())
    except Exception:
        opened.close()  # not an Avro file: the stream was never handed over
        raise


def read_header(spark: SparkSession, path: str) -> AvroHeader:
    """The header of the Avro container file at `path` (the JVM's Avro library; a non-Avro file raises)."""
    stream = open_stream(spark, path)
    try:
        keys = sorted(str(k) for k in stream.getMetaKeys() if not str(k).startswith(RESERVED_META))
        return AvroHeader(
            schema=str(stream.getSchema().toString()),
            codec=str(stream.getMetaString("avro.codec") or "null"),
            metadata=tuple((k, bytes(stream.getMeta(k))) for k in keys),
        )
    finally:
        stream.close()


def avro_fingerprints(spark: SparkSession, paths: list[str]) -> dict[str, Fingerprint]:
    """The fingerprint of every Avro file under `paths` (files or directories), keyed by path as Hadoop's
    `Path.toString()` prints it, in one Spark job (labelled by the caller)."""

    def file_fingerprint(row) -> tuple[str, int, int]:
        """(path, records, sum of 64-bit record hashes) of one file's bytes, on an executor. A nested function
        pickles by value: an executor needs `fastavro`, not this package, hence the imports here."""
        import hashlib
        import io

        import fastavro

        reader = fastavro.reader(io.BytesIO(row.content))
        schema = fastavro.schema.to_parsing_canonical_form(reader.writer_schema).encode()
        rows, total = 0, 0
        for record in reader:
            digest = hashlib.blake2b(schema + b"\0" + repr(record).encode(), digest_size=8).digest()
            rows, total = rows + 1, total + int.from_bytes(digest, "little", signed=True)
        return row.path, rows, total

    if not paths:
        return {}
    files = spark.read.format("binaryFile").load(paths).select("path", "content")
    found: dict[str, list[Fingerprint]] = {}
    for path, rows, total in files.rdd.map(file_fingerprint).collect():
        found.setdefault(path, []).append(Fingerprint(rows, str(total)))
    return {path: combine(parts) for path, parts in found.items()}
