"""The local Hive Metastore thrift server: start, stop, restart, shared by two Spark processes, clear failures."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lakekeeper_dagster_tests.jvm import TEST_METASTORE_FLAGS
from lakekeeper_dagster_tests.tables import REPO
from spark_resources.hive_session import require_metastore
from spark_resources.metastore import MetastoreError, MetastoreServer, free_port, list_databases

SPARK_CLIENT = textwrap.dedent(
    """
    import sys
    from spark_resources.session import hive_spark_conf, start_spark_session
    from spark_resources.settings import SparkSubmitSettings
    uri, warehouse, name, peer = sys.argv[1:5]
    conf = hive_spark_conf(SparkSubmitSettings(master="local[1]"), uri, warehouse, app_name=name)
    spark = start_spark_session(conf)
    spark.sql(f"CREATE DATABASE IF NOT EXISTS {name}")
    spark.sql(f"CREATE TABLE {name}.t USING parquet AS SELECT id FROM range(5)")
    import time
    for _ in range(120):
        if spark._jsparkSession.sharedState().externalCatalog().databaseExists(peer):
            break
        time.sleep(0.5)
    print("sum", spark.table(f"{name}.t").selectExpr("sum(id)").first()[0], "peer", peer in
          [d.name for d in spark.catalog.listDatabases()])
    spark.stop()
    """
)


@pytest.fixture
def server(tmp_path) -> MetastoreServer:
    srv = MetastoreServer(
        home=tmp_path / "ms", uri=f"thrift://127.0.0.1:{free_port()}", java_options=TEST_METASTORE_FLAGS
    )
    yield srv
    srv.stop()


def test_start_status_stop_restart_keeps_data(server):
    assert "stopped" in server.status()
    server.start()
    assert server.is_running()
    assert "running at" in server.status() and server.uri in server.status()
    assert "default" in list_databases(server.host, server.port)
    server.start()  # a second start is a no-op on the running server
    assert server.stop() is True
    assert not server.is_running() and not server.pid_file.exists()
    assert server.stop() is False
    server.start()
    assert "default" in list_databases(server.host, server.port)


def test_two_spark_processes_share_it(server, tmp_path):
    server.start()
    warehouse = (tmp_path / "wh").as_uri()
    env = {
        "PYTHONPATH": str(REPO),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYSPARK_SUBMIT_ARGS": os.environ["PYSPARK_SUBMIT_ARGS"],
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SPARK_CLIENT, server.uri, warehouse, name, peer],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        for name, peer in (("proc_a", "proc_b"), ("proc_b", "proc_a"))
    ]
    outputs = [p.communicate(timeout=240) for p in procs]
    for proc, (out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-2000:]
        assert "sum 10 peer True" in out
    assert {"proc_a", "proc_b"} <= set(list_databases(server.host, server.port))


def test_a_server_that_ignores_sigterm_is_killed_and_gone_when_stop_returns(server):
    """A JVM started with SIGTERM ignored (as a parent's SIG_IGN is inherited) never runs its shutdown: stop kills it
    after its timeout and returns only once the process is gone, so a restart finds its port free."""
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        server.start()
    finally:
        signal.signal(signal.SIGTERM, previous)
    pid = server.pid()
    ignored = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigIgn"))
    assert int(ignored.split()[1], 16) & (1 << (signal.SIGTERM - 1))  # the JVM ignores SIGTERM: stop must kill it
    assert server.stop(timeout=1.0) is True
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped (a child of this process), not still dying
    server.start()
    assert "default" in list_databases(server.host, server.port)


@pytest.mark.pure
def test_free_ports_are_below_the_kernels_ephemeral_range():
    """A restarted server keeps its port: no `bind(0)` or outgoing connection of another process can take it."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    if low <= 10000:
        pytest.skip(f"the kernel's ephemeral range starts at {low}: free_port falls back to bind(0)")
    ports = {free_port() for _ in range(20)}
    assert all(10000 <= port < low for port in ports) and len(ports) > 1


def test_port_taken_by_another_process_is_refused(tmp_path):
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        srv = MetastoreServer(home=tmp_path / "ms", uri=f"thrift://127.0.0.1:{port}")
        with pytest.raises(MetastoreError, match=f"port {port} .* already in use by another process"):
            srv.start()
    assert not srv.pid_file.exists()


def test_missing_java_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    srv = MetastoreServer(home=tmp_path / "ms", uri=f"thrift://127.0.0.1:{free_port()}")
    with pytest.raises(MetastoreError, match="Java was not found"):
        srv.start()


def test_server_dying_at_start_reports_its_log(tmp_path):
    srv = MetastoreServer(home=tmp_path / "ms", uri=f"thrift://127.0.0.1:{free_port()}", java_options=["-Xmx1k"])
    with pytest.raises(MetastoreError, match="exited with code"):
        srv.start(timeout=60)
    assert not srv.is_running()


def test_bad_uri_is_rejected(tmp_path):
    with pytest.raises(MetastoreError, match="thrift://HOST:PORT"):
        MetastoreServer(home=tmp_path, uri="http://localhost:9083")


@pytest.mark.pure
def test_one_answering_metastore_of_a_comma_separated_list_is_enough_and_none_is_a_clear_error():
    """The one reachability check (CLI, Dagster runs, `demo run`): an HA list whose first metastore is down passes
    when another answers; with none answering, the error names the list, what needed it and what to do."""
    with socket.socket() as down, socket.socket() as up:
        down.bind(("127.0.0.1", 0))  # bound, not listening: refuses connections
        up.bind(("127.0.0.1", 0))
        up.listen()
        down_uri = f"thrift://127.0.0.1:{down.getsockname()[1]}"
        require_metastore(f"{down_uri},thrift://127.0.0.1:{up.getsockname()[1]}", "the demo")
        with pytest.raises(MetastoreError, match=f"the Hive Metastore at {down_uri} is not reachable, and the demo "):
            require_metastore(down_uri, "the demo")
