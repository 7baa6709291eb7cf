"""`lakekeeper-dagster hadoop start|status|stop`: a real HDFS (Hadoop's minicluster, its jar from Maven)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from lakekeeper_dagster_tests.surface.test_cli import run_cli
from spark_resources import hadoop
from spark_resources.hadoop import HadoopError, LocalHadoop, minicluster_jar
from spark_resources.processes import gone_within


@pytest.mark.slow
def test_hadoop_start_status_stop_and_restart_keep_the_files(tmp_path):
    (tmp_path / "lakekeeper.yaml").write_text(f"metastore:\n  home: {tmp_path / 'lk'}\n")
    home = tmp_path / "lk" / "hadoop"
    try:
        assert run_cli(["hadoop", "status"], tmp_path).returncode == 3
        started = run_cli(["hadoop", "start"], tmp_path)
        assert started.returncode == 0, started.stderr
        uri = LocalHadoop(home).uri
        assert f"HDFS running: {uri}" in started.stdout
        written = yaml.safe_load((home / "lakekeeper-hdfs.yaml").read_text())
        assert written["metastore"]["warehouse_dir"] == f"{uri}/warehouse"
        assert written["metastore"]["home"] == str(tmp_path / "lk")
        assert f"<value>{uri}</value>" in (home / "conf" / "core-site.xml").read_text()
        status = run_cli(["hadoop", "status"], tmp_path)
        assert status.returncode == 0 and f"running at {uri}" in status.stdout
        # A client of pyspark's Hadoop writes a file through the NameNode; it is still there after a restart.
        _hdfs_shell(home, ["-put", "-", f"{uri}/kept"], b"a line\n")
        assert "HDFS stopped" in run_cli(["hadoop", "stop"], tmp_path).stdout
        assert run_cli(["hadoop", "status"], tmp_path).returncode == 3
        assert run_cli(["hadoop", "start"], tmp_path).returncode == 0
        assert LocalHadoop(home).uri == uri  # the same port: the metastore's locations still name it
        pid = LocalHadoop(home).pid()
        assert _hdfs_shell(home, ["-cat", f"{uri}/kept"]) == "a line\n"
    finally:
        run_cli(["hadoop", "stop"], tmp_path)
    assert LocalHadoop(home).pid() is None and gone_within(pid, 0)
    assert "was not running" in run_cli(["hadoop", "stop"], tmp_path).stdout


def _hdfs_shell(home, args: list[str], stdin: bytes = b"") -> str:
    """`hdfs dfs ARGS` run with the minicluster's classpath (Hadoop's FsShell, the HADOOP_CONF_DIR it wrote)."""
    command = [*LocalHadoop(home).java(home / "conf"), "org.apache.hadoop.fs.FsShell", *args]
    done = subprocess.run(command, input=stdin, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


@pytest.mark.pure
def test_without_maven_the_fetch_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKEKEEPER_JAR_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(HadoopError, match=r"Maven \(`mvn`\) is not on PATH.*apt-get install maven"):
        minicluster_jar()
    assert not (tmp_path / "cache" / "jars").exists()


@pytest.mark.pure
def test_a_minicluster_of_another_hadoop_than_pysparks_is_refused(monkeypatch):
    monkeypatch.setattr(hadoop, "HADOOP_VERSION", "3.4.1")
    with pytest.raises(HadoopError, match=r"pyspark's Hadoop client is hadoop-client-api-3\.5\.0\.jar, not 3\.4\.1"):
        minicluster_jar()
