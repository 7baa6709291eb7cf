"""Tables on the test session's HDFS (`conftest.hdfs`: Hadoop's minicluster, a real NameNode and DataNode), and ways
to look at them through the NameNode (the Hadoop FileSystem API of the test's Spark JVM)."""

from __future__ import annotations

from lakekeeper_dagster.engine.fs.locations import is_hidden
from lakekeeper_dagster_tests.tables import cli_spark_submit
from spark_resources.hadoop import LocalHadoop

EZ_KEY = "lk-test-key"  # a key of the test HDFS's key store, for encryption zones
GROUPS = {"etl": ["hadoop"]}  # an ordinary user of the test HDFS (HADOOP_USER_NAME=etl) and its groups there


def dfs(spark, location: str):
    """The DistributedFileSystem of `location` (the Java object)."""
    jvm = spark.sparkContext._jvm
    return jvm.org.apache.hadoop.fs.Path(location).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())


def jpath(spark, location: str):
    return spark.sparkContext._jvm.org.apache.hadoop.fs.Path(location)


def listing(spark, location: str) -> list:
    """The FileStatus of every entry of directory `location`, by name."""
    return sorted(dfs(spark, location).listStatus(jpath(spark, location)), key=lambda s: str(s.getPath().getName()))


def data_files(spark, location: str) -> list[str]:
    """Names of the data files of directory `location` (not hidden, not `_`-prefixed)."""
    return [
        str(s.getPath().getName())
        for s in listing(spark, location)
        if s.isFile() and not is_hidden(str(s.getPath().getName()))
    ]


def hidden_dirs(spark, location: str) -> list[str]:
    """lakekeeper's hidden directories (`.lk-*`) directly under `location`."""
    return [
        str(s.getPath().getName())
        for s in listing(spark, location)
        if s.isDirectory() and str(s.getPath().getName()).startswith(".lk-")
    ]


def exists(spark, location: str) -> bool:
    return bool(dfs(spark, location).exists(jpath(spark, location)))


def write_bytes(spark, location: str, data: bytes) -> None:
    """A file at `location` holding `data` (its directory made when missing), written through the NameNode."""
    stream = dfs(spark, location).create(jpath(spark, location), True)
    try:
        stream.write(data)
    finally:
        stream.close()


def read_bytes(spark, location: str) -> bytes:
    """The content of the file at `location`, read through the NameNode and DataNode."""
    jvm = spark.sparkContext._jvm
    out = jvm.java.io.ByteArrayOutputStream()
    jvm.org.apache.hadoop.io.IOUtils.copyBytes(dfs(spark, location).open(jpath(spark, location)), out, 65536, True)
    return bytes(out.toByteArray())


def contents(spark, location: str) -> dict[str, bytes]:
    """Each data file of directory `location` (`data_files`) by name, with its bytes."""
    return {name: read_bytes(spark, f"{location}/{name}") for name in data_files(spark, location)}


def cli_config(hadoop: LocalHadoop) -> dict:
    """The config keys of a CLI subprocess (`tables.run_cli(config=...)`) that works on the test HDFS."""
    submit = cli_spark_submit()
    extra = {**submit.get("extra_conf", {}), **hadoop.spark_conf()}
    return {"spark_submit": {**submit, "extra_conf": extra}}
