"""The basic file statistics the metastore keeps for a table or partition: `numFiles` and `totalSize`.

Hive's and Impala's planners and replication tools read them; after a swap they must describe the files now there.
They are written through Spark's Hive client, raw: Spark's catalog hides them from a table's properties and would
rewrite its own statistics from the values it read. Spark's own size statistic (`spark.sql.statistics.totalSize`)
is set to the same size where the unit has one; its row count and column statistics stay (a compaction keeps the
rows and their values).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from lakekeeper_dagster.engine.hive import raw
from lakekeeper_dagster.engine.hive.model import TableInfo
from spark_resources.bulk import driver_bulk
from spark_resources.py4j import as_python, java_class

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NUM_FILES = "numFiles"
TOTAL_SIZE = "totalSize"
SPARK_TOTAL_SIZE = "spark.sql.statistics.totalSize"


log = logging.getLogger(__name__)


def _scala_map(spark: SparkSession, values: dict) -> Any:
    """An immutable Scala Map of these entries (a partition spec, table or partition parameters)."""
    entries = java_class(spark, "java.util.LinkedHashMap")()
    for key, value in values.items():
        entries.put(key, value)
    evidence = java_class(spark, "scala.$less$colon$less$.MODULE$").refl()
    return java_class(spark, "scala.jdk.javaapi.CollectionConverters").asScala(entries).toMap(evidence)


def _python_map(spark: SparkSession, scala_map: Any) -> dict[str, str]:
    """The entries of a Scala Map of strings (one round trip: `as_python`)."""
    return {str(key): str(value) for key, value in as_python(spark, scala_map).items()}


def _counted(parameters: dict[str, str], file_count: int, total_bytes: int) -> dict[str, str]:
    counts = {NUM_FILES: str(file_count), TOTAL_SIZE: str(total_bytes)}
    if SPARK_TOTAL_SIZE in parameters:
        counts[SPARK_TOTAL_SIZE] = str(total_bytes)
    return {**parameters, **counts}


def parameters_of(spark: SparkSession, info: TableInfo, specs: list[dict | None]) -> list[dict[str, str]]:
    """The raw metastore parameters of these partitions (by spec), or of the table for a spec of None ({} once
    dropped)."""
    client = raw.hive_client(spark)
    _, parameters = raw.partitions(spark, client, info.database, info.name, [spec for spec in specs if spec])
    each = iter(parameters)  # a partition's parameters, None once dropped
    found = []
    for spec in specs:
        if not spec:
            found.append(_python_map(spark, client.getRawHiveTable(info.database, info.name).hiveTableProps()))
        else:
            found.append(next(each) or {})
    return found


def changed_parameters(before: dict[str, str], after: dict[str, str]) -> dict[str, list[str | None]]:
    """The parameters whose value differs, each as [before, after] (None: absent on that side)."""
    keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k) and k != "transient_lastDdlTime")
    return {k: [before.get(k), after.get(k)] for k in keys}


def set_file_stats(
    spark: SparkSession,
    info: TableInfo,
    units: list[tuple[dict | None, int, int]],
    baseline: list[dict[str, str]] | None = None,
) -> list[dict[str, list[str | None]]]:
    """Set `numFiles` and `totalSize` of these partitions (by spec), or of the table for a spec of None, to the
    given file count and byte total: one metastore call for all the partitions, one for the table.

    Returns, per unit, the parameters that changed since `baseline` (`parameters_of`, read before other statistics
    were refreshed) or, without one, since this call read them."""
    client = raw.hive_client(spark)
    partitions, parameters = raw.partitions(spark, client, info.database, info.name, [s for s, _, _ in units if s])
    currents = iter(parameters)
    changed: list[dict[str, str] | None] = []  # each partition's new parameters, None where dropped
    changes = []
    for number, (spec, file_count, total_bytes) in enumerate(units):
        if not spec:
            table = client.getRawHiveTable(info.database, info.name)
            current = _python_map(spark, table.hiveTableProps())
            parameters = _counted(current, file_count, total_bytes)
            client.alterTableProps(table, _scala_map(spark, parameters))
        else:
            current = next(currents)
            if current is None:  # dropped from the metastore meanwhile: nothing to describe
                log.warning(
                    "%s: partition %s is gone from the metastore; its statistics are not set", info.sql_name, spec
                )
                changed.append(None)
                changes.append({})
                continue
            parameters = _counted(current, file_count, total_bytes)
            changed.append(parameters)
        changes.append(changed_parameters(baseline[number] if baseline else current, parameters))
    if any(changed):
        copies = driver_bulk(spark).withParameters(partitions, json.dumps(changed))
        client.alterPartitions(info.database, info.name, copies)
    return changes
