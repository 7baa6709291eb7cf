"""Kerberized Spark scenarios, run in one subprocess (one JVM: UGI is JVM-global, a JVM has one SparkContext).

Usage: python kerberos_scenarios.py PARAMS.json — prints one `RESULT {json}` line per step; test_kerberos.py checks
them. The principal and keytab reach the resource as Dagster EnvVars (LK_PRINCIPAL, LK_KEYTAB), krb5.conf through
the `spark_submit` block, as a YAML config would give them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg

from lakekeeper_dagster.engine.ops.compaction import CompactionOptions, compact_table
from lakekeeper_dagster.engine.plan.units import Thresholds
from spark_resources.kerberos import KerberosError
from spark_resources.resource import HiveSparkResource


def result(step: str, **values: object) -> None:
    print("RESULT " + json.dumps({"step": step, **values}), flush=True)


def resource(params: dict, service_principal: str) -> HiveSparkResource:
    return HiveSparkResource(
        metastore_uri=params["metastore_uri"],
        warehouse_dir=params["warehouse_dir"],
        principal=dg.EnvVar("LK_PRINCIPAL"),
        keytab=dg.EnvVar("LK_KEYTAB"),
        spark_submit={
            "master": "local[1]",
            "krb5_conf": params["krb5_conf"],
            "extra_conf": {"spark.hadoop.hive.metastore.kerberos.principal": service_principal},
        },
        # Relogin as soon as the ticket nears its end (Hadoop waits 60 s between logins by default).
        spark_config={"spark.hadoop.hadoop.kerberos.min.seconds.before.relogin": "1"},
    )


def files_of(path: Path) -> list[str]:
    """Data files of the partition directories (not lakekeeper's hidden `.lk-old-*` backups of the originals)."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file() and ".lk-" not in str(p))


def metastore_refuses(params: dict) -> None:
    """The metastore holds no key for the service principal the client asks a ticket for."""
    with dg.build_resources({"spark": resource(params, params["wrong_service_principal"])}) as resources:
        try:
            resources.spark.spark_session  # noqa: B018 - the first use logs in and calls the metastore
            result("metastore_refuses", error=None)
        except KerberosError as error:
            result("metastore_refuses", error=str(error), ccache=os.environ.get("KRB5CCNAME"))


def table_work_renewal_and_expiry(params: dict) -> None:
    """Tables through the Kerberized metastore, across a ticket renewal, then a ticket that cannot be renewed."""
    db, location = "kerberized", Path(params["data_dir"]) / "events"
    with dg.build_resources({"spark": resource(params, params["service_principal"])}) as resources:
        spark = resources.spark.spark_session
        result("session", ccache=os.environ.get("KRB5CCNAME"), login=str(_login_user(spark)))
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {db}")
        spark.sql(
            f"CREATE EXTERNAL TABLE {db}.events (id INT, payload STRING) PARTITIONED BY (dt STRING) "
            f"STORED AS PARQUET LOCATION '{location.as_uri()}'"
        )
        _write_partition(spark, db, location, "2026-01-01", 0)
        result("databases", names=sorted(d.name for d in spark.catalog.listDatabases()))

        time.sleep(params["ticket_lifetime"] + 2)  # the first ticket has expired now
        spark = resources.spark.spark_session  # renews from the keytab
        _write_partition(spark, db, location, "2026-01-02", 40)
        compacted = compact_table(spark, db, "events", CompactionOptions(Thresholds(128 * 1024 * 1024, 10.0)))
        rows = spark.sql(f"SELECT dt, count(*) AS n, sum(id) AS s FROM {db}.events GROUP BY dt ORDER BY dt").collect()
        sample = [r.payload for r in spark.sql(f"SELECT payload FROM {db}.events ORDER BY id LIMIT 3").collect()]
        partitions = [r[0] for r in spark.sql(f"SHOW PARTITIONS {db}.events").collect()]
        result(
            "after_renewal",
            compacted=[[r.partition, r.status, r.files_before, r.files_after, r.checksum_matches] for r in compacted],
            rows=[[r.dt, r.n, r.s] for r in rows],
            sample=sample,
            partitions=partitions,
            files=files_of(location),
        )

        # The key of the principal changes: the keytab is now stale, and the ticket runs out.
        rotate = f"cpw -randkey {params['principal']}"
        subprocess.run([params["kadmin_local"], "-q", rotate], check=True, capture_output=True)
        time.sleep(params["ticket_lifetime"] + 2)
        try:
            spark = resources.spark.spark_session
            spark.sql(f"INSERT INTO {db}.events PARTITION (dt='2026-01-03') VALUES (999, 'must not be written')")
            result("expired", error=None)
        except KerberosError as error:
            result("expired", error=str(error), files=files_of(location))
    result("teardown", ccache=os.environ.get("KRB5CCNAME"), private_cache_left=_private_cache_left(params))


def _write_partition(spark, db: str, location: Path, dt: str, first_id: int) -> None:
    """Four small parquet files in a partition directory, then the partition added to the metastore."""
    frame = spark.range(first_id, first_id + 40, numPartitions=4).selectExpr(
        "CAST(id AS INT) AS id", "concat('row-', id) AS payload"
    )
    path = f"file://{location}/dt={dt}"  # not Path.as_uri(), which would escape "=" as %3D
    frame.write.mode("overwrite").parquet(path)
    spark.sql(f"ALTER TABLE {db}.events ADD PARTITION (dt='{dt}') LOCATION '{path}'")


def _login_user(spark) -> str:
    return spark._jvm.org.apache.hadoop.security.UserGroupInformation.getLoginUser().toString()


def _private_cache_left(params: dict) -> bool:
    return any(Path(params["tmp_root"]).glob("lakekeeper-krb5-*"))


if __name__ == "__main__":
    options = json.loads(Path(sys.argv[1]).read_text())
    metastore_refuses(options)
    table_work_renewal_and_expiry(options)
