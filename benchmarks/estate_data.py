"""The estate of benchmark 8: N external Parquet tables x P hourly partitions `dt='YYYYMMDDHH'`, each partition one
tiny Parquet file, registered in a Derby-backed metastore whose home is kept with the data, so a later run reuses
the estate instead of building it again.

Cheap by construction: one tiny file is written with Spark once, then hard-linked into every partition directory
(a copy per table, so no inode reaches ext4's 65,000-link limit); the partitions are registered with
`ALTER TABLE ... ADD PARTITION (...) LOCATION '...' PARTITION (...) ...`, `BATCH` specs a statement, which Spark
sends to the metastore as one `add_partitions` call a statement.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

from spark_resources.metastore import MetastoreServer, free_port

DATABASE = "estate"
PARTITION_COLUMN = "dt"
FIRST_HOUR = datetime(2024, 1, 1, tzinfo=timezone.utc)
BATCH = 1000  # partition specs per ALTER TABLE statement (and per add_partitions call)
DATA_FILE = "part-00000.snappy.parquet"
MARKER = "estate.json"  # written last: an estate directory without it is incomplete and rebuilt


@dataclass(frozen=True)
class EstateSpec:
    """N tables x P hourly partitions x F files (the same tiny file) per partition."""

    tables: int
    partitions: int
    files: int = 1

    @property
    def name(self) -> str:
        suffix = f"x{self.files}" if self.files != 1 else ""
        return f"estate-{self.tables}x{self.partitions}{suffix}"

    def table_names(self) -> list[str]:
        width = max(3, len(str(self.tables - 1)))
        return [f"t{i:0{width}d}" for i in range(self.tables)]

    def partition_values(self) -> list[str]:
        return [(FIRST_HOUR + timedelta(hours=h)).strftime("%Y%m%d%H") for h in range(self.partitions)]


@dataclass
class Estate:
    """A built estate: its directory (data under `tables/`, metastore home under `metastore/`) and build figures."""

    spec: EstateSpec
    root: Path
    figures: dict

    @property
    def metastore_home(self) -> Path:
        return self.root / "metastore"

    def metastore(self) -> MetastoreServer:
        """The estate's metastore on a fresh free port (the Derby database keeps the tables between runs)."""
        server = MetastoreServer(home=self.metastore_home, uri=f"thrift://127.0.0.1:{free_port()}", heap="2g")
        if server.is_running():  # left by an interrupted benchmark, on a port we no longer know
            server.stop()
        return server


def estate_dir(data_dir: Path, spec: EstateSpec) -> Path:
    return data_dir / spec.name


def cached_estate(data_dir: Path, spec: EstateSpec) -> Estate | None:
    root = estate_dir(data_dir, spec)
    marker = root / MARKER
    if not marker.exists():
        return None
    return Estate(spec, root, json.loads(marker.read_text()))


