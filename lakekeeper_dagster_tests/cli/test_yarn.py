"""The command on YARN (`--spark-cluster=yarn` only): the config `hadoop start --yarn` writes compacts a table on
that Hadoop's HDFS as one application of the ResourceManager; the application killed by the ResourceManager mid-run
(`yarn application -kill`) at a journal step, then `recover`; a queue that does not exist, refused by name before
anything is submitted or written."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lakekeeper_dagster.cli.hadoop import hdfs_config
from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.catalog import read_table
from lakekeeper_dagster.engine.hive.model import partition_name
from lakekeeper_dagster.engine.protocol.journal import load_journals
from lakekeeper_dagster.engine.protocol.recovery import recover
from lakekeeper_dagster.engine.statuses import UnitState
from lakekeeper_dagster_tests import hdfs
from lakekeeper_dagster_tests.tables import (
    DATES,
    cli_spark_submit,
    data_files,
    hidden_dirs,
    make_table,
    new_cluster_apps,
    rows_of,
    run_cli,
)


def files_of(root: Path) -> dict[str, tuple[int, int]]:
    """(size, modification time) of every file and directory under `root`, by relative path."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def wait_for_line(process, text: str) -> None:
    """Read `process`'s stderr up to a line holding `text`."""
    for line in process.stderr:
        if text in line:
            return
    pytest.fail(f"the command ended (exit {process.wait()}) before it printed {text!r}")


def new_app(cluster, known: set[str], timeout: float = 120.0) -> str:
    """The id of the one application the ResourceManager registered beyond `known`."""
    deadline = time.monotonic() + timeout
    while not (new := [app for app in cluster.applications() if app not in known]):
        assert time.monotonic() < deadline, "no application was submitted"
        time.sleep(0.5)
    (app,) = new
    return app


@pytest.mark.crash
@pytest.mark.cluster(only="yarn")
@pytest.mark.parametrize("point", ["written", "swapping"])
def test_the_yarn_application_killed_at_a_journal_step_is_recovered(
    spark, spark_cluster, metastore, database, data_dir, tmp_path, point
):
    """Killed once the batch is staged and verified (`written`), the run's next Spark call fails on its stopped
    context: the run ends with the application named and `recover` rolls the staged units back. Killed at the first
    unit's swap (`swapping`), the run needs no Spark until it is done: the swap finishes, the run succeeds."""
    root = data_dir / "ak"
    table = make_table(spark, database, "ak", root, partitions=DATES, files=4)
    before = rows_of(spark, table)
    known = set(spark_cluster.applications())
    release = tmp_path / "release"
    fault = {"LAKEKEEPER_FAULT": f"pause@{point}:{release}"}
    cli = run_cli(["compact", "--table", table], tmp_path, metastore.uri, fault, wait=False)
    try:
        wait_for_line(cli, f"lakekeeper fault: pausing at {point}")  # the run holds there, its journal open
        app = new_app(spark_cluster, known)
        spark_cluster.kill(app)
        # Spark's driver sees its application over (its monitor of the application's report stops the context).
        wait_for_line(cli, "YARN application has exited unexpectedly with state KILLED")
        report = spark_cluster.application(app)
        release.touch()
        out, err = cli.communicate(timeout=300)
    finally:
        release.touch()
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    assert (report["state"], report["finalStatus"]) == ("KILLED", "KILLED")
    home, storage = data_dir / ".lakekeeper-ak", Storage(spark)
    assert not (home / "lease").exists()  # the run gave the table back, whatever became of it
    if point == "written":
        assert cli.returncode == 1, err[-3000:]
        (message,) = [line for line in err.splitlines() if line.startswith("error: ")]
        assert message.startswith(f"error: the Spark application {app} was stopped under the run"), message
        assert "`lakekeeper-dagster recover` finishes or undoes" in message, message
        (journal,) = load_journals(storage, root.as_uri())
        assert not journal.done and {u.state for u in journal.units} == {UnitState.WRITTEN}
        assert len(hidden_dirs(data_dir)) == 2 and all(".lk-staging-" in d for d in hidden_dirs(data_dir))
    else:
        assert cli.returncode == 0, err[-3000:]
        assert out.count(": COMPACTED files 4 -> 1") == 2, out
        (journal,) = load_journals(storage, root.as_uri())
        assert journal.done and {u.state for u in journal.units} == {UnitState.COMMITTED}

    recovered = recover(spark, [(database, "ak")])

    assert rows_of(spark, table) == before
    assert all(len(data_files(root / partition_name(spec))) == (4 if point == "written" else 1) for spec in DATES)
    assert not (home / "lease").exists()
    assert all(journal.done for journal in load_journals(storage, root.as_uri()))
    if point == "written":  # rolled back: the staged copies gone, no backup taken
        assert len(recovered) == 2 and all("rolled back" in line for line in recovered), recovered
        assert hidden_dirs(data_dir) == []
    else:  # nothing to recover; the originals kept aside are the run's backup
        assert recovered == []
        assert len(hidden_dirs(data_dir)) == 2 and all(".lk-old-" in d for d in hidden_dirs(data_dir))


