"""Delimited TEXTFILE compaction by byte concatenation: a unit's files are copied whole, one after the other, into
files of about the block size; no value is ever parsed or written again.

Hive's TextInputFormat reads a file as lines (LF, CR or CRLF) and `LazySimpleSerDe` turns each line into a row by the
table's SerDe properties (field, collection and map-key delimiters, escape character, null marker, encoding). A
concatenation keeps every line byte for byte, so every row, its escapes, null markers and nested values included,
reads back identically under the same properties, which the compaction never changes. A file whose last line has no
line end gets one (LF) before the next file, so the two lines stay two rows; an empty file adds nothing.

Compressed files are concatenated compressed: gzip members, and zlib (Hadoop's DefaultCodec, `.deflate`) streams,
one after the other are one valid stream that Hadoop's codecs (Hive's and Spark's readers) read through; an output
keeps its inputs' codec and extension. Files of other codecs (bzip2, snappy, lz4, zstd...) are refused: their
readers' handling of concatenated streams is not relied on.

Checks: each output's size is the sum of its inputs' (and of the line ends added), and reading it through its codec
gives back the sum of their decompressed bytes; the unit's content fingerprint (rows and a checksum of the lines, as
Spark's text source reads them) is taken from the inputs here and from the outputs at verification, and must match.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import UnitFailure
from lakekeeper_dagster.engine.fs.locations import child
from lakekeeper_dagster.engine.fs.storage import DataFile
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.rewrite.concat import ConcatOutcome
from lakekeeper_dagster.engine.rewrite.fingerprint import combine, fingerprints_by_file
from lakekeeper_dagster.engine.rewrite.schema import read_files
from spark_resources.py4j import hadoop_conf, java_cause, job_description, jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

# Hadoop codecs whose streams, concatenated, read back as one stream (by class name; None: not compressed)
CONCATENABLE_CODECS = (
    "org.apache.hadoop.io.compress.GzipCodec",
    "org.apache.hadoop.io.compress.DefaultCodec",
    "org.apache.hadoop.io.compress.DeflateCodec",  # `.deflate`: DefaultCodec under its own name
)
_STEP = (1 << 31) - 1  # the most a Java int holds


@dataclass(frozen=True)
class _Piece:
    """One input file: its path, size, codec class (None: plain), decompressed length and whether it ends a line."""

    path: str
    size: int
    codec: str | None
    length: int
    ends_line: bool


class _Hadoop:
    """The Hadoop calls of a concatenation, looked up once (each step of a Java name is a py4j round trip)."""

    def __init__(self, spark: SparkSession):
        self.java = jvm(spark)
        self.conf = hadoop_conf(spark)
        self.factory = self.java.org.apache.hadoop.io.compress.CompressionCodecFactory(self.conf)
        self.io = self.java.org.apache.hadoop.io.IOUtils

    def path(self, location: str):
        return self.java.org.apache.hadoop.fs.Path(location)

    def fs(self, location: str):
        return self.path(location).getFileSystem(self.conf)

    def codec(self, location: str):
        return self.factory.getCodec(self.path(location))

    @staticmethod
    def _skip(stream, count: int) -> int:
        """Skip up to `count` bytes of a stream; how many. A decompressor stream skips by reading, and takes an int
        count (a larger one would wrap), so it goes in steps of `_STEP`."""
        skipped = 0
        while skipped < count and (step := int(stream.skip(min(count - skipped, _STEP)))) > 0:
            skipped += step
        return skipped

    def tail(self, location: str, size: int, codec) -> tuple[int, int]:
        """(decompressed length, last byte or -1) of a file, read through its codec."""
        fs = self.fs(location)
        if codec is None:
            if size == 0:
                return 0, -1
            stream = fs.open(self.path(location))
            try:
                stream.seek(size - 1)
                return size, stream.read()
            finally:
                stream.close()
        stream = codec.createInputStream(fs.open(self.path(location)))
        try:
            length = self._skip(stream, 1 << 62)
        finally:
            stream.close()
        if length == 0:
            return 0, -1
        stream = codec.createInputStream(fs.open(self.path(location)))
        try:
            self._skip(stream, length - 1)
            return length, stream.read()
        finally:
            stream.close()

    def line_end(self, codec) -> bytes:
        """LF as a file of `codec` holds it (a gzip member, a zlib stream), to append after a file without one."""
        if codec is None:
            return b"\n"
        buffer = self.java.java.io.ByteArrayOutputStream()
        stream = codec.createOutputStream(buffer)
        stream.write(10)
        stream.close()
        return bytes(buffer.toByteArray())

    def concatenate(self, pieces: list[_Piece], output: str, codec) -> int:
        """Copy the pieces into `output` (created exclusively), a line end after each that lacks one; its size."""
        fs = self.fs(output)
        end = self.line_end(codec)
        stream = fs.create(self.path(output), False)
        written = 0
        try:
            for piece in pieces:
                source = fs.open(self.path(piece.path))
                try:
                    self.io.copyBytes(source, stream, 1 << 16, False)
                finally:
                    source.close()
                written += piece.size
                if not piece.ends_line:
                    stream.write(end)
                    written += len(end)
        finally:
            stream.close()
        return written


def _pieces(hadoop: _Hadoop, inputs: list[DataFile], label: str) -> list[_Piece]:
    pieces = []
    for file in inputs:
        codec = hadoop.codec(file.path)
        name = str(codec.getClass().getName()) if codec is not None else None
        if name is not None and name not in CONCATENABLE_CODECS:
            raise UnitFailure(
                f"{label}: file {file.path} is compressed with {name}, whose concatenated streams are not relied on "
                "(only plain, gzip and deflate text files are compacted); nothing was changed"
            )
        try:
            length, last = hadoop.tail(file.path, file.size, codec)
        except Exception as error:
            raise UnitFailure(
                f"{label}: could not read or write its data: data file {file.path} cannot be read through its codec "
                f"(truncated, corrupt or gone?): {java_cause(error)}. Nothing was changed; repair or remove the file, "
                "then retry."
            ) from error
        pieces.append(_Piece(file.path, file.size, name, length, length == 0 or last == 10))
    return pieces


def _bins(pieces: list[_Piece], target_bytes: int) -> list[list[_Piece]]:
    """Consecutive runs of files of one codec, of about `target_bytes` each (a bigger file goes alone)."""
    bins: list[list[_Piece]] = []
    size = 0
    for piece in pieces:
        if bins and bins[-1][0].codec == piece.codec and size + piece.size <= target_bytes:
            bins[-1].append(piece)
            size += piece.size
        else:
            bins.append([piece])
            size = piece.size
    return bins


def _check(hadoop: _Hadoop, output: str, pieces: list[_Piece], written: int, label: str) -> None:
    """The output holds every input byte: its size is what was copied, its decompressed length the inputs' sum."""
    added = sum(1 for p in pieces if not p.ends_line)
    expected = sum(p.length for p in pieces) + added
    size = int(hadoop.fs(output).getFileStatus(hadoop.path(output)).getLen())
    length, _ = hadoop.tail(output, size, hadoop.codec(output))
    if size != written or length != expected:
        raise UnitFailure(
            f"{label}: verification failed: the concatenation of {len(pieces)} file(s) into {output} holds {size} "
            f"bytes ({length} decompressed), its inputs {written} ({expected}); the output was deleted and the "
            "original files are untouched"
        )