def build_estate(data_dir: Path, spec: EstateSpec, log) -> Estate:
    """Build the estate; one left incomplete by an interrupted build is completed (every step skips what exists)."""
    from spark_resources.session import local_hive_conf, start_spark_session

    root = estate_dir(data_dir, spec)
    resumed = root.exists()
    if resumed:
        log(f"{root} is incomplete (no {MARKER}): completing it")
    root.mkdir(parents=True, exist_ok=True)
    figures: dict = {"tables": spec.tables, "partitions_per_table": spec.partitions, "files_per_partition": spec.files}
    figures["resumed"] = resumed
    started = time.monotonic()
    estate = Estate(spec, root, figures)
    metastore = estate.metastore()
    metastore.start()
    figures["metastore_start_s"] = round(time.monotonic() - started, 1)
    try:
        mark = time.monotonic()
        conf = local_hive_conf(metastore.uri, metastore.warehouse_dir.as_uri(), app_name="bench-estate-build")
        spark = start_spark_session(conf)
        spark.conf.set("spark.sql.addPartitionInBatch.size", str(BATCH))
        figures["spark_start_s"] = round(time.monotonic() - mark, 1)
        try:
            mark = time.monotonic()
            template = _tiny_parquet(spark, root / "template") if not resumed else next(root.glob("template/part-*"))
            figures["template_bytes"] = template.stat().st_size
            _write_files(root, spec, template, figures, log)
            figures["files_s"] = round(time.monotonic() - mark, 1)
            mark = time.monotonic()
            _register(spark, root, spec, log)
            figures["metastore_registration_s"] = round(time.monotonic() - mark, 1)
        finally:
            spark.stop()
    finally:
        metastore.stop()
    figures["build_s"] = round(time.monotonic() - started, 1)
    figures["built_at"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    (root / MARKER).write_text(json.dumps(figures, indent=1))
    return estate


def _tiny_parquet(spark, directory: Path) -> Path:
    """One Parquet file of 3 rows `(id BIGINT, payload STRING)`, written by Spark as a table's writer would."""
    from spark_resources.py4j import job_description

    with job_description(spark, "estate: the template file"):
        spark.range(3).selectExpr("id", "concat('row ', id) AS payload").coalesce(1).write.parquet(str(directory))
    (written,) = directory.glob("part-*.parquet")
    return written


def _write_files(root: Path, spec: EstateSpec, template: Path, figures: dict, log) -> None:
    """Every partition directory with `files` hard links (a copy where linking fails) of the table's template."""
    values = spec.partition_values()
    links = copies = 0
    for number, table in enumerate(spec.table_names()):
        own = root / "templates" / f"{table}.parquet"  # one inode per table: at most P x F links each
        own.parent.mkdir(exist_ok=True)
        shutil.copyfile(template, own)
        location = root / "tables" / table
        for value in values:
            directory = location / f"{PARTITION_COLUMN}={value}"
            directory.mkdir(parents=True, exist_ok=True)
            for f in range(spec.files):
                target = directory / (DATA_FILE if f == 0 else f"part-{f:05d}.snappy.parquet")
                if target.exists():
                    continue
                try:
                    os.link(own, target)
                    links += 1
                except OSError:
                    shutil.copyfile(own, target)
                    copies += 1
        if (number + 1) % max(1, spec.tables // 10) == 0:
            log(f"  files: {number + 1}/{spec.tables} tables")
    figures.update(hard_links=links, copies=copies)


def _register(spark, root: Path, spec: EstateSpec, log) -> None:
    """The database, N external tables and their partitions, BATCH partition specs per statement."""
    from spark_resources.py4j import job_description

    values = spec.partition_values()
    spark.sql(f"CREATE DATABASE IF NOT EXISTS `{DATABASE}`")
    started = time.monotonic()
    for number, table in enumerate(spec.table_names()):
        location = root / "tables" / table
        with job_description(spark, f"estate: register {DATABASE}.{table}"):
            spark.sql(
                f"CREATE EXTERNAL TABLE IF NOT EXISTS `{DATABASE}`.`{table}` (id BIGINT, payload STRING) "
                f"PARTITIONED BY ({PARTITION_COLUMN} STRING) STORED AS PARQUET LOCATION 'file:{location}'"
            )
            for start in range(0, len(values), BATCH):
                specs = " ".join(
                    f"PARTITION ({PARTITION_COLUMN}='{v}') LOCATION 'file:{location}/{PARTITION_COLUMN}={v}'"
                    for v in values[start : start + BATCH]
                )
                spark.sql(f"ALTER TABLE `{DATABASE}`.`{table}` ADD IF NOT EXISTS {specs}")
        if number == 0 and len(os.listdir(location)) != len(values):  # a location the metastore made anew
            raise RuntimeError(
                f"{location} holds {len(os.listdir(location))} entries, not the {len(values)} partitions"
            )
        if (number + 1) % max(1, spec.tables // 20) == 0 or spec.partitions >= 5000:
            done = (number + 1) * spec.partitions
            log(f"  metastore: {number + 1}/{spec.tables} tables, {done} partitions, {time.monotonic() - started:.0f}s")
