"""What data files say about themselves, read from their metadata through the JVM (not through a Spark read).

A Parquet footer or an ORC file tail gives the row count the writer recorded, the column names, the row groups
(stripes), codecs, writer and key-value metadata and, for Parquet, the physical encodings a rewrite must keep.
Verification counts rows from here, independently of Spark's reader, so a file Spark skips (ignoreCorruptFiles /
ignoreMissingFiles) or reads short cannot pass.

Cost: a Parquet footer is read in the JVM and comes back whole as one JSON document (`ParquetMetadata.toJSON`),
five py4j round trips a file whatever its columns; an ORC tail about a dozen plus two a stripe. The readers run on
the driver; a truncated or unreadable file fails right here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakekeeper_dagster.engine.errors import UnitFailure
from spark_resources.py4j import hadoop_conf, java_cause, java_class

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_VERSION_KEY = "org.apache.spark.version"
LEGACY_DATETIME_KEY = "org.apache.spark.legacyDateTime"
LEGACY_INT96_KEY = "org.apache.spark.legacyINT96"
_TIMESTAMP_TYPES = {"TIMESTAMP_MILLIS", "TIMESTAMP_MICROS"}  # Parquet converted types of a timestamp annotation


@dataclass(frozen=True)
class FileFooter:
    """One data file's own account of itself.

    `timestamp_type`: how the file stores timestamps, as `spark.sql.parquet.outputTimestampType` names it (INT96,
    TIMESTAMP_MICROS, TIMESTAMP_MILLIS), None without a timestamp column (or ORC). `decimal_legacy`: True when its
    decimals of up to 18 digits are fixed-length binaries (Hive's layout, Spark's writeLegacyFormat), False when
    INT32/INT64, None without such a decimal. `datetime_rebase` / `int96_rebase`: LEGACY or CORRECTED as Spark
    recorded them for a Spark 3+ file, LEGACY for a file of an older Spark, None for another writer's file or when
    the file holds no value they apply to (dates and INT64 timestamps; INT96 timestamps).

    `row_groups`: (rows, compressed bytes) of each Parquet row group / ORC stripe, in file order (`rows` is their
    sum). `codecs`: the distinct compression codecs, sorted (ORC: its one CompressionKind); `codec`: the one a file is
    taken to use, lower case: its first column chunk's (ORC: its CompressionKind), "" without row groups.
    `physical_schema`: Parquet's MessageType / ORC's TypeDescription as text. `writer`: Parquet's created_by; ORC's
    "file version|writer version|software version". `key_values`: the key-value (ORC: user) metadata, sorted, values
    as UTF-8 text or else hex. `encrypted`: a Parquet file with an encrypted footer or encrypted columns (never ORC).
    """

    path: str
    rows: int
    columns: tuple[str, ...]
    timestamp_type: str | None = None
    decimal_legacy: bool | None = None
    datetime_rebase: str | None = None
    int96_rebase: str | None = None
    row_groups: tuple[tuple[int, int], ...] = ()
    codecs: tuple[str, ...] = ()
    codec: str = ""
    physical_schema: str = ""
    writer: str = ""
    key_values: tuple[tuple[str, str], ...] = ()
    encrypted: bool = False


@dataclass(frozen=True)
class _Classes:
    """The Java classes a footer reader calls: Hadoop's Path, the format's reader (and Parquet's metadata)."""

    path: Any
    reader: Any
    metadata: Any = None


def _unreadable(path: str, label: str, error: Exception) -> UnitFailure:
    return UnitFailure(
        f"{label}: could not read or write its data: data file {path} cannot be read as its format says "
        f"(truncated, corrupt or gone?): {java_cause(error)}. Nothing was changed; repair or remove the file, then "
        "retry."
    )


def _leaf_encoding(primitive: dict[str, Any]) -> tuple[str | None, bool | None, bool] | None:
    """(timestamp type, decimal layout, holds values Spark rebases) of one leaf column, from its JSON form; None
    when the JSON cannot tell (a NANOS unit: a TIMESTAMP and a TIME annotation serialize alike)."""
    physical = primitive["primitiveTypeName"]
    if physical == "INT96":
        return "INT96", None, False
    annotation, converted = primitive.get("logicalTypeAnnotation"), primitive.get("originalType")
    if physical not in {"INT64", "INT32", "FIXED_LEN_BYTE_ARRAY"} or annotation is None:
        return None, None, False
    if "unit" in annotation and converted is None:
        return None
    if converted in _TIMESTAMP_TYPES:
        return f"TIMESTAMP_{annotation['unit']}", None, True
    if converted == "DATE":
        return None, None, True
    if converted == "DECIMAL" and int(annotation["precision"]) <= 18:
        return None, physical == "FIXED_LEN_BYTE_ARRAY", False
    return None, None, False


def _parquet_encodings(columns: list[dict[str, Any]]) -> tuple[set[str], set[bool], bool] | None:
    """The timestamp types, decimal layouts and whether dates or INT64 timestamps (the values Spark rebases) occur,
    over a Parquet schema's leaf columns (nested ones included); None when the JSON form cannot tell."""
    timestamps: set[str] = set()
    decimals: set[bool] = set()
    dates = False
    for column in columns:
        leaf = _leaf_encoding(column["primitiveType"])
        if leaf is None:
            return None
        timestamp, decimal, rebased = leaf
        if timestamp:
            timestamps.add(timestamp)
        if decimal is not None:
            decimals.add(decimal)
        dates = dates or rebased
    return timestamps, decimals, dates


def _walked_encodings(schema) -> tuple[set[str], set[bool], bool]:
    """`_parquet_encodings` through the schema's Java objects (three round trips a column): the rare file whose
    JSON form cannot tell a TIMESTAMP(NANOS) from a TIME(NANOS)."""
    timestamps: set[str] = set()
    decimals: set[bool] = set()
    dates = False
    for column in schema.getColumns():
        primitive = column.getPrimitiveType()
        physical = str(primitive.getPrimitiveTypeName().name())
        if physical == "INT96":
            timestamps.add("INT96")
            continue
        annotation = primitive.getLogicalTypeAnnotation()
        if physical not in {"INT64", "INT32", "FIXED_LEN_BYTE_ARRAY"} or annotation is None:
            continue
        kind = str(annotation.getClass().getSimpleName())
        if kind == "TimestampLogicalTypeAnnotation":
            timestamps.add(f"TIMESTAMP_{annotation.getUnit().name()}")
            dates = True
        elif kind == "DateLogicalTypeAnnotation":
            dates = True
        elif kind == "DecimalLogicalTypeAnnotation" and int(annotation.getPrecision()) <= 18:
            decimals.add(physical == "FIXED_LEN_BYTE_ARRAY")
    return timestamps, decimals, dates


def _rebase(metadata: dict[str, str], key: str) -> str | None:
    version = metadata.get(SPARK_VERSION_KEY)
    if version is None:
        return None
    if int(str(version).split(".", 1)[0]) < 3 or key in metadata:
        return "LEGACY"
    return "CORRECTED"


def _walked_parquet(footer, path: str) -> FileFooter:
    """A footer through its Java objects (a round trip a value): the file with encrypted columns, whose metadata
    cannot be read without their keys (the figures count the other columns)."""
    meta = footer.getFileMetaData()
    schema = meta.getSchema()
    metadata = {str(k): str(v) for k, v in dict(meta.getKeyValueMetaData()).items()}
    timestamps, decimals, dates = _walked_encodings(schema)
    blocks = list(footer.getBlocks())
    plain = [[chunk for chunk in block.getColumns() if not chunk.isEncrypted()] for block in blocks]
    return FileFooter(
        path,
        sum(int(b.getRowCount()) for b in blocks),
        tuple(str(field.getName()) for field in schema.getFields()),
        timestamp_type="+".join(sorted(timestamps)) or None,
        decimal_legacy=decimals.pop() if len(decimals) == 1 else None,
        datetime_rebase=_rebase(metadata, LEGACY_DATETIME_KEY) if dates else None,
        int96_rebase=_rebase(metadata, LEGACY_INT96_KEY) if "INT96" in timestamps else None,
        row_groups=tuple(
            (int(b.getRowCount()), sum(int(c.getTotalSize()) for c in chunks))
            for b, chunks in zip(blocks, plain, strict=True)
        ),
        codecs=tuple(sorted({str(c.getCodec().name()) for chunks in plain for c in chunks})),
        codec=next((str(c.getCodec().name()).lower() for chunks in plain for c in chunks), ""),
        physical_schema=str(schema.toString()),
        writer=str(meta.getCreatedBy() or ""),
        key_values=tuple(sorted(metadata.items())),
        encrypted=True,
    )


def _parquet(java: _Classes, conf, path: str) -> FileFooter:
    footer = java.reader.readFooter(conf, java.path(path))
    document = json.loads(java.metadata.toJSON(footer))
    if "blocks" not in document:  # an encrypted file's JSON is its file metadata alone
        return _walked_parquet(footer, path)
    meta = document["fileMetaData"]
    schema = footer.getFileMetaData().getSchema()
    blocks = [(int(b["rowCount"]), int(b["compressedSize"])) for b in document["blocks"]]
    chunks = [c for b in document["blocks"] for c in b["columns"]]
    metadata = dict(meta.get("keyValueMetaData") or {})
    encodings = _parquet_encodings(meta["schema"]["columns"]) or _walked_encodings(schema)
    timestamps, decimals, dates = encodings
    return FileFooter(
        path,
        sum(rows for rows, _ in blocks),
        tuple(field["name"] for field in meta["schema"].get("fields", [])),
        timestamp_type="+".join(sorted(timestamps)) or None,  # two kinds in one file: no single rule keeps both
        decimal_legacy=decimals.pop() if len(decimals) == 1 else None,
        datetime_rebase=_rebase(metadata, LEGACY_DATETIME_KEY) if dates else None,
        int96_rebase=_rebase(metadata, LEGACY_INT96_KEY) if "INT96" in timestamps else None,
        row_groups=tuple(blocks),
        codecs=tuple(sorted({str(c["codec"]) for c in chunks})),
        codec=str(chunks[0]["codec"]).lower() if chunks else "",
        physical_schema=str(schema.toString()),
        writer=str(meta.get("createdBy") or ""),
        key_values=tuple(sorted(metadata.items())),
        encrypted=meta.get("encryptionType", "UNENCRYPTED") != "UNENCRYPTED" or any(c["encrypted"] for c in chunks),
    )


def _text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.hex()


def _orc(java: _Classes, conf, path: str) -> FileFooter:
    reader = java.reader.createReader(java.path(path), java.reader.readerOptions(conf))
    try:
        schema = reader.getSchema()
        writer = (reader.getFileVersion().getName(), reader.getWriterVersion().name(), reader.getSoftwareVersion())
        user = reader.getFileTail().getFooter().getMetadataList()
        return FileFooter(
            path,
            int(reader.getNumberOfRows()),
            tuple(str(name) for name in schema.getFieldNames()),
            row_groups=tuple((int(s.getNumberOfRows()), int(s.getLength())) for s in reader.getStripes()),
            codecs=(kind := str(reader.getCompressionKind().name()),),
            codec=kind.lower(),
            physical_schema=str(schema.toString()),
            writer="|".join(str(part) for part in writer),
            key_values=tuple(sorted((str(i.getName()), _text(bytes(i.getValue().toByteArray()))) for i in user)),
        )
    finally:
        reader.close()


def read_footers(spark: SparkSession, file_format: str, paths: list[str], label: str) -> list[FileFooter]:
    """The footer of each Parquet/ORC file (in `paths`' order); UnitFailure naming the first unreadable one."""
    if file_format not in {"parquet", "orc"}:
        raise UnitFailure(f"{label}: cannot count the rows of {file_format} files independently; not compacted")
    conf, path = hadoop_conf(spark), java_class(spark, "org.apache.hadoop.fs.Path")
    if file_format == "parquet":
        reader, metadata = (
            java_class(spark, f"org.apache.parquet.hadoop.{n}")
            for n in ("ParquetFileReader", "metadata.ParquetMetadata")
        )
        classes, read = _Classes(path, reader, metadata), _parquet
    else:
        classes, read = _Classes(path, java_class(spark, "org.apache.orc.OrcFile")), _orc
    footers = []
    for path in paths:
        try:
            footers.append(read(classes, conf, path))
        except Exception as error:
            raise _unreadable(path, label, error) from error
    return footers
