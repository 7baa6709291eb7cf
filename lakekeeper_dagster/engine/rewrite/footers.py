"""What data files say about themselves, read from their metadata through the JVM (not through a Spark read).

A Parquet footer or an ORC file tail gives the row count the writer recorded, the column names and, for Parquet,
the physical encodings a rewrite must keep. Verification counts rows from here, independently of Spark's reader,
so a file Spark skips (ignoreCorruptFiles / ignoreMissingFiles) or reads short cannot pass.

Cost: one reader per file, a fixed handful of py4j round trips plus about three per Parquet leaf column of a
timestamp, decimal or INT96 type (on the driver; a truncated or unreadable file fails right here).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import UnitFailure
from spark_resources.py4j import hadoop_conf, java_cause, jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SPARK_VERSION_KEY = "org.apache.spark.version"
LEGACY_DATETIME_KEY = "org.apache.spark.legacyDateTime"
LEGACY_INT96_KEY = "org.apache.spark.legacyINT96"


@dataclass(frozen=True)
class FileFooter:
    """One data file's own account of itself.

    `timestamp_type`: how the file stores timestamps, as `spark.sql.parquet.outputTimestampType` names it (INT96,
    TIMESTAMP_MICROS, TIMESTAMP_MILLIS), None without a timestamp column (or ORC). `decimal_legacy`: True when its
    decimals of up to 18 digits are fixed-length binaries (Hive's layout, Spark's writeLegacyFormat), False when
    INT32/INT64, None without such a decimal. `datetime_rebase` / `int96_rebase`: LEGACY or CORRECTED as Spark
    recorded them for a Spark 3+ file, LEGACY for a file of an older Spark, None for another writer's file or when
    the file holds no value they apply to (dates and INT64 timestamps; INT96 timestamps).
    """

    path: str
    rows: int
    columns: tuple[str, ...]
    timestamp_type: str | None = None
    decimal_legacy: bool | None = None
    datetime_rebase: str | None = None
    int96_rebase: str | None = None
    row_groups: tuple[tuple[int, int], ...] = ()  # per Parquet row group / ORC stripe: (rows, compressed bytes)
    codecs: tuple[str, ...] = ()  # sorted distinct compression codecs (ORC: its CompressionKind)
    physical_schema: str = ""  # Parquet MessageType / ORC TypeDescription, as toString() prints it
    writer: str = ""  # Parquet created_by / ORC "file version|writer version|software version"
    key_values: tuple[tuple[str, str], ...] = ()  # sorted Parquet key-value metadata / ORC user metadata
    encrypted: bool = False  # a Parquet file with an encrypted footer or encrypted columns


def _unreadable(path: str, label: str, error: Exception) -> UnitFailure:
    return UnitFailure(
        f"{label}: could not read or write its data: data file {path} cannot be read as its format says "
        f"(truncated, corrupt or gone?): {java_cause(error)}. Nothing was changed; repair or remove the file, then "
        "retry."
    )


def _parquet_encodings(schema) -> tuple[set[str], set[bool], bool]:
    """The timestamp types, decimal layouts and whether dates or INT64 timestamps (the values Spark rebases) occur,
    over a Parquet schema's leaf columns (nested ones included)."""
    timestamps: set[str] = set()
    decimals: set[bool] = set()
    dates = False
    for column in schema.getColumns():
        primitive = column.getPrimitiveType()
        physical = str(primitive.getPrimitiveTypeName().name())
        if physical == "INT96":
            timestamps.add("INT96")
            continue
        if physical not in {"INT64", "INT32", "FIXED_LEN_BYTE_ARRAY"}:
            continue
        annotation = primitive.getLogicalTypeAnnotation()
        if annotation is None:
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


def _rebase(metadata, key: str) -> str | None:
    version = metadata.get(SPARK_VERSION_KEY)
    if version is None:
        return None
    if int(str(version).split(".", 1)[0]) < 3 or key in metadata:
        return "LEGACY"
    return "CORRECTED"