@pytest.mark.cluster(only="yarn")
def test_a_yarn_queue_that_does_not_exist_is_refused_by_name_before_anything_is_submitted(
    spark, spark_cluster, metastore, database, data_dir, tmp_path
):
    table = make_table(spark, database, "q", data_dir / "q", partitions=DATES, files=4)
    rows, files, metadata = rows_of(spark, table), files_of(data_dir), read_table(spark, database, "q")
    partitions = spark.sql(f"SHOW PARTITIONS {table}").collect()
    known = set(spark_cluster.applications())

    config = {"spark_submit": {**cli_spark_submit(), "queue": "nosuch"}}
    refused = run_cli(["compact", "--table", table], tmp_path, metastore.uri, config=config)

    assert refused.returncode == 2, refused.stderr[-3000:]
    (message,) = [line for line in refused.stderr.splitlines() if line.startswith("error: ")]
    assert message.startswith("error: spark_submit.queue is 'nosuch'") and "its queues are root.default" in message, (
        message
    )
    assert "Set spark_submit.queue to one of them" in message and "Nothing was done" in message, message
    assert "Traceback" not in refused.stderr
    assert set(spark_cluster.applications()) == known  # nothing submitted
    assert files_of(data_dir) == files  # nothing written: no journal, no lease, no staging
    assert read_table(spark, database, "q") == metadata
    assert spark.sql(f"SHOW PARTITIONS {table}").collect() == partitions
    assert rows_of(spark, table) == rows


@pytest.mark.cluster(only="yarn")
def test_the_config_hadoop_start_writes_compacts_a_table_on_hdfs_as_one_yarn_application(
    spark, spark_cluster, metastore, database, tmp_path
):
    hadoop = spark_cluster.hadoop
    root = f"{hadoop.uri}/tests/{database}/ev"
    table = make_table(spark, database, "ev", root, partitions=DATES, files=6)
    before = rows_of(spark, table)
    config = hdfs_config(LakekeeperConfig(metastore={"uri": metastore.uri, "home": str(tmp_path / "lk")}), hadoop)
    assert config["spark_submit"]["master"] == "yarn" and config["spark_submit"]["deploy_mode"] == "client"
    apps_before = set(spark_cluster.applications())

    done = run_cli(["compact", "--table", table], tmp_path, metastore.uri, config=config)

    assert done.returncode == 0, done.stderr
    assert rows_of(spark, table) == before
    assert [len(hdfs.data_files(spark, f"{root}/date={d['date']}")) for d in DATES] == [1, 1]
    assert new_cluster_apps(spark_cluster, apps_before) == [("lakekeeper-dagster", "FINISHED")]
    (app_id,) = set(spark_cluster.applications()) - apps_before
    report = spark_cluster.application(app_id)
    assert (report["finalStatus"], report["queue"], report["applicationType"]) == ("SUCCEEDED", "root.default", "SPARK")
