"""`lakekeeper-dagster hadoop start|status|stop`: a real HDFS (Hadoop's minicluster, its jar from Maven)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from lakekeeper_dagster.cli import app as cli
from lakekeeper_dagster_tests.cli.test_cli import run_cli
from lakekeeper_dagster_tests.hdfs import dfs, jpath
from spark_resources import hadoop
from spark_resources.hadoop import HadoopError, LocalHadoop, hadoop_jars
from spark_resources.maven import MavenError
from spark_resources.processes import gone_within


@pytest.mark.slow
def test_hadoop_start_status_stop_and_restart_keep_the_files(spark, tmp_path, capsys):
    """The first start as a user runs it (the command in a process of its own), the rest through `cli.main`."""
    config = tmp_path / "lakekeeper.yaml"
    config.write_text(f"metastore:\n  home: {tmp_path / 'lk'}\n")
    home = tmp_path / "lk" / "hadoop"

    def hadoop(*args: str) -> tuple[int, str]:
        code = cli.main(["--config-file", str(config), "hadoop", *args])
        return code, capsys.readouterr().out

    try:
        assert hadoop("status")[0] == 3
        started = run_cli(["hadoop", "start"], tmp_path)
        assert started.returncode == 0, started.stderr
        uri = LocalHadoop(home).uri
        assert f"HDFS running: {uri}" in started.stdout
        written = yaml.safe_load((home / "lakekeeper-hdfs.yaml").read_text())
        assert written["metastore"]["warehouse_dir"] == f"{uri}/warehouse"
        assert written["metastore"]["home"] == str(tmp_path / "lk")
        assert f"<value>{uri}</value>" in (home / "conf" / "core-site.xml").read_text()
        code, shown = hadoop("status")
        assert code == 0 and f"running at {uri}" in shown
        # Hadoop's own shell, with only the HADOOP_CONF_DIR it wrote, writes a file; it is there after a restart.
        _hdfs_shell(home, ["-put", "-", "/kept"], b"a line\n")
        assert "HDFS stopped" in hadoop("stop")[1]
        assert hadoop("status")[0] == 3
        elsewhere = tmp_path / "elsewhere.yaml"
        assert hadoop("start", "--write-config", str(elsewhere))[0] == 0
        assert LocalHadoop(home).uri == uri  # the same port: the metastore's locations still name it
        assert yaml.safe_load(elsewhere.read_text()) == written
        pid = LocalHadoop(home).pid()
        stream = dfs(spark, uri).open(jpath(spark, f"{uri}/kept"))
        assert bytes(stream.readAllBytes()) == b"a line\n"
        stream.close()
    finally:
        hadoop("stop")
    assert LocalHadoop(home).pid() is None and gone_within(pid, 0)
    assert "was not running" in hadoop("stop")[1]


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
    with pytest.raises(MavenError, match=r"Maven \(`mvn`\) is not on PATH.*apt-get install maven"):
        hadoop_jars()
    assert not (tmp_path / "cache" / "jars").exists()


@pytest.mark.pure
def test_a_minicluster_of_another_hadoop_than_pysparks_is_refused(monkeypatch):
    monkeypatch.setattr(hadoop, "HADOOP_VERSION", "3.4.1")
    with pytest.raises(HadoopError, match=r"pyspark's Hadoop client is hadoop-client-api-3\.5\.0\.jar, not 3\.4\.1"):
        hadoop_jars()
