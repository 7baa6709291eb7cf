"""Shared fixtures: one real Hive Metastore thrift server and one Spark session per test session."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from spark_resources.metastore import MetastoreServer, free_port
from spark_resources.session import local_hive_conf, start_spark_session

_db_counter = itertools.count()

# A developer's own PostgreSQL instance must not leak into the instances the tests install (test_postgres sets
# its own URL where it wants one).
os.environ.pop("DAGSTER_POSTGRES_URL", None)


@pytest.fixture(scope="session")
def metastore(tmp_path_factory) -> MetastoreServer:
    """A real Derby-backed metastore on a free loopback port, in a temp home."""
    home = tmp_path_factory.mktemp("metastore")
    server = MetastoreServer(home=home, uri=f"thrift://127.0.0.1:{free_port()}")
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark(metastore):
    """The one Spark session of the test session, pointed at the test metastore."""
    os.environ["LAKEKEEPER_METASTORE_URI"] = metastore.uri
    conf = local_hive_conf(
        metastore.uri,
        metastore.warehouse_dir.as_uri(),
        app_name="lakekeeper-dagster-tests",
        extra_conf={"spark.sql.shuffle.partitions": "4"},
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


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """A temp directory for external table data."""
    path = tmp_path / "data"
    path.mkdir()
    return path
