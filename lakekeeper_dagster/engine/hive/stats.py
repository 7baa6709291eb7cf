"""The basic file statistics the metastore keeps for a table or partition: `numFiles` and `totalSize`.

Hive's and Impala's planners and replication tools read them; after a swap they must describe the files now there.
They are written through Spark's Hive client, raw: Spark's catalog hides them from a table's properties and would
rewrite its own statistics from the values it read. Spark's own size statistic (`spark.sql.statistics.totalSize`)
is set to the same size where the unit has one; its row count and column statistics stay (a compaction keeps the
rows and their values).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lakekeeper_dagster.engine.hive.model import TableInfo
from spark_resources.py4j import as_python, external_catalog, java_class, scala_list

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NUM_FILES = "numFiles"
TOTAL_SIZE = "totalSize"
SPARK_TOTAL_SIZE = "spark.sql.statistics.totalSize"
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"  # how the metastore names a null partition value


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


_FIELD_NAMES: dict[str, list[str]] = {}  # a case class's field names, by class: asked once, not once a partition


def _with_parameters(partition: Any, parameters: Any) -> Any:
    """`partition.copy(parameters=...)` through py4j, whatever the class's arity in this Spark version."""
    kind = str(partition.getClass().getName())
    if kind not in _FIELD_NAMES:
        _FIELD_NAMES[kind] = [str(partition.productElementName(i)) for i in range(partition.productArity())]
    names = _FIELD_NAMES[kind]
    values = [parameters if name == "parameters" else partition.productElement(i) for i, name in enumerate(names)]
    return partition.copy(*values)


def _partition(spark: SparkSession, client: Any, info: TableInfo, spec: dict) -> Any:
    """The metastore's raw partition of `spec`, or None once dropped."""
    metastore_spec = {k: DEFAULT_PARTITION if v is None else v for k, v in spec.items()}
    found = client.getPartitionOption(info.database, info.name, _scala_map(spark, metastore_spec))
    return None if found.isEmpty() else found.get()


def parameters_of(spark: SparkSession, info: TableInfo, specs: list[dict | None]) -> list[dict[str, str]]:
    """The raw metastore parameters of these partitions (by spec), or of the table for a spec of None ({} once
    dropped)."""
    client = external_catalog(spark).unwrapped().client()
    found = []
    for spec in specs:
        if not spec:
            found.append(_python_map(spark, client.getRawHiveTable(info.database, info.name).hiveTableProps()))
            continue
        partition = _partition(spark, client, info, spec)
        found.append(_python_map(spark, partition.parameters()) if partition is not None else {})
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
    client = external_catalog(spark).unwrapped().client()
    changed, changes = [], []
    for number, (spec, file_count, total_bytes) in enumerate(units):
        if not spec:
            raw = client.getRawHiveTable(info.database, info.name)
            current = _python_map(spark, raw.hiveTableProps())
            parameters = _counted(current, file_count, total_bytes)
            client.alterTableProps(raw, _scala_map(spark, parameters))
        else:
            partition = _partition(spark, client, info, spec)
            if partition is None:  # dropped from the metastore meanwhile: nothing to describe
                log.warning(
                    "%s: partition %s is gone from the metastore; its statistics are not set", info.sql_name, spec
                )
                changes.append({})
                continue
            current = _python_map(spark, partition.parameters())
            parameters = _counted(current, file_count, total_bytes)
            changed.append(_with_parameters(partition, _scala_map(spark, parameters)))
        changes.append(changed_parameters(baseline[number] if baseline else current, parameters))
    if changed:
        client.alterPartitions(info.database, info.name, scala_list(spark, changed))
    return changes
