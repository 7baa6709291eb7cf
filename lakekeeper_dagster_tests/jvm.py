"""The flags of every JVM the tests start, and the class archive that makes a test's Spark JVM start sooner.

C1 only and the serial collector: a short-lived Spark driver spends ~40 % less CPU to reach the same point
(benchmarks/README.md's figures: 19.0 -> 9.9 CPU-s to a kill point), and nothing it runs changes. Not for
production: a long compaction wants C2's code and a parallel collector, so the product never sets them.

A Spark driver's JVM also loads ~15,000 classes from pyspark's jars at every start. `python -m
lakekeeper_dagster_tests.jvm` (a stage of `make test`) runs a small Hive/Parquet/ORC workload once with
`-XX:ArchiveClassesAtExit` and keeps the loaded classes as a CDS archive in the virtualenv; the tests' drivers then map
it (`-XX:SharedArchiveFile`) instead of parsing and verifying those classes again. Without the archive they start as
before; a stale one (other jars) is ignored by the JVM.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

TEST_JVM_FLAGS = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
# The test metastores' Derby commits without syncing its log to disk (Derby's own setting for tests): a throwaway
# metastore needs no durability across a power loss.
TEST_METASTORE_FLAGS = [*TEST_JVM_FLAGS, "-Dderby.system.durability=test"]
ARCHIVE = Path(sys.prefix) / "lakekeeper-test-classes.jsa"
QUIET_CDS = "-Xlog:cds=off,cds+dynamic=off"

# What the tests' drivers do, in small: a Hive session, tables written and read as Parquet and ORC, a shuffle.
WORKLOAD = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    root = sys.argv[1]
    spark = (
        SparkSession.builder.master("local[1]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.warehouse.dir", root + "/warehouse")
        .config("spark.driver.extraJavaOptions", "-Dderby.system.home=" + root)
        .enableHiveSupport()
        .getOrCreate()
    )
    spark.sql("CREATE DATABASE d")
    df = spark.range(0, 1000, numPartitions=4).selectExpr("id", "cast(id AS string) AS v", "id % 7 AS n")
    for fmt in ("parquet", "orc"):
        df.write.format(fmt).partitionBy("n").saveAsTable("d." + fmt)
        df.repartition(2).write.format(fmt).save(root + "/" + fmt)
        spark.table("d." + fmt).groupBy("n").count().collect()
        spark.read.format(fmt).load(root + "/" + fmt).selectExpr("sum(hash(*))").collect()
    spark.stop()
    """
)


def submit_args() -> str:
    """PYSPARK_SUBMIT_ARGS for the tests' Spark JVMs (the session's, every CLI and Dagster subprocess's, the test
    cluster's executors): the flags through Spark's own `defaultJavaOptions`, prepended to any `extraJavaOptions`
    (Kerberos's, for one); the driver also maps the class archive when there is one."""
    executor = " ".join(TEST_JVM_FLAGS)
    driver = executor + (f" -XX:SharedArchiveFile={ARCHIVE} {QUIET_CDS}" if ARCHIVE.exists() else "")
    confs = [f"spark.driver.defaultJavaOptions={driver}", f"spark.executor.defaultJavaOptions={executor}"]
    return " ".join(f"--conf {shlex.quote(conf)}" for conf in confs) + " pyspark-shell"


def dump_archive() -> None:
    """Run the workload once in a driver that writes the classes it loaded into ARCHIVE (replaced atomically)."""
    partial = ARCHIVE.with_suffix(".partial")
    flags = " ".join([*TEST_JVM_FLAGS, f"-XX:ArchiveClassesAtExit={partial}", QUIET_CDS])
    conf = shlex.quote(f"spark.driver.defaultJavaOptions={flags}")
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": f"--conf {conf} pyspark-shell"}
    with tempfile.TemporaryDirectory(prefix="lk-test-classes-") as root:
        done = subprocess.run(
            [sys.executable, "-c", WORKLOAD, root], env=env, capture_output=True, text=True, timeout=600
        )
    if done.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        sys.exit(f"the class archive was not written ({done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    partial.replace(ARCHIVE)
    print(f"{ARCHIVE}: {ARCHIVE.stat().st_size // 2**20} MB")


if __name__ == "__main__":
    dump_archive()
