"""What data files say about themselves, read from their metadata through the JVM (not through a Spark read).

A Parquet footer or an ORC file tail gives the row count the writer recorded, the column names, the row groups
(stripes), codecs, writer and key-value metadata and, for Parquet, the physical encodings a rewrite must keep.
Verification counts rows from here, independently of Spark's reader, so a file Spark skips (ignoreCorruptFiles /
ignoreMissingFiles) or reads short cannot pass.

Cost: the footers of all the files asked for are read in the driver's JVM in one call (`spark_resources.bulk`:
a Parquet footer as `ParquetMetadata.toJSON`'s document, an ORC tail as its figures), one py4j round trip in all;
the rare Parquet file the JSON cannot describe (encrypted columns, a nanosecond timestamp) is read again through its
Java objects. A truncated or unreadable file fails right here.
"""

from __future__ import annotations

import base64
import functools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakekeeper_dagster.engine.errors import UnitFailure
from spark_resources.bulk import driver_bulk
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
class _Rereader:
    """Reads one Parquet footer again as Java objects (Hadoop's Path, Parquet's reader, the session's conf)."""

    path: Any
    reader: Any
    conf: Any

    def footer(self, path: str) -> Any:
        return self.reader.readFooter(self.conf, self.path(path))


def _unreadable(path: str, label: str, cause: str) -> UnitFailure:
    return UnitFailure(
        f"{label}: could not read or write its data: data file {path} cannot be read as its format says "
        f"(truncated, corrupt or gone?): {' '.join(cause.split())[:600]}. Nothing was changed; repair or remove the "
        "file, then retry."
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


def _parquet(java: _Rereader, read: dict[str, Any]) -> FileFooter:
    """A Parquet file's footer from `DriverBulk.footers`' account of it (the file read again through its Java
    objects in the rare cases the JSON form cannot tell)."""
    path, document = read["path"], json.loads(read["metadata"])
    if "blocks" not in document:  # an encrypted file's JSON is its file metadata alone
        return _walked_parquet(java.footer(path), path)
    meta = document["fileMetaData"]
    blocks = [(int(b["rowCount"]), int(b["compressedSize"])) for b in document["blocks"]]
    chunks = [c for b in document["blocks"] for c in b["columns"]]
    metadata = dict(meta.get("keyValueMetaData") or {})
    encodings = _parquet_encodings(meta["schema"]["columns"])
    if encodings is None:
        encodings = _walked_encodings(java.footer(path).getFileMetaData().getSchema())
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
        physical_schema=read["schema"],
        writer=str(meta.get("createdBy") or ""),
        key_values=tuple(sorted(metadata.items())),
        encrypted=meta.get("encryptionType", "UNENCRYPTED") != "UNENCRYPTED" or any(c["encrypted"] for c in chunks),
    )


def _text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return value.hex()


def _orc(read: dict[str, Any]) -> FileFooter:
    """An ORC file's tail from `DriverBulk.footers`' account of it."""
    return FileFooter(
        read["path"],
        int(read["rows"]),
        tuple(read["columns"]),
        row_groups=tuple((int(rows), int(size)) for rows, size in read["stripes"]),
        codecs=(read["compression"],),
        codec=read["compression"].lower(),
        physical_schema=read["schema"],
        writer="|".join(str(part) for part in read["writer"]),
        key_values=tuple(sorted((name, _text(base64.b64decode(value))) for name, value in read["user_metadata"])),
    )


def read_footers(spark: SparkSession, file_format: str, paths: list[str], label: str) -> list[FileFooter]:
    """The footer of each Parquet/ORC file (in `paths`' order), all read in the JVM in one call; UnitFailure naming
    the first unreadable one."""
    if file_format not in {"parquet", "orc"}:
        raise UnitFailure(f"{label}: cannot count the rows of {file_format} files independently; not compacted")
    if not paths:
        return []
    conf = hadoop_conf(spark)
    if file_format == "parquet":
        reader = java_class(spark, "org.apache.parquet.hadoop.ParquetFileReader")
        make = functools.partial(_parquet, _Rereader(java_class(spark, "org.apache.hadoop.fs.Path"), reader, conf))
    else:
        make = _orc
    footers = []
    for read in json.loads(driver_bulk(spark).footers(conf, file_format, json.dumps(paths))):
        if "error" in read:
            raise _unreadable(read["path"], label, read["error"])
        try:
            footers.append(make(read))
        except Exception as error:
            raise _unreadable(read["path"], label, java_cause(error)) from error
    return footers
