"""Shared fixtures: one real Hive Metastore thrift server and one Spark session per test session.

`pytest --spark-cluster` runs the tests marked `cluster` (and only those) with that session on a Spark standalone
cluster the suite starts (a Master and two Workers from pyspark's jars, executors in JVMs of their own, the driver in
the pytest process: client mode); `pytest --spark-cluster=yarn` runs them on YARN (the local Hadoop's
ResourceManager and two NodeManagers, Spark's jars staged on its HDFS; client mode). The CLI subprocesses of
`tables.run_cli` run there too. A cluster that cannot start fails the run. Without the option the cluster-only tests
(`cluster(only=True)`, or `cluster(only="yarn")`: on YARN only) are deselected.
"""

from __future__ import annotations

import dataclasses
import getpass
import itertools
import os
import signal
from pathlib import Path

import pytest
import yaml
from dagster._core.definitions.definitions_load_context import DefinitionsLoadContext

from lakekeeper_dagster_tests.hdfs import EZ_KEY, GROUPS, dfs, jpath
from lakekeeper_dagster_tests.jvm import TEST_JVM_FLAGS, TEST_METASTORE_FLAGS, submit_args
from lakekeeper_dagster_tests.tables import CLI_CONFIG_ENV
from spark_resources.cluster import SparkCluster
from spark_resources.hadoop import LocalHadoop
from spark_resources.local_yarn import LocalYarn
from spark_resources.metastore import MetastoreServer, free_port
from spark_resources.session import local_hive_conf, start_spark_session
from spark_resources.settings import SparkSubmitSettings, render_spark_conf

_db_counter = itertools.count()

# A developer's own PostgreSQL instance must not leak into the instances the tests install (test_postgres sets
# its own URL where it wants one).
os.environ.pop("DAGSTER_POSTGRES_URL", None)


CLUSTER_OPTION = "--spark-cluster"
# The cluster's apps: the test session's and a CLI subprocess's run at once, each on 2 executors of 1 core (one on
# each Worker: a shuffle crosses JVMs), so a Worker offers 2 cores.
TEST_CLUSTER = {"workers": 2, "worker_cores": 2, "app_cores": 2}
# On YARN the tests' tables stay on the local filesystem (their paths name no scheme): the default filesystem of the
# sessions there is the local one, not the HDFS of the YARN's HADOOP_CONF_DIR (`local_default_fs`).


def pytest_addoption(parser) -> None:
    parser.addoption(
        CLUSTER_OPTION,
        nargs="?",
        const="standalone",
        choices=["standalone", "yarn"],
        help="run the `cluster` tests on a Spark standalone cluster, or on YARN (--spark-cluster=yarn)",
    )


