"""The history table: a Hive external Parquet table of every operation's per-unit records, partitioned by day.

Appends are concurrency-safe: each writes one Spark job into a hidden staging directory of its own inside the
table's location, renames its files into the day partitions under unique names, then registers those partitions
with `ADD IF NOT EXISTS`. The table carries `HISTORY_PROPERTY`, so no operation ever manages it as a source.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import OperationError
from lakekeeper_dagster.engine.fs.locations import child
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.catalog import read_table, table_exists
from lakekeeper_dagster.engine.hive.model import HISTORY_PROPERTY, partition_clause, quote_identifier, sql_string
from spark_resources.py4j import job_description

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DAY = "day"  # the partition column: the UTC day a unit's run started, YYYY-MM-DD
COLUMNS = (
    ("run_id", "STRING"),
    ("operation", "STRING"),
    ("tool_version", "STRING"),
    ("table_name", "STRING"),
    ("partition_name", "STRING"),
    ("status", "STRING"),
    ("reason", "STRING"),
    ("files_before", "BIGINT"),
    ("files_after", "BIGINT"),
    ("bytes_before", "BIGINT"),
    ("bytes_after", "BIGINT"),
    ("rows_before", "BIGINT"),
    ("rows_after", "BIGINT"),
    ("checksum_before", "STRING"),
    ("checksum_after", "STRING"),
    ("started_at", "STRING"),  # ISO 8601 UTC (`2026-11-27T09:50:01Z`): sorts and compares as text, no time zone
    ("seconds", "DOUBLE"),
    ("backup_table", "STRING"),
    ("location", "STRING"),
    ("dagster_run_id", "STRING"),
    ("os_user", "STRING"),
    ("host", "STRING"),
)


def _sql_name(database: str, table: str) -> str:
    return f"{quote_identifier(database)}.{quote_identifier(table)}"


def ensure_history_table(spark: SparkSession, database: str, table: str) -> str:
    """Create the database and the table when missing (at `<database location>/<table>`); the table's location. A
    table of that name that is not a history table (property `lakekeeper.history`) is an OperationError: nothing
    is written into another table's directory."""
    if table_exists(spark, database, table):
        info = read_table(spark, database, table)
        if HISTORY_PROPERTY not in info.table_properties:
            raise OperationError(
                f"history.table {database}.{table} is a table of its own, not lakekeeper's history (no "
                f"{HISTORY_PROPERTY} property): name another table in history.table; nothing was written to it"
            )
    else:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(database)}")
        location = child(spark.catalog.getDatabase(database).locationUri, table)
        columns = ", ".join(f"{quote_identifier(name)} {kind}" for name, kind in COLUMNS)
        spark.sql(
            f"CREATE EXTERNAL TABLE IF NOT EXISTS {_sql_name(database, table)} ({columns}) "
            f"PARTITIONED BY ({quote_identifier(DAY)} STRING) STORED AS PARQUET LOCATION {sql_string(location)} "
            f"TBLPROPERTIES ({sql_string(HISTORY_PROPERTY)}='true')"
        )
    return read_table(spark, database, table).location


def append_rows(
    spark: SparkSession,
    storage: Storage,
    database: str,
    table: str,
    rows: Sequence[Mapping],
    token: str | None = None,
) -> None:
    """Append `rows` (column -> value, with `DAY`) to the history table, creating it when missing.

    Each day's rows land as one file named by `token`: appending the same rows again with the same token (a retry
    after a failure or a kill that left them pending) skips every day already in place, so none is recorded twice.
    """
    from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

    if not rows:
        return
    location = ensure_history_table(spark, database, table)
    types = {"STRING": StringType(), "BIGINT": LongType(), "DOUBLE": DoubleType()}
    schema = StructType([StructField(n, types[k]) for n, k in (*COLUMNS, (DAY, "STRING"))])
    names = [f.name for f in schema.fields]
    token = token or uuid.uuid4().hex[:12]
    staging = child(location, f".lk-history-{uuid.uuid4().hex[:12]}")  # hidden: readers of the table never see it
    try:
        with job_description(spark, f"lakekeeper history append {len(rows)} record(s) to {database}.{table}"):
            frame = spark.createDataFrame([tuple(row.get(n) for n in names) for row in rows], schema)
            frame.coalesce(1).write.partitionBy(DAY).parquet(staging)
        for day in sorted({str(row[DAY]) for row in rows}):
            source, target = child(staging, f"{DAY}={day}"), child(location, f"{DAY}={day}")
            storage.mkdirs(target)
            for number, data in enumerate(storage.list_data_files(source)):
                name = child(target, f"history-{token}-{number:03d}.parquet")
                if not storage.exists(name):  # else appended by an earlier attempt with these rows
                    storage.rename_strict(data.path, name)
            spark.sql(f"ALTER TABLE {_sql_name(database, table)} ADD IF NOT EXISTS {partition_clause({DAY: day})}")
    finally:
        storage.delete(staging)
    spark.catalog.refreshTable(_sql_name(database, table))


def read_rows(
    spark: SparkSession,
    database: str,
    table: str,
    source: str | None = None,
    since: str | None = None,
    run_id: str | None = None,
) -> list[dict]:
    """The history's records (column -> value), oldest first, of one source table `D.T`, started at or after
    `since` (ISO UTC), of one run; none when the history table does not exist yet."""
    from pyspark.sql import functions as F

    if not table_exists(spark, database, table):
        return []
    spark.catalog.refreshTable(_sql_name(database, table))
    frame = spark.table(_sql_name(database, table))
    for column, value in (("table_name", source), ("run_id", run_id)):
        if value is not None:
            frame = frame.where(F.col(column) == F.lit(value))
    if since is not None:
        frame = frame.where((F.col(DAY) >= F.lit(since[:10])) & (F.col("started_at") >= F.lit(since)))
    frame = frame.orderBy("started_at", "run_id", "table_name", "partition_name").drop(DAY)
    with job_description(spark, f"lakekeeper history read {database}.{table}"):
        return [row.asDict() for row in frame.collect()]
