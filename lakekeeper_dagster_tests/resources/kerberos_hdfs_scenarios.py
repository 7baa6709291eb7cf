"""Spark clients of the Kerberized local HDFS, one per subprocess (UGI is JVM-global).

Usage: python kerberos_hdfs_scenarios.py no_ticket|logged_in PARAMS.json — prints one `RESULT {json}` line;
test_kerberos_hdfs.py checks it. `logged_in` goes through the resource's login (principal and keytab as Dagster
EnvVars LK_PRINCIPAL and LK_KEYTAB, krb5.conf through the `spark_submit` block); `no_ticket` is a plain Spark
session with the same HDFS client settings and no login.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import dagster as dg

from lakekeeper_dagster_tests.hdfs import dfs, jpath, listing
from spark_resources.kerberos import java_error_text
from spark_resources.resource import HiveSparkResource
from spark_resources.session import start_spark_session


def result(step: str, **values: object) -> None:
    print("RESULT " + json.dumps({"step": step, **values}), flush=True)


def no_ticket(params: dict) -> None:
    """A Spark session with the Kerberized HDFS's client settings and no Kerberos login lists the user's home."""
    spark = start_spark_session({"spark.master": "local[1]", **params["hdfs_conf"], **params["krb5_driver"]})
    try:
        listing(spark, params["home"])
        result("no_ticket", error=None)
    except Exception as error:  # py4j wraps the Java exception
        result("no_ticket", error=java_error_text(error))
    finally:
        spark.stop()


def logged_in(params: dict) -> None:
    """Through the resource's Kerberos login: a directory and a table on HDFS (the metastore checks its location
    on HDFS as its own principal), rows written and read back, the files listed with their owner."""
    resource = HiveSparkResource(
        metastore_uri=params["metastore_uri"],
        warehouse_dir=params["warehouse_dir"],
        principal=dg.EnvVar("LK_PRINCIPAL"),
        keytab=dg.EnvVar("LK_KEYTAB"),
        spark_submit={
            "master": "local[1]",
            "krb5_conf": params["krb5_conf"],
            "extra_conf": {
                "spark.hadoop.hive.metastore.kerberos.principal": params["metastore_principal"],
                **params["hdfs_conf"],
            },
        },
    )
    location = f"{params['home']}/events"
    with dg.build_resources({"spark": resource}) as resources:
        spark = resources.spark.spark_session
        login = str(spark._jvm.org.apache.hadoop.security.UserGroupInformation.getLoginUser())
        dfs(spark, location).mkdirs(jpath(spark, location))
        spark.sql(f"CREATE TABLE default.events (id INT, payload STRING) USING parquet LOCATION '{location}'")
        spark.range(30).selectExpr("CAST(id AS INT) AS id", "concat('row-', id) AS payload").write.insertInto(
            "default.events"
        )
        rows = spark.sql("SELECT count(*), sum(id) FROM default.events").collect()[0]
        sample = [r.payload for r in spark.sql("SELECT payload FROM default.events ORDER BY id LIMIT 3").collect()]
        files = [
            [str(s.getPath().getName()), str(s.getOwner())]
            for s in listing(spark, location)
            if str(s.getPath().getName()).endswith(".parquet")
        ]
        home = [str(s.getPath().getName()) for s in listing(spark, params["home"])]
        result("logged_in", login=login, rows=[rows[0], rows[1]], sample=sample, files=files, home=home)


if __name__ == "__main__":
    scenario, params_file = sys.argv[1:]
    {"no_ticket": no_ticket, "logged_in": logged_in}[scenario](json.loads(Path(params_file).read_text()))