def pytest_configure(config) -> None:
    """The test JVMs' flags and class archive (`jvm.py`), for every Spark JVM this run and its subprocesses start;
    SIGTERM ends the run as Ctrl-C does, fixtures torn down (`make test` ends the cluster tier so), so the servers and
    clusters they started in sessions of their own are stopped."""
    os.environ["PYSPARK_SUBMIT_ARGS"] = submit_args()
    signal.signal(signal.SIGTERM, _interrupt)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Started as a background job (the cluster tier in `make test`, a script's `&`): SIGINT is ignored, and
        # Dagster maps SIGTERM to SIGINT's handler around each in-process run, so every process started after one
        # would ignore SIGTERM: metastores and daemons would stop only after `stop`'s timeout, by SIGKILL.
        signal.signal(signal.SIGINT, _interrupt)


_interrupted: list[int] = []


def _interrupt(signum, frame) -> None:
    """The first SIGTERM (or SIGINT) interrupts the run; later ones (Ctrl-C, then `make test`'s kill) let its
    teardown finish stopping what it started."""
    if not _interrupted:
        _interrupted.append(signum)
        raise KeyboardInterrupt


# `make test` runs the suite in two pytest-xdist workers (`--dist loadgroup`), each with its own metastore, Spark
# session and temp dirs. The tests of one session-scoped service run in one worker, which starts it once: the KDC with
# its Kerberized metastore, PostgreSQL. (Tests that run commands in the repository folder are marked
# `xdist_group("repository")` where they are.)
XDIST_GROUPS = {"kdc": "kerberos", "postgres": "postgres"}
# What a `pure` test may not use: each starts a JVM or a server.
SERVICE_FIXTURES = {"spark", "metastore", "spark_cluster", "kdc", "kerberized_metastore", "postgres", "hdfs"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items) -> None:
    """On the cluster only the `cluster` tests; locally all but the `cluster(only=True)` ones (deselected, not
    skipped). Tests of a shared service grouped for xdist (XDIST_GROUPS)."""
    on_cluster = config.getoption(CLUSTER_OPTION)
    keep, drop = [], []
    for item in items:
        marker = item.get_closest_marker("cluster")
        only = marker.kwargs.get("only") if marker else None  # True: on any cluster; "yarn": on YARN only
        wanted = (
            marker is not None and only in (None, False, True, on_cluster) if on_cluster else marker is None or not only
        )
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    for item in items:
        services = SERVICE_FIXTURES.intersection(item.fixturenames)
        if item.get_closest_marker("pure") and services:
            raise pytest.UsageError(f"{item.nodeid} is marked pure but uses {', '.join(sorted(services))}")
        group = next((group for fixture, group in XDIST_GROUPS.items() if fixture in item.fixturenames), None)
        if group and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(autouse=True)
def fresh_definitions_load():
    """Each test loads definitions as a new process would (initialization: the newest stored state). Dagster keeps
    the load context of the last repository it loaded from a code pointer (an in-process location, a reconstructed
    job) for the whole process, with the state versions of that moment: a later test's load would skip the refresh
    or read a stale version (in the whole suite, test_state.py then saw no stored state)."""
    DefinitionsLoadContext.set(None)


@pytest.fixture(scope="session")
def spark_cluster(request, tmp_path_factory) -> SparkCluster | LocalYarn | None:
    """The cluster of a `--spark-cluster` run (None otherwise): a Spark standalone cluster, or with
    `--spark-cluster=yarn` the local Hadoop's YARN (HADOOP_CONF_DIR set to its client configuration); stopped at the
    end."""
    kind = request.config.getoption(CLUSTER_OPTION)
    if not kind:
        yield None
        return
    if kind == "yarn":
        hadoop = LocalHadoop(
            home=tmp_path_factory.mktemp("yarn"), nodemanagers=2, groups=GROUPS, java_options=TEST_JVM_FLAGS
        )
        try:
            hadoop.start()
            os.environ["HADOOP_CONF_DIR"] = str(hadoop.conf_dir)
            cluster = LocalYarn(hadoop, extra_conf=local_default_fs(hadoop))
            # A subprocess's application runs on one executor (a JVM fewer to start on 2 cores); the session's
            # two keep a shuffle crossing JVMs.
            cli_block = dataclasses.replace(cluster, num_executors=1).spark_submit()
            os.environ[CLI_CONFIG_ENV] = yaml.safe_dump({"spark_submit": cli_block})
            yield cluster
        finally:
            os.environ.pop(CLI_CONFIG_ENV, None)
            os.environ.pop("HADOOP_CONF_DIR", None)
            hadoop.stop()
        return
    cluster = SparkCluster(home=tmp_path_factory.mktemp("spark_cluster"), **TEST_CLUSTER)
    try:
        cluster.start()
        os.environ[CLI_CONFIG_ENV] = cluster.config_block()
        yield cluster
    finally:
        os.environ.pop(CLI_CONFIG_ENV, None)
        cluster.stop()


def local_default_fs(hadoop: LocalHadoop) -> dict[str, str]:
    """The local filesystem the default one, the applications' staging directory still on the HDFS (else each
    application copies Spark's staged jars to the local one)."""
    return {"spark.hadoop.fs.defaultFS": "file:///", "spark.yarn.stagingDir": f"{hadoop.uri}/user/{getpass.getuser()}"}


def cluster_session_conf(cluster: SparkCluster | LocalYarn | None) -> dict[str, str]:
    """The Spark conf that puts a session in this process on `cluster` (client mode)."""
    if isinstance(cluster, LocalYarn):
        return render_spark_conf(SparkSubmitSettings.model_validate(cluster.spark_submit()))
    return cluster.session_conf() if cluster else {}


@pytest.fixture(scope="session")
def metastore(tmp_path_factory) -> MetastoreServer:
    """A real Derby-backed metastore on a free loopback port, in a temp home."""
    home = tmp_path_factory.mktemp("metastore")
    server = MetastoreServer(home=home, uri=f"thrift://127.0.0.1:{free_port()}", java_options=TEST_METASTORE_FLAGS)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark(metastore, spark_cluster):
    """The one Spark session of the test session, pointed at the test metastore (on the cluster with
    `--spark-cluster`)."""
    os.environ["LAKEKEEPER_METASTORE_URI"] = metastore.uri
    on_cluster = cluster_session_conf(spark_cluster)
    conf = local_hive_conf(
        metastore.uri,
        metastore.warehouse_dir.as_uri(),
        app_name="lakekeeper-dagster-tests",
        extra_conf={"spark.sql.shuffle.partitions": "4", **on_cluster},
    )
    session = start_spark_session(conf)
    yield session
    session.stop()


@pytest.fixture
def database(spark, request) -> str:
    """A fresh database for one test (dropped with its tables afterwards)."""
    name = f"t{next(_db_counter)}_{request.node.name.lower()}"
    name = "".join(c if c.isalnum() else "_" for c in name)[:60]
    spark.sql(f"DROP DATABASE IF EXISTS `{name}` CASCADE")
    spark.sql(f"CREATE DATABASE `{name}`")
    yield name
    spark.sql(f"DROP DATABASE IF EXISTS `{name}` CASCADE")


@pytest.fixture(scope="session")
def hdfs(spark, tmp_path_factory) -> LocalHadoop:
    """One HDFS for the test session (Hadoop's minicluster: a NameNode and a DataNode, ACLs on, the Trash on, a key
    store with EZ_KEY, the users of GROUPS in their groups; the test JVMs' flags), the session's Spark a client of
    it. Each xdist worker that runs an HDFS test starts its own (the tier is spread over both)."""
    hadoop = LocalHadoop(
        home=tmp_path_factory.mktemp("hadoop"), key_provider_keys=[EZ_KEY], groups=GROUPS, java_options=TEST_JVM_FLAGS
    )
    hadoop.start()
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for key, value in hadoop.client_conf().items():
        conf.set(key, value)
    yield hadoop
    hadoop.stop()


@pytest.fixture
def hdfs_dir(hdfs, spark, request) -> str:
    """A fresh directory on the test HDFS for one test's tables."""
    name = "".join(c if c.isalnum() else "_" for c in request.node.name)[:80]
    location = f"{hdfs.uri}/tests/{next(_db_counter)}_{name}"
    dfs(spark, location).mkdirs(jpath(spark, location))
    return location


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """A temp directory for external table data."""
    path = tmp_path / "data"
    path.mkdir()
    return path


@pytest.fixture
def trash_home(spark, tmp_path):
    """The JVM's home (where the local filesystem's Trash lives) in a temporary directory, not the user's."""
    system = spark.sparkContext._jvm.java.lang.System
    home = system.getProperty("user.home")
    system.setProperty("user.home", str(tmp_path / "home"))
    yield tmp_path / "home" / ".Trash" / "Current"
    system.setProperty("user.home", home)


@pytest.fixture
def trash(spark, trash_home):
    """A configured Trash (fs.trash.interval) in a temporary home."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set("fs.trash.interval", "60")
    yield trash_home
    conf.unset("fs.trash.interval")
