"""Zero-copy backup tables: Hive external tables over the original files, found by their properties."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import CatalogError
from lakekeeper_dagster.engine.hive import raw
from lakekeeper_dagster.engine.hive.catalog import list_tables
from lakekeeper_dagster.engine.hive.model import (
    BACKUP_SOURCE_PROPERTY,
    TableInfo,
    partition_clause,
    partition_name,
    quote_identifier,
    sql_string,
)
from spark_resources.bulk import driver_bulk
from spark_resources.py4j import external_catalog, scala_list, scala_seq

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SOURCE = BACKUP_SOURCE_PROPERTY
RUN_ID = "lakekeeper.backup.run_id"
CREATED_AT = "lakekeeper.backup.created_at"
JOURNAL = "lakekeeper.backup.journal"


@dataclass(frozen=True)
class Backup:
    database: str
    name: str
    source: str
    run_id: str
    created_at: float
    journal: str

    @property
    def qualified_name(self) -> str:
        return f"{self.database}.{self.name}"

    @property
    def sql_name(self) -> str:
        return table_sql(self.database, self.name)

    def age_seconds(self, now: float | None = None) -> float:
        return (now or time.time()) - self.created_at


def table_sql(database: str, name: str) -> str:
    return f"{quote_identifier(database)}.{quote_identifier(name)}"


def backup_name(prefix: str, table: str, run_id: str) -> str:
    """`__bkp_events_20240301t020000_ab12cd`: readable, unique per run (never used to find backups)."""
    return f"{prefix}_{table}_{re.sub(r'[^0-9a-z]', '_', run_id.lower())}"


def create_backup(spark: SparkSession, info: TableInfo, name: str, run_id: str, journal: str) -> None:
    """An external table like `info`, over the table's location, that never purges data when dropped."""
    properties = {
        SOURCE: info.qualified_name,
        RUN_ID: run_id,
        CREATED_AT: f"{time.time():.3f}",
        JOURNAL: journal,
        "external.table.purge": "false",
    }
    codec_key = {"parquet": "parquet.compression", "orc": "orc.compress"}.get(info.file_format)
    if codec_key and info.codec_property:
        properties[codec_key] = info.codec_property
    props = ", ".join(f"{sql_string(k)}={sql_string(v)}" for k, v in properties.items())
    target = table_sql(info.database, name)
    spark.sql(
        f"CREATE TABLE {target} LIKE {info.sql_name} TBLPROPERTIES ({props}) LOCATION {sql_string(info.location)}"
    )


def add_partitions(spark: SparkSession, backup_sql_name: str, targets: list[tuple[dict, str]]) -> None:
    """Register partitions of the backup over these directories, all in one statement (one metastore call)."""
    if not targets:
        return
    clauses = " ".join(f"{partition_clause(spec)} LOCATION {sql_string(location)}" for spec, location in targets)
    spark.sql(f"ALTER TABLE {backup_sql_name} ADD IF NOT EXISTS {clauses}")


def set_location(spark: SparkSession, backup_sql_name: str, spec: dict | None, location: str) -> None:
    """Point the backup (or one of its partitions) at `location`."""
    clause = f" {partition_clause(spec)}" if spec else ""
    spark.sql(f"ALTER TABLE {backup_sql_name}{clause} SET LOCATION {sql_string(location)}")


def set_locations(spark: SparkSession, database: str, name: str, targets: list[tuple[dict | None, str]]) -> None:
    """Point the backup (spec None) or its partitions at new directories: a metastore read a partition and one write
    for them all, raw (`hive/raw.py`)."""
    for spec, location in targets:
        if not spec:
            set_location(spark, table_sql(database, name), None, location)
    wanted = [(spec, location) for spec, location in targets if spec]
    if not wanted:
        return
    client = raw.hive_client(spark)
    partitions, found = raw.partitions(spark, client, database, name, [spec for spec, _ in wanted])  # None: none
    missing = [partition_name(spec) for (spec, _), parameters in zip(wanted, found, strict=True) if parameters is None]
    if missing:
        raise CatalogError(f"backup table {database}.{name} has no partition {', '.join(sorted(missing))}")
    relocated = driver_bulk(spark).withLocations(partitions, json.dumps([location for _, location in wanted]))
    client.alterPartitions(database, name, relocated)


def drop_partition(spark: SparkSession, backup_sql_name: str, spec: dict) -> None:
    spark.sql(f"ALTER TABLE {backup_sql_name} DROP IF EXISTS {partition_clause(spec)}")


def drop_backup(spark: SparkSession, database: str, name: str) -> None:
    """Drop a backup table; its data stays (external, purge off)."""
    spark.sql(f"DROP TABLE IF EXISTS {table_sql(database, name)}")


def find_backups(spark: SparkSession, database: str, source: str | None = None) -> list[Backup]:
    """Backups in `database` (of `source` = `db.table` only, when given), newest first, by their properties."""
    names = list_tables(spark, database)
    if not names:
        return []
    backups = []
    for table in scala_seq(external_catalog(spark).getTablesByName(database, scala_list(spark, names))):
        props = table.properties()
        if props.get(SOURCE).isEmpty():
            continue
        value = {key: str(props.get(key).get()) if not props.get(key).isEmpty() else "" for key in (SOURCE, RUN_ID)}
        if source is not None and value[SOURCE] != source:
            continue
        created = props.get(CREATED_AT)
        journal = props.get(JOURNAL)
        backups.append(
            Backup(
                database=database,
                name=str(table.identifier().table()),
                source=value[SOURCE],
                run_id=value[RUN_ID],
                created_at=float(str(created.get())) if not created.isEmpty() else 0.0,
                journal=str(journal.get()) if not journal.isEmpty() else "",
            )
        )
    return sorted(backups, key=lambda b: b.created_at, reverse=True)
