"""Several units rewritten in ONE Spark job: one read of every unit's input files, one shuffle, one write.

Each row is given its unit (from the directory of the file it was read from) and, in a unit of several output
files, a bucket below that count from its content hash; a shuffle puts each (unit, bucket) on a task of its own, each
task sorts its rows by the sort columns, and the write, partitioned by the unit, puts unit `i`'s files in
`<root>/__lk_unit=i/` (`output`), which the caller moves, with one rename, to the unit's staging sibling. The job
computes nothing else: the fingerprints that prove each unit's output are taken afterwards, by the batch's one
verification read of its inputs and outputs (`ops/batch.py`), so the job's cost does not grow with its units.

One job has one set of SQL settings and one codec: the caller groups units by them (`rewrite/encodings.py`).
Compared with one job per unit, a unit of several files has each file sorted but not range-partitioned across its
files by the sort columns (no sampling pass), and a failure fails every unit of the job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.fs.locations import child
from lakekeeper_dagster.engine.hive.model import TableInfo, sql_string
from lakekeeper_dagster.engine.rewrite.encodings import format_options
from lakekeeper_dagster.engine.rewrite.fingerprint import row_hash
from lakekeeper_dagster.engine.rewrite.schema import listed_on_driver, read_files
from spark_resources.bulk import driver_bulk

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

UNIT_COLUMN = "__lk_unit"
_TASK = "__lk_task"
COLUMN_PREFIX = "__lk_"  # a table with a column of this prefix is written one job a unit (`ops/write.py`)
_MASK = 0xFFFFFFFF


@dataclass(frozen=True)
class UnitWrite:
    """One unit of a one-job write: the data files the Spark write reads, and how many files it writes."""

    paths: list[str]
    target_files: int


def output(root: str, position: int) -> str:
    """Where the one-job write under `root` puts the files of the unit at `position` of its list."""
    return child(root, f"{UNIT_COLUMN}={position}")


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _MASK


def murmur3_int(value: int, seed: int = 42) -> int:
    """Spark's `hash()` of an INT value (Murmur3_x86_32.hashInt, seed 42), as a signed 32-bit int."""
    k1 = _rotl((value & _MASK) * 0xCC9E2D51 & _MASK, 15) * 0x1B873593 & _MASK
    h1 = (_rotl(seed ^ k1, 13) * 5 + 0xE6546B64) & _MASK
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def task_keys(tasks: int) -> list[int]:
    """For each shuffle partition t < tasks, an INT key that Spark's hash partitioning (pmod(hash(key), tasks))
    sends to exactly t: each (unit, bucket) then gets a task of its own, never sharing one with another bucket."""
    keys: dict[int, int] = {}
    value = 0
    while len(keys) < tasks:
        keys.setdefault(murmur3_int(value) % tasks, value)  # Python's % is Spark's pmod for a positive divisor
        value += 1
    return [keys[t] for t in range(tasks)]


def _directory_keys(spark: SparkSession, units: list[UnitWrite]) -> dict[str, int]:
    """Each input directory as Spark's `_metadata.file_path` spells it (the Hadoop Path's URI), to its unit."""
    directories = [
        (position, d) for position, unit in enumerate(units) for d in {p.rsplit("/", 1)[0] for p in unit.paths}
    ]
    uris = json.loads(driver_bulk(spark).pathUris(json.dumps([d for _, d in directories])))
    keys: dict[str, int] = {}
    for (position, directory), key in zip(directories, uris, strict=True):
        if keys.setdefault(key, position) != position:
            raise ValueError(f"two units of one write read directory {directory}")
    return keys


def _literal_array(values: list[int]) -> str:
    return f"array({', '.join(str(v) for v in values)})"


def write_units(
    spark: SparkSession,
    info: TableInfo,
    schema: StructType,
    units: list[UnitWrite],
    sort_columns: tuple[str, ...],
    codec: str,
    root: str,
) -> None:
    """Write `units` under `root` (`output(root, i)` each) in one Spark job of `spark` (the group's write session).
    A file read that no unit owns fails the job."""
    from pyspark.sql import functions as F

    keys = _directory_keys(spark, units)
    targets = [unit.target_files for unit in units]
    tasks = sum(targets)
    paths = [p for unit in units for p in unit.paths]
    for key, value in listed_on_driver(paths).items():
        spark.conf.set(key, value)
    df = read_files(spark, info, schema, paths)
    file_path = F.col("_metadata.file_path")
    # literals as SQL text: one py4j call each, where a column a value costs a round trip a unit
    lookup = F.expr(f"map({', '.join(f'{sql_string(key)}, {position}' for key, position in keys.items())})")
    stray = F.raise_error(F.concat(F.lit("a file of no unit of this write: "), file_path))
    df = df.withColumn(UNIT_COLUMN, F.coalesce(lookup[F.regexp_replace(file_path, "/[^/]*$", "")], stray))
    u = F.col(UNIT_COLUMN)
    offset = F.element_at(F.expr(_literal_array(list(accumulate([0] + targets[:-1])))), u + 1)
    target = F.element_at(F.expr(_literal_array(targets)), u + 1)
    # the content hash only where a unit has several files (evaluated lazily): a deterministic bucket, so a task run
    # again puts each row where its first run did
    bucket = F.when(target > 1, F.pmod(row_hash(schema), target)).otherwise(F.lit(0))
    slot = (offset + bucket).cast("int")  # the row's (unit, bucket), 0 .. tasks - 1
    task = F.element_at(F.expr(_literal_array(task_keys(tasks))), slot + 1)
    df = df.withColumn(_TASK, task).repartition(tasks, F.col(_TASK)).drop(_TASK)
    writer = df.sortWithinPartitions(UNIT_COLUMN, *sort_columns).write.mode("errorifexists").partitionBy(UNIT_COLUMN)
    writer.format(info.file_format).options(**format_options(info)).option("compression", codec).save(root)
