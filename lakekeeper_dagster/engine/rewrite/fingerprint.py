"""Row count and an order-insensitive content checksum of a DataFrame, over every column."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation
    from pyspark.sql.types import DataType, StructType


@dataclass(frozen=True)
class Fingerprint:
    """Rows and the sum of per-row 64-bit hashes (a multiset hash: file and row order do not matter)."""

    rows: int
    checksum: str

    def to_dict(self) -> dict:
        return {"rows": self.rows, "checksum": self.checksum}


EMPTY = Fingerprint(0, "0")  # no rows


def _has_map(data_type: DataType) -> bool:
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(data_type, MapType):
        return True
    if isinstance(data_type, ArrayType):
        return _has_map(data_type.elementType)
    if isinstance(data_type, StructType):
        return any(_has_map(f.dataType) for f in data_type.fields)
    return False


def row_hash(schema: StructType) -> Column:
    """xxhash64 over every column and its null flag (so `(NULL, 5)` and `(5, NULL)` differ).

    Spark refuses to hash maps; a column holding one is hashed through its JSON form.
    """
    from pyspark.sql import functions as F

    parts = []
    for field in schema.fields:
        column = F.col(f"`{field.name.replace('`', '``')}`")
        value = F.to_json(F.struct(column)) if _has_map(field.dataType) else column
        parts += [value, column.isNull()]
    return F.xxhash64(*parts) if parts else F.lit(0)


def aggregates(schema: StructType) -> list[Column]:
    from pyspark.sql import functions as F

    return [
        F.count(F.lit(1)).alias("rows"),
        F.coalesce(F.sum(row_hash(schema).cast("decimal(38,0)")), F.lit(0).cast("decimal(38,0)")).alias("checksum"),
    ]


def observed(df: DataFrame, name: str) -> tuple[DataFrame, Observation]:
    """`df` with its fingerprint collected as a side effect of the next action on it (no extra read)."""
    from pyspark.sql import Observation

    observation = Observation(name)
    return df.observe(observation, *aggregates(df.schema)), observation


def from_observation(observation: Observation) -> Fingerprint:
    values = observation.get
    return Fingerprint(int(values["rows"]), str(values["checksum"]))


def combine(parts: list[Fingerprint]) -> Fingerprint:
    """The fingerprint of the union of disjoint row sets (rows add up, and so do the hash sums)."""
    return Fingerprint(sum(p.rows for p in parts), str(sum(int(p.checksum) for p in parts))) if parts else EMPTY


def free_column(schema: StructType, name: str) -> str:
    """`name`, prefixed with underscores until no column of `schema` has it (a grouping key beside the data)."""
    while name in {f.name.lower() for f in schema.fields}:
        name = f"_{name}"
    return name


def _per_file(df: DataFrame, schema: StructType, field: str) -> dict[str, Fingerprint]:
    from pyspark.sql import functions as F

    key = free_column(schema, "_lk_file")
    rows = df.groupBy(F.col(f"_metadata.{field}").alias(key)).agg(*aggregates(schema)).collect()
    return {str(row[key]): Fingerprint(int(row["rows"]), str(row["checksum"])) for row in rows}


def fingerprints_by_file(df: DataFrame, schema: StructType) -> dict[str, Fingerprint]:
    """The fingerprint of each file a file-source DataFrame reads, keyed by file name, in one Spark job.

    Files that hold no rows do not appear.
    """
    return _per_file(df, schema, "file_name")


def fingerprints_by_path(df: DataFrame, schema: StructType) -> dict[str, Fingerprint]:
    """The fingerprint of each file a file-source DataFrame reads, in one Spark job, keyed by its path as Hadoop's
    `Path.toString()` prints it (Spark reports file paths URI-encoded).

    Files that hold no rows do not appear.
    """
    from urllib.parse import unquote

    return {unquote(path): part for path, part in _per_file(df, schema, "file_path").items()}


def fingerprints_by_directory(df: DataFrame, schema: StructType) -> dict[str, Fingerprint]:
    """The fingerprint of the files of each directory a file-source DataFrame reads, in one Spark job, keyed by the
    directory as Hadoop's `Path.toString()` prints it.

    Directories whose files hold no rows do not appear.
    """
    parts: dict[str, list[Fingerprint]] = {}
    for path, part in fingerprints_by_path(df, schema).items():
        parts.setdefault(path.rsplit("/", 1)[0], []).append(part)
    return {directory: combine(found) for directory, found in parts.items()}
