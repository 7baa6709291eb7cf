"""The three demo tables of the Lakekeeper runbook, built as external Parquet tables full of small files."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.fs.locations import child, split_location
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.backup import drop_backup, find_backups
from lakekeeper_dagster.engine.hive.model import partition_clause, partition_name, quote_identifier, sql_string
from lakekeeper_dagster.engine.protocol.journal import HIDDEN_PREFIX, state_dir
from spark_resources.py4j import external_catalog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEMO_DATES = ("2024-01-01", "2024-01-02", "2024-01-03")
DEMO_REFS = ("FR", "DE", "US")


@dataclass(frozen=True)
class DemoTable:
    name: str
    partition_columns: tuple[str, ...]
    partitions: tuple[dict[str, str], ...]
    files_per_partition: int
    rows: int


DEMO_TABLES = (
    DemoTable("lakekeeper_flat", (), ({},), 500, 300_000),
    DemoTable("lakekeeper_events", ("date",), tuple({"date": d} for d in DEMO_DATES), 200, 300_000),
    DemoTable(
        "lakekeeper_events_2p",
        ("date", "ref"),
        tuple({"date": d, "ref": r} for d in DEMO_DATES for r in DEMO_REFS),
        100,
        450_000,
    ),
)

DATA_COLUMNS = "id BIGINT, event_type STRING, amount DOUBLE, payload STRING, ts TIMESTAMP"


def database_location(spark: SparkSession, database: str) -> str:
    return str(external_catalog(spark).getDatabase(database).locationUri())


def write_small_files(spark: SparkSession, location: str, rows: int, files: int, first_id: int) -> None:
    """Write `rows` rows as exactly `files` Parquet files under `location`.

    When the rows divide evenly, two tasks (one when `files` is odd) each write their share as files of
    `rows / files` rows (`maxRecordsPerFile`): half the time of one task per file, whose start and commit cost more
    than its few hundred rows.
    """
    tasks, per_file = files, 0
    if rows % files == 0:
        tasks, per_file = (2 if files % 2 == 0 else 1), rows // files
    df = spark.range(first_id, first_id + rows, numPartitions=tasks).selectExpr(
        "id",
        "element_at(array('click','view','buy','refund'), cast(id % 4 as int) + 1) AS event_type",
        "cast(round((id * 7919) % 100000 / 100.0, 2) AS double) AS amount",
        "sha2(cast(id as string), 256) AS payload",
        "timestamp_seconds(1704067200 + id) AS ts",
    )
    df.write.mode("overwrite").option("maxRecordsPerFile", per_file).parquet(location)


def forget_demo_table(spark: SparkSession, database: str, name: str, location: str) -> None:
    """Drop a demo table with its backups, journals and kept originals from earlier demo runs."""
    storage = Storage(spark)
    for backup in find_backups(spark, database, f"{database}.{name}"):
        drop_backup(spark, database, backup.name)
    spark.sql(f"DROP TABLE IF EXISTS {quote_identifier(database)}.{quote_identifier(name)}")
    storage.delete(state_dir(location))
    parent, base = split_location(location)
    for entry in storage.list_names(parent, directories=True):
        if entry.startswith(HIDDEN_PREFIX) and entry.endswith(f"-{base}"):
            storage.delete(child(parent, entry))
    storage.delete(location)


def create_demo_table(spark: SparkSession, database: str, demo: DemoTable, location: str) -> None:
    """(Re)create one demo table at `location`: forget the old one, write the files anew, register."""
    qualified = f"{quote_identifier(database)}.{quote_identifier(demo.name)}"
    forget_demo_table(spark, database, demo.name, location)
    rows_per_partition = demo.rows // len(demo.partitions)
    for index, spec in enumerate(demo.partitions):
        target = f"{location}/{partition_name(spec)}" if spec else location
        write_small_files(spark, target, rows_per_partition, demo.files_per_partition, index * rows_per_partition)
    partitioned = ""
    if demo.partition_columns:
        partitioned = (
            "PARTITIONED BY (" + ", ".join(f"{quote_identifier(c)} STRING" for c in demo.partition_columns) + ")"
        )
    spark.sql(
        f"CREATE EXTERNAL TABLE {qualified} ({DATA_COLUMNS}) {partitioned} STORED AS PARQUET "
        f"LOCATION {sql_string(location)} TBLPROPERTIES ('parquet.compression'='SNAPPY')"
    )
    for spec in demo.partitions:
        if spec:
            spark.sql(f"ALTER TABLE {qualified} ADD IF NOT EXISTS {partition_clause(spec)}")


def scaled(demo: DemoTable, scale: float) -> DemoTable:
    """The same table with `scale` times its files and rows (at least 2 files a partition and a row a file)."""
    files = max(2, round(demo.files_per_partition * scale))
    return replace(demo, files_per_partition=files, rows=max(files * len(demo.partitions), round(demo.rows * scale)))


def create_demo_tables(spark: SparkSession, database: str, scale: float = 1.0) -> list[str]:
    """Create the database if needed and (re)create the three demo tables in it; return their names.

    `scale` shrinks (or grows) every table's files and rows alike; the tests build the same tables smaller.
    """
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(database)}")
    root = database_location(spark, database).rstrip("/")
    names = []
    for demo in DEMO_TABLES:
        create_demo_table(spark, database, scaled(demo, scale), f"{root}/{demo.name}")
        names.append(f"{database}.{demo.name}")
    return names
