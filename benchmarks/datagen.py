"""Deterministic small-file Parquet data for the benchmarks, and its registration as an external Hive table.

The files are written with pyarrow (no Spark needed, fast): partition `p` of `partitions`, file `f` of `files`
holds a fixed slice of `rows` rows whose values come from a generator seeded with (seed, p, f), so the same
parameters always give byte-identical files. Optionally each partition also holds one large, already compacted file
of `large_rows` rows (`part-large.snappy.parquet`, ids after the small files' ones, seeded with (seed, p, LARGE)),
and `row_group_rows` sets the Parquet row group length (0: pyarrow's default). Columns: id BIGINT (unique),
user_id BIGINT, amount DOUBLE, category STRING (16 values), payload STRING (24 random hex chars), n INT; partition
column dt STRING.
"""

from __future__ import annotations

import datetime
import json
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

COLUMNS = "id BIGINT, user_id BIGINT, amount DOUBLE, category STRING, payload STRING, n INT"
PARTITION_COLUMN = "dt"
CATEGORIES = [f"category_{i:02d}" for i in range(16)]
FIRST_DAY = datetime.date(2024, 1, 1)
LARGE = 1_000_000  # the generator seed's file number of a partition's large file
LARGE_FILE = "part-large.snappy.parquet"
SUMMARY_FILE = "_benchmark_summary.json"  # in the master copy only


@dataclass(frozen=True)
class DataSpec:
    partitions: int
    files: int
    rows: int
    seed: int = 8
    large_rows: int = 0  # rows of one large file per partition (0: none)
    row_group_rows: int = 0  # Parquet row group length (0: pyarrow's default)

    @property
    def name(self) -> str:
        extra = (f"_l{self.large_rows}" if self.large_rows else "") + (
            f"_g{self.row_group_rows}" if self.row_group_rows else ""
        )
        return f"p{self.partitions}_f{self.files}_r{self.rows}_s{self.seed}{extra}"

    def partition_value(self, index: int) -> str:
        return (FIRST_DAY + datetime.timedelta(days=index)).isoformat()

    def partition_dirs(self) -> list[str]:
        return [f"{PARTITION_COLUMN}={self.partition_value(p)}" for p in range(self.partitions)]


def _slice(total: int, parts: int, index: int) -> tuple[int, int]:
    """[start, end) of part `index` when `total` items are split as evenly as possible into `parts`."""
    base, extra = divmod(total, parts)
    start = index * base + min(index, extra)
    return start, start + base + (1 if index < extra else 0)


def _file_table(spec: DataSpec, partition: int, file: int):
    import numpy as np
    import pyarrow as pa

    if file == LARGE:
        first = spec.rows + partition * spec.large_rows
        last = first + spec.large_rows
    else:
        first, last = _slice(spec.rows, spec.partitions * spec.files, partition * spec.files + file)
    n = last - first
    rng = np.random.default_rng([spec.seed, partition, file])
    hexdigits = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
    nibbles = rng.integers(0, 16, size=(n, 24), dtype=np.uint8)
    payload = hexdigits[nibbles].view("S24").ravel().astype(str)
    return pa.table(
        {
            "id": pa.array(np.arange(first, last, dtype=np.int64)),
            "user_id": pa.array(rng.integers(0, 10_000_000, size=n, dtype=np.int64)),
            "amount": pa.array(np.round(rng.random(n) * 1000, 2)),
            "category": pa.array(np.array(CATEGORIES)[rng.integers(0, len(CATEGORIES), size=n)]),
            "payload": pa.array(payload),
            "n": pa.array((np.arange(first, last) % 7).astype(np.int32)),
        }
    )


def generate(spec: DataSpec, root: Path) -> dict:
    """Write the data set under `root/<spec.name>` once (kept as the master copy); return its summary."""
    import pyarrow.parquet as pq

    target = root / spec.name
    summary_file = target / SUMMARY_FILE
    if summary_file.exists():
        return json.loads(summary_file.read_text())
    partial = root / f".{spec.name}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    row_group = spec.row_group_rows or None
    for p, directory in enumerate(spec.partition_dirs()):
        (partial / directory).mkdir(parents=True)
        if spec.large_rows:
            pq.write_table(_file_table(spec, p, LARGE), partial / directory / LARGE_FILE, row_group_size=row_group)
        for f in range(spec.files):
            path = partial / directory / f"part-{f:05d}.snappy.parquet"
            pq.write_table(_file_table(spec, p, f), path, row_group_size=row_group)
    files = [x for x in partial.rglob("*.parquet")]
    groups = [
        sum(g.column(c).total_compressed_size for c in range(g.num_columns))
        for x in files
        for metadata in [pq.ParquetFile(x).metadata]
        for g in (metadata.row_group(i) for i in range(metadata.num_row_groups))
    ]
    summary = {
        **asdict(spec),
        "name": spec.name,
        "rows_total": spec.rows + spec.partitions * spec.large_rows,
        "data_files": len(files),
        "bytes": sum(x.stat().st_size for x in files),
        "row_groups": len(groups),
        "row_group_compressed_bytes_min": min(groups, default=0),
        "row_group_compressed_bytes_max": max(groups, default=0),
    }
    if spec.large_rows:
        large = [x.stat().st_size for x in files if x.name == LARGE_FILE]
        summary.update(large_file_bytes_min=min(large), large_file_bytes_max=max(large))
    (partial / SUMMARY_FILE).write_text(json.dumps(summary))
    partial.rename(target)
    return summary


def fresh_copy(spec: DataSpec, root: Path, destination: Path) -> Path:
    """A private copy of the master data (each contender and run compacts its own), without the summary file."""
    shutil.copytree(root / spec.name, destination, ignore=shutil.ignore_patterns(SUMMARY_FILE))
    return destination


def register(spark, database: str, table: str, spec: DataSpec, location) -> str:
    """Create `database.table` as an external Parquet table over `location` (a `Path` or an `HdfsPath`) with all
    its partitions."""
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{database}`")
    spark.sql(
        f"CREATE EXTERNAL TABLE `{database}`.`{table}` ({COLUMNS}) PARTITIONED BY ({PARTITION_COLUMN} STRING) "
        f"STORED AS PARQUET LOCATION '{location.as_uri()}'"
    )
    values = [spec.partition_value(p) for p in range(spec.partitions)]
    for start in range(0, len(values), 100):
        clauses = " ".join(f"PARTITION ({PARTITION_COLUMN}='{v}')" for v in values[start : start + 100])
        spark.sql(f"ALTER TABLE `{database}`.`{table}` ADD {clauses}")
    return f"{database}.{table}"
