"""Which codec a rewrite writes: the run's `codec` option, else the table's TBLPROPERTIES, else what the existing
files use; and whether a unit's files need recompressing to the run's codec."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import ConfigError, UnitFailure
from lakekeeper_dagster.engine.fs.storage import DataFile
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.rewrite.footers import FileFooter, read_footers

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


# the codecs a run may write, as Spark's `compression` write option names them -> as the files' footers name them
# (Parquet CompressionCodecName, ORC CompressionKind); lzo and brotli need native libraries Spark does not ship
CODECS = {
    "parquet": {
        "uncompressed": "UNCOMPRESSED",
        "snappy": "SNAPPY",
        "gzip": "GZIP",
        "lz4_raw": "LZ4_RAW",
        "zstd": "ZSTD",
    },
    "orc": {"none": "NONE", "snappy": "SNAPPY", "zlib": "ZLIB", "lz4": "LZ4", "zstd": "ZSTD"},
}


def normalize_codec(codec: str) -> str:
    return codec.strip().lower()


def validated_codec(codec: str | None, file_format: str | None = None, setting: str = "codec") -> str | None:
    """`codec` normalized, or ConfigError naming `setting` and the allowed values (of `file_format` when given)."""
    if codec is None:
        return None
    allowed = sorted(CODECS[file_format]) if file_format in CODECS else sorted({c for v in CODECS.values() for c in v})
    name = normalize_codec(codec)
    if name not in allowed:
        where = f" for {file_format} tables" if file_format else ""
        raise ConfigError(f"{setting}: unknown codec {codec!r}{where}; allowed: {', '.join(allowed)}")
    return name


def footer_codec(file_format: str, codec: str) -> str:
    """How a file's footer names the codec Spark's `compression` option calls `codec`."""
    return CODECS[file_format][normalize_codec(codec)]


def not_in_codec(footers: list[FileFooter], wanted: str) -> list[FileFooter]:
    """The files holding rows whose codec is not `wanted` (as footers name it). A file without rows has no column
    chunk to compress (a Parquet footer then names no codec): it never makes a unit look in need of recompressing."""
    return [f for f in footers if f.rows and f.codecs != (wanted,)]


def recompression_reason(
    spark: SparkSession, info: TableInfo, files: list[DataFile], codec: str, strict: bool = False
) -> tuple[str, set[str]] | None:
    """Why a unit is rewritten to change its files' codec to `codec`, with the paths of the files holding rows in
    another codec, or None when every file holding rows already has it (read from the footers; a partition already
    in `codec` is never rewritten for it, whatever its empty files say). An unreadable footer leaves the unit as the
    size rule decided (a compaction of it says what is unreadable), or raises its UnitFailure when `strict`."""
    wanted = footer_codec(info.file_format, codec)
    try:
        footers = read_footers(spark, info.file_format, [f.path for f in files], info.qualified_name)
    except UnitFailure as failure:
        if strict:
            raise
        log.warning("%s", failure)
        return None
    others = not_in_codec(footers, wanted)
    if not others:
        return None
    found = sorted({"+".join(f.codecs) for f in others})
    return f"recompress {len(others)} file(s) from {', '.join(found)} to {wanted}", {f.path for f in others}


def choose_codec(info: TableInfo, first: FileFooter, codec: str | None = None) -> str:
    """The run's `codec`, else TBLPROPERTIES' codec, else the codec the unit's first file uses (`first`, its footer;
    snappy when it has no row group)."""
    if codec is not None:
        return normalize_codec(codec)
    if info.codec_property:
        return normalize_codec(info.codec_property)
    return first.codec or "snappy"