def concatenate_unit(
    spark: SparkSession,
    info: TableInfo,
    schema: StructType,
    inputs: list[DataFile],
    staging: tuple[str, str],
    target_bytes: int,
    label: str,
) -> ConcatOutcome:
    """Concatenate a text unit's `inputs` into `staging` (directory, file name prefix), files of about
    `target_bytes`, each checked; the inputs' fingerprint (by `schema`, `schema.line_schema`) read by `spark`, the
    run's reading session."""
    hadoop = _Hadoop(spark)
    pieces = _pieces(hadoop, inputs, label)
    directory, prefix = staging
    hadoop.fs(directory).mkdirs(hadoop.path(directory))
    outputs = 0
    for number, group in enumerate(_bins(pieces, target_bytes)):
        codec = hadoop.codec(group[0].path)
        extension = str(codec.getDefaultExtension()) if codec is not None else ""
        output = child(directory, f"{prefix}-{number}{extension}")
        _check(hadoop, output, group, hadoop.concatenate(group, output, codec), label)
        outputs += 1
        log.info("%s: concatenated %d text file(s) into %s", label, len(group), output)
    paths = [p.path for p in pieces]
    with job_description(spark, f"lakekeeper compact {label}: fingerprint {len(paths)} concatenated text file(s)"):
        parts = fingerprints_by_file(read_files(spark, info, schema, paths), schema)
    return ConcatOutcome([], len(paths), outputs, combine(list(parts.values())))