def _text(java, value) -> str:
    """An ORC user metadata value (a ByteBuffer) as UTF-8 text where it decodes, else hex."""
    latin = java.java.nio.charset.StandardCharsets.ISO_8859_1  # one char a byte: the bytes come back exactly
    data = str(latin.decode(value.duplicate()).toString()).encode("latin-1")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.hex()


def _parquet(java, conf, path: str) -> FileFooter:
    hadoop_path = java.org.apache.hadoop.fs.Path(path)
    reader = java.org.apache.parquet.hadoop.ParquetFileReader.open(  # decryption as the cluster's conf sets it
        java.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(hadoop_path, conf),
        java.org.apache.parquet.HadoopReadOptions.builder(conf, hadoop_path).build(),
    )
    try:
        footer = reader.getFooter()
        meta = footer.getFileMetaData()
        schema = meta.getSchema()
        metadata = meta.getKeyValueMetaData()
        timestamps, decimals, dates = _parquet_encodings(schema)
        blocks = [list(block.getColumns()) for block in footer.getBlocks()]
        encrypted = str(meta.getEncryptionType().name()) != "UNENCRYPTED"
        # an encrypted column's metadata cannot be read without its key: the figures count the others
        plain = [[chunk for chunk in block if not chunk.isEncrypted()] for block in blocks]
        return FileFooter(
            path,
            int(reader.getRecordCount()),
            tuple(str(field.getName()) for field in schema.getFields()),
            timestamp_type="+".join(sorted(timestamps)) or None,  # two kinds in one file: no single rule keeps both
            decimal_legacy=decimals.pop() if len(decimals) == 1 else None,
            datetime_rebase=_rebase(metadata, LEGACY_DATETIME_KEY) if dates else None,
            int96_rebase=_rebase(metadata, LEGACY_INT96_KEY) if "INT96" in timestamps else None,
            row_groups=tuple(
                (int(b.getRowCount()), sum(int(c.getTotalSize()) for c in chunks))
                for b, chunks in zip(footer.getBlocks(), plain, strict=True)
            ),
            codecs=tuple(sorted({str(c.getCodec().name()) for chunks in plain for c in chunks})),
            physical_schema=str(schema.toString()),
            writer=str(meta.getCreatedBy() or ""),
            key_values=tuple(sorted((str(k), str(v)) for k, v in dict(metadata).items())),
            encrypted=encrypted or any(len(p) < len(b) for p, b in zip(plain, blocks, strict=True)),
        )
    finally:
        reader.close()


def _orc(java, conf, path: str) -> FileFooter:
    reader = java.org.apache.orc.OrcFile.createReader(
        java.org.apache.hadoop.fs.Path(path), java.org.apache.orc.OrcFile.readerOptions(conf)
    )
    try:
        names = tuple(str(name) for name in reader.getSchema().getFieldNames())
        keys = reader.getMetadataKeys()
        versions = (reader.getFileVersion().getName(), reader.getWriterVersion().name(), reader.getSoftwareVersion())
        return FileFooter(
            path,
            int(reader.getNumberOfRows()),
            names,
            row_groups=tuple((int(s.getNumberOfRows()), int(s.getLength())) for s in reader.getStripes()),
            codecs=(str(reader.getCompressionKind().name()),),
            physical_schema=str(reader.getSchema().toString()),
            writer="|".join(str(v) for v in versions),
            key_values=tuple(sorted((str(k), _text(java, reader.getMetadataValue(k))) for k in keys)),
        )
    finally:
        reader.close()


def read_footers(spark: SparkSession, file_format: str, paths: list[str], label: str) -> list[FileFooter]:
    """The footer of each Parquet/ORC file (in `paths`' order); UnitFailure naming the first unreadable one."""
    if file_format not in {"parquet", "orc"}:
        raise UnitFailure(f"{label}: cannot count the rows of {file_format} files independently; not compacted")
    java, conf = jvm(spark), hadoop_conf(spark)
    read = _parquet if file_format == "parquet" else _orc
    footers = []
    for path in paths:
        try:
            footers.append(read(java, conf, path))
        except Exception as error:
            raise _unreadable(path, label, error) from error
    return footers
