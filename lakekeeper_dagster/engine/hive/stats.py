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
from spark_resources.py4j import external_catalog, jvm, scala_list

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NUM_FILES = "numFiles"
TOTAL_SIZE = "totalSize"
SPARK_TOTAL_SIZE = "spark.sql.statistics.totalSize"
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"  # how the metastore names a null partition value


log = logging.getLogger(__name__)


def _scala_map(spark: SparkSession, values: dict) -> Any:
    """An immutable Scala Map of these entries (a partition spec, table or partition parameters)."""
    java = jvm(spark)
    entries = java.java.util.LinkedHashMap()
    for key, value in values.items():
        entries.put(key, value)
    evidence = getattr(getattr(java.scala, "$less$colon$less$"), "MODULE$").refl()
    return java.scala.jdk.javaapi.CollectionConverters.asScala(entries).toMap(evidence)


def _python_map(scala_map: Any) -> dict[str, str]:
    """The entries of a Scala Map of strings."""
    keys = scala_map.keys().iterator()
    result = {}
    while keys.hasNext():
        key = keys.next()
        result[str(key)] = str(scala_map.apply(key))
    return result


def _counted(parameters: dict[str, str], file_count: int, total_bytes: int) -> dict[str, str]:
    counts = {NUM_FILES: str(file_count), TOTAL_SIZE: str(total_bytes)}
    if SPARK_TOTAL_SIZE in parameters:
        counts[SPARK_TOTAL_SIZE] = str(total_bytes)
    return {**parameters, **counts}


def _with_parameters(partition: Any, parameters: Any) -> Any:
    """`partition.copy(parameters=...)` through py4j, whatever the class's arity in this Spark version."""
    names = [str(partition.productElementName(i)) for i in range(partition.productArity())]
    values = [parameters if name == "parameters" else partition.productElement(i) for i, name in enumerate(names)]
    return partition.copy(*values)


def set_file_stats(spark: SparkSession, info: TableInfo, units: list[tuple[dict | None, int, int]]) -> None:
    """Set `numFiles` and `totalSize` of these partitions (by spec), or of the table for a spec of None, to the
    given file count and byte total: one metastore call for all the partitions, one for the table."""
    client = external_catalog(spark).unwrapped().client()
    changed = []
    for spec, file_count, total_bytes in units:
        if not spec:
            raw = client.getRawHiveTable(info.database, info.name)
            parameters = _counted(_python_map(raw.hiveTableProps()), file_count, total_bytes)
            client.alterTableProps(raw, _scala_map(spark, parameters))
            continue
        metastore_spec = {k: DEFAULT_PARTITION if v is None else v for k, v in spec.items()}
        found = client.getPartitionOption(info.database, info.name, _scala_map(spark, metastore_spec))
        if found.isEmpty():  # dropped from the metastore meanwhile: nothing to describe
            log.warning("%s: partition %s is gone from the metastore; its statistics are not set", info.sql_name, spec)
            continue
        partition = found.get()
        parameters = _counted(_python_map(partition.parameters()), file_count, total_bytes)
        changed.append(_with_parameters(partition, _scala_map(spark, parameters)))
    if changed:
        client.alterPartitions(info.database, info.name, scala_list(spark, changed))
