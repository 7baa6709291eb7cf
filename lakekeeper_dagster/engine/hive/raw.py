"""A batch's partitions as the metastore holds them (raw: Spark's catalog not in between), read and copied in bulk.

Through Spark's Hive client, and in the driver's JVM (`spark_resources.bulk`): a read a partition and a py4j call
a batch. Raw, because Spark's catalog would re-read the table for each partition it returns, and would hide or
rewrite statistics kept in the parameters.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from lakekeeper_dagster.engine.hive.model import HIVE_DEFAULT_PARTITION
from spark_resources.bulk import driver_bulk
from spark_resources.py4j import external_catalog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def hive_client(spark: SparkSession) -> Any:
    """Spark's Hive client of the session's metastore."""
    return external_catalog(spark).unwrapped().client()


def partitions(
    spark: SparkSession, client: Any, database: str, table: str, specs: list[dict]
) -> tuple[Any, list[dict[str, str] | None]]:
    """The raw partitions of these specs (a Java list, null where there is none) and their parameters (None where
    there is none): two py4j calls. The metastore keeps partition column names in lower case and a null value as
    `__HIVE_DEFAULT_PARTITION__`."""
    bulk = driver_bulk(spark)
    metastore_specs = [{k.lower(): HIVE_DEFAULT_PARTITION if v is None else v for k, v in s.items()} for s in specs]
    found = bulk.partitions(client, database, table, json.dumps(metastore_specs))
    return found, json.loads(bulk.parameters(found))
