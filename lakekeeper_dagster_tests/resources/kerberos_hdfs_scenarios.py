"""Spark clients of the Kerberized local HDFS, one per subprocess (UGI is JVM-global).

Usage: python kerberos_hdfs_scenarios.py no_ticket|logged_in|on_yarn PARAMS.json — prints one `RESULT {json}` line;
test_kerberos_hdfs.py checks it. `logged_in` goes through the resource's login (principal and keytab as Dagster
EnvVars LK_PRINCIPAL and LK_KEYTAB, krb5.conf through the `spark_submit` block); `no_ticket` is a plain Spark
session with the same HDFS client settings and no login; `on_yarn` is `logged_in` with the application on the
Kerberized YARN in client mode (HADOOP_CONF_DIR set), its executors reaching HDFS on delegation tokens.
"""

from __future__ import annotations

import json
import sys
import time
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


def logged_in(params: dict, table: str = "events", submit: dict | None = None) -> None:
    """Through the resource's Kerberos login: a directory and a table on HDFS (the metastore checks its location
    on HDFS as its own principal), rows written and read back, the files listed with their owner (`submit` puts
    the application on a cluster)."""
    submit = submit or {"master": "local[1]"}
    extra = {
        "spark.hadoop.hive.metastore.kerberos.principal": params["metastore_principal"],
        # Relogin as soon as the ticket nears its end (Hadoop waits 60 s between logins by default).
        "spark.hadoop.hadoop.kerberos.min.seconds.before.relogin": "1",
        **params["hdfs_conf"],
    }
    resource = HiveSparkResource(
        metastore_uri=params["metastore_uri"],
        warehouse_dir=params["warehouse_dir"],
        principal=dg.EnvVar("LK_PRINCIPAL"),
        keytab=dg.EnvVar("LK_KEYTAB"),
        spark_submit={
            **submit,
            "krb5_conf": params["krb5_conf"],
            "extra_conf": {**submit.get("extra_conf", {}), **extra},
        },
    )
    location = f"{params['home']}/{table}"
    with dg.build_resources({"spark": resource}) as resources:
        spark = resources.spark.spark_session
        ugi = spark._jvm.org.apache.hadoop.security.UserGroupInformation
        login = str(ugi.getLoginUser())
        dfs(spark, location).mkdirs(jpath(spark, location))
        spark.sql(f"CREATE TABLE default.{table} (id INT, payload STRING) USING parquet LOCATION '{location}'")
        spark.range(30).selectExpr("CAST(id AS INT) AS id", "concat('row-', id) AS payload").repartition(
            2
        ).write.insertInto(f"default.{table}")
        rows = spark.sql(f"SELECT count(*), sum(id) FROM default.{table}").collect()[0]
        sample = [r.payload for r in spark.sql(f"SELECT payload FROM default.{table} ORDER BY id LIMIT 3").collect()]
        files = [
            [str(s.getPath().getName()), str(s.getOwner())]
            for s in listing(spark, location)
            if str(s.getPath().getName()).endswith(".parquet")
        ]
        home = sorted(str(s.getPath().getName()) for s in listing(spark, params["home"]))
        executors = [str(e.host()) for e in spark._jsc.sc().statusTracker().getExecutorInfos()]
        result(
            "logged_in",
            login=login,
            rows=[rows[0], rows[1]],
            sample=sample,
            files=files,
            home=home,
            tokens={
                container: sorted({str(token.getKind()) for token in tokens})
                for container, tokens in container_tokens(spark, params, spark.sparkContext.applicationId).items()
            },
            master=spark.sparkContext.master,
            app_id=spark.sparkContext.applicationId,
            executors=len(executors) - 1,  # the driver is one of them
        )
        if "ticket_lifetime" in params:
            renewal(resources, params, table, location)
        if "token_lifetime" in params:
            token_expiry(spark, params, table)


def renewal(resources, params: dict, table: str, location: str) -> None:
    """The ticket runs out mid-run: the next use of the session logs in again from the keytab and writes on."""
    time.sleep(params["ticket_lifetime"] + 2)
    spark = resources.spark.spark_session  # relogin from the keytab
    spark.range(30, 40).selectExpr("CAST(id AS INT) AS id", "concat('row-', id) AS payload").write.insertInto(
        f"default.{table}"
    )
    rows = spark.sql(f"SELECT count(*), sum(id) FROM default.{table}").collect()[0]
    files = sorted(str(s.getPath().getName()) for s in listing(spark, location))
    result("renewed", rows=[rows[0], rows[1]], files=files)


def token_expiry(spark, params: dict, table: str) -> None:
    """The delegation tokens the containers started with run out: the executor writes and reads on new ones."""
    time.sleep(params["token_lifetime"] + 5)
    spark.range(30, 40).selectExpr("CAST(id AS INT) AS id", "concat('row-', id) AS payload").repartition(
        2
    ).write.insertInto(f"default.{table}")
    rows = spark.sql(f"SELECT count(*), sum(id) FROM default.{table}").collect()[0]
    result("after_token_expiry", rows=[rows[0], rows[1]], lifetimes=token_lifetimes(spark, params))


def token_lifetimes(spark, params: dict) -> list[float]:
    """The lifetime (seconds from issue to the NameNode's max date) of every HDFS delegation token the application's
    containers were launched with."""
    return [
        (identifier.getMaxDate() - identifier.getIssueDate()) / 1000
        for tokens in container_tokens(spark, params, spark.sparkContext.applicationId).values()
        for token in tokens
        if str(token.getKind()) == "HDFS_DELEGATION_TOKEN"
        for identifier in [token.decodeIdentifier()]
    ]


def container_tokens(spark, params: dict, app_id: str) -> dict[str, list]:
    """The tokens (Hadoop `Token`s) each container of the application was launched with, by container id, as the
    NodeManager stored them (`nmPrivate/APP/CONTAINER/CONTAINER.tokens`, Hadoop's token storage format); none
    outside YARN."""
    if "yarn_dir" not in params:
        return {}
    jvm = spark._jvm
    tokens = {}
    for file in Path(params["yarn_dir"]).glob(f"**/nmPrivate/{app_id}/*/*.tokens"):
        credentials = jvm.org.apache.hadoop.security.Credentials.readTokenStorageFile(
            jvm.java.io.File(str(file)), spark._jsc.hadoopConfiguration()
        )
        tokens[file.stem] = list(credentials.getAllTokens().toArray())
    return tokens


def on_yarn(params: dict) -> None:
    logged_in(params, "yarn_events", params["spark_submit"])


if __name__ == "__main__":
    scenario, params_file = sys.argv[1:]
    scenarios = {"no_ticket": no_ticket, "logged_in": logged_in, "on_yarn": on_yarn}
    scenarios[scenario](json.loads(Path(params_file).read_text()))
