"""The Dagster Spark resource starts a Hive-enabled session on the metastore and stops it at teardown."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from lakekeeper_dagster_tests.tables import REPO
from spark_resources.resource import HiveSparkResource

SCRIPT = textwrap.dedent(
    """
    import sys
    import dagster as dg
    from pyspark import SparkContext
    from spark_resources.resource import HiveSparkResource

    resource = HiveSparkResource(metastore_uri=sys.argv[1], warehouse_dir=sys.argv[2],
                                 spark_submit={"master": "local[1]"})
    with dg.build_resources({"spark": resource}) as resources:
        spark = resources.spark.spark_session
        print("catalog", spark.conf.get("spark.sql.catalogImplementation"))
        print("databases", sorted(d.name for d in spark.catalog.listDatabases()))
    print("stopped", SparkContext._active_spark_context is None)
    """
)


def test_full_conf_local_default_and_overrides():
    resource = HiveSparkResource(
        metastore_uri="thrift://h:1",
        spark_submit={"executor_memory": "4g", "extra_conf": {"spark.sql.shuffle.partitions": "50"}},
        spark_config={"spark.app.name": "custom"},
    )
    conf = resource.full_conf()
    assert conf["spark.master"] == "local[*]"
    assert conf["spark.hadoop.hive.metastore.uris"] == "thrift://h:1"
    assert conf["spark.sql.catalogImplementation"] == "hive"
    assert conf["spark.executor.memory"] == "4g"
    assert conf["spark.sql.shuffle.partitions"] == "50"
    assert conf["spark.app.name"] == "custom"


def test_session_lists_the_metastore_and_stops_at_teardown(metastore, spark, tmp_path):
    spark.sql("CREATE DATABASE IF NOT EXISTS resource_probe")
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, metastore.uri, (tmp_path / "wh").as_uri()],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "catalog hive" in result.stdout
    assert "resource_probe" in result.stdout
    assert "stopped True" in result.stdout
    spark.sql("DROP DATABASE resource_probe")
