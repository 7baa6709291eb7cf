"""Retention on real tables: flat and nested time columns, the dry run, the guards, and kills at each journal step
followed by `recover`."""

from __future__ import annotations

import shutil
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest

from lakekeeper_dagster.engine.errors import ConfigError, OperationError
from lakekeeper_dagster.engine.hive.catalog import list_partitions, read_table
from lakekeeper_dagster.engine.ops.retention import retain_table
from lakekeeper_dagster.engine.policies import TablePolicies
from lakekeeper_dagster.engine.protocol.recovery import recover
from lakekeeper_dagster_tests.tables import cli_spark_submit, data_files, make_table, rows_of, run_cli

NOW = datetime(2024, 6, 1)
FLAT = [{"dt": "2019041316"}, {"dt": "2019041317"}, {"dt": "2024053123"}, {"dt": "latest"}]
NESTED = [
    {"year": y, "month": m, "day": d, "hour": h}
    for y, m, d, h in [("2019", "04", "16", "19"), ("2019", "04", "17", "00"), ("2024", "05", "31", "23")]
]
FLAT_POLICY = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, retention={"older_than": "90d"})
NESTED_POLICY = TablePolicies(partition_time={"year": "%Y", "month": "%m", "day": "%d", "hour": "%H"})


def state(spark, database: str, name: str, root: Path) -> tuple:
    """What must not change: the metastore's partitions and every file under the table's directory."""
    info = read_table(spark, database, name)
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    return [(u.partition, u.location) for u in list_partitions(spark, info)], files


def partitions(spark, database: str, name: str) -> list[str]:
    return [u.partition for u in list_partitions(spark, read_table(spark, database, name))]


@pytest.fixture
def trash(spark):
    """A configured Trash (fs.trash.interval) in the user's home, emptied afterwards."""
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set("fs.trash.interval", "60")
    yield Path.home() / ".Trash" / "Current"
    conf.unset("fs.trash.interval")


def test_flat_retention_dry_run_changes_nothing_then_drops_to_the_trash(spark, database, data_dir, trash):
    root = data_dir / "flat"
    table = make_table(spark, database, "flat", root, partitions=FLAT, files=2, rows=10)
    before = state(spark, database, "flat", root)
    dry = retain_table(spark, database, "flat", FLAT_POLICY, dry_run=True, now=NOW)
    assert state(spark, database, "flat", root) == before
    text = "\n".join(dry.lines)
    assert "2 of 4 partition(s)" in text and "would drop" in text
    assert "DROP dt=2019041316  2019-04-13 16:00  2 files, " in text
    assert "DROP dt=2019041317  2019-04-13 17:00  2 files, " in text
    assert "UNTIMED dt=latest" in text and "2024053123" not in text

    done = retain_table(spark, database, "flat", FLAT_POLICY, now=NOW)
    moved = trash / str(root).lstrip("/")
    try:
        assert sorted(p.name for p in moved.iterdir()) == ["dt=2019041316", "dt=2019041317"]
        assert len(data_files(moved / "dt=2019041316")) == 2
    finally:
        shutil.rmtree(moved, ignore_errors=True)
    assert done.dropped == ["dt=2019041316", "dt=2019041317"] and done.files == 4 and done.bytes > 0
    assert partitions(spark, database, "flat") == ["dt=2024053123", "dt=latest"]
    assert sorted(p.name for p in root.iterdir()) == ["dt=2024053123", "dt=latest"]
    assert [r[3] for r in rows_of(spark, table)] == ["2024053123"] * 10 + ["latest"] * 10
    assert not (data_dir / ".lakekeeper-flat" / "journal").exists() or not any(
        (data_dir / ".lakekeeper-flat" / "journal").iterdir()
    )


def test_nested_retention_keeps_the_newest_and_a_shared_location(spark, database, data_dir):
    """Every partition older: the newest timed one stays; one whose directory a kept partition uses stays too."""
    root = data_dir / "nested"
    table = make_table(spark, database, "nested", root, partitions=NESTED, files=2, rows=10)
    spark.sql(
        f"ALTER TABLE {table} PARTITION (year='2019', month='04', day='17', hour='00') "
        f"SET LOCATION '{root.as_uri()}/year=2024/month=05/day=31/hour=23'"
    )
    before = state(spark, database, "nested", root)
    dry = retain_table(spark, database, "nested", NESTED_POLICY, "1d", dry_run=True, now=datetime(2025, 1, 1))
    assert state(spark, database, "nested", root) == before
    text = "\n".join(dry.lines)
    assert "KEEP year=2024/month=05/day=31/hour=23  2024-05-31 23:00" in text and "newest" in text
    assert "KEEP year=2019/month=04/day=17/hour=00" in text and "shared with a partition that is kept" in text

    done = retain_table(spark, database, "nested", NESTED_POLICY, "1d", skip_trash=True, now=datetime(2025, 1, 1))
    assert done.dropped == ["year=2019/month=04/day=16/hour=19"] and done.files == 2
    assert not (root / "year=2019" / "month=04" / "day=16" / "hour=19").exists()
    assert (root / "year=2019" / "month=04" / "day=17" / "hour=00").is_dir()  # its own (unused) directory untouched
    assert len(rows_of(spark, table)) == 20


def test_the_guards_refuse_before_anything_changes(spark, database, data_dir):
    root = data_dir / "guard"
    make_table(spark, database, "guard", root, partitions=FLAT, files=1, rows=5)
    before = state(spark, database, "guard", root)
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, retention={"older_than": "1h", "max_fraction": 0.25})
    with pytest.raises(OperationError, match=rf"{database}.guard: dropping 2 of its 4 partitions .*max_fraction"):
        retain_table(spark, database, "guard", policy, now=NOW, skip_trash=True)
    with pytest.raises(OperationError, match="no Trash .*--skip-trash"):
        retain_table(spark, database, "guard", policy, now=NOW, force=True)
    with pytest.raises(ConfigError, match=f"table_overrides.{database}.guard.retention.older_than"):
        retain_table(spark, database, "guard", TablePolicies(partition_time={"dt": "%Y%m%d%H"}), now=NOW)
    with pytest.raises(ConfigError, match=f"table_overrides.{database}.guard.partition_time"):
        retain_table(spark, database, "guard", TablePolicies(), "90d", now=NOW)
    assert state(spark, database, "guard", root) == before
    done = retain_table(spark, database, "guard", policy, now=NOW, force=True, skip_trash=True)
    assert done.dropped == ["dt=2019041316", "dt=2019041317"]
    assert partitions(spark, database, "guard") == ["dt=2024053123", "dt=latest"]


KILL_POINTS = ["dropping", "record_written:unregistered", "unregistered", "dropped"]


@pytest.mark.slow
@pytest.mark.parametrize("point", KILL_POINTS)
def test_retention_killed_at_each_journal_step_is_recovered(spark, metastore, database, data_dir, tmp_path, point):
    root = data_dir / "kr"
    table = make_table(spark, database, "kr", root, partitions=FLAT, files=2, rows=10)
    config = {"table_overrides": {table: {"partition_time": {"dt": "%Y%m%d%H"}}}}
    args = ["retention", "--table", table, "--older-than", "90d", "--skip-trash"]
    crashed = run_cli(args, tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": f"kill@{point}"}, config=config)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    recover(spark, [(database, "kr")])
    # the first partition's drop was begun: finished; the second one's not yet begun: untouched
    assert partitions(spark, database, "kr") == ["dt=2019041317", "dt=2024053123", "dt=latest"]
    assert sorted(p.name for p in root.iterdir()) == ["dt=2019041317", "dt=2024053123", "dt=latest"]
    assert len(rows_of(spark, table)) == 30
    assert not any((data_dir / ".lakekeeper-kr" / "journal").iterdir())


@pytest.mark.parametrize("point", ["dropping", "unregistered"])
def test_recover_never_drops_a_partition_re_added_after_the_kill(spark, metastore, database, data_dir, tmp_path, point):
    """Killed with its intent journaled (the partition still registered) or once unregistered: an operator
    re-adds the partition before `recover`, which leaves it and its directory alone."""
    root = data_dir / "ra"
    table = make_table(spark, database, "ra", root, partitions=FLAT[:3], files=2, rows=10)
    config = {"table_overrides": {table: {"partition_time": {"dt": "%Y%m%d%H"}}}}
    args = ["retention", "--table", table, "--older-than", "90d", "--skip-trash", "--force"]
    crashed = run_cli(args, tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": f"kill@{point}"}, config=config)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    if point == "dropping":  # still registered: the operator drops it first
        spark.sql(f"ALTER TABLE {table} DROP PARTITION (dt='2019041316')")
        time.sleep(1.5)  # the metastore's create time counts seconds
    spark.sql(f"ALTER TABLE {table} ADD PARTITION (dt='2019041316')")
    first, second = recover(spark, [(database, "ra")])
    assert "dt=2019041316: re-added since" in first and "left" in first and "rolled forward" not in first
    assert "dt=2019041317: drop had not started" in second
    assert partitions(spark, database, "ra") == ["dt=2019041316", "dt=2019041317", "dt=2024053123"]
    assert len(data_files(root / "dt=2019041316")) == 2 and len(rows_of(spark, table)) == 30


@pytest.mark.slow
def test_recover_refuses_to_delete_what_was_meant_for_a_trash_that_is_gone(
    spark, metastore, database, data_dir, tmp_path
):
    """Killed once unregistered by a run with a Trash; recovered where there is none: refused (the directory
    stays), then finished once the Trash is back."""
    root = data_dir / "tg"
    table = make_table(spark, database, "tg", root, partitions=FLAT, files=2, rows=10)
    with_trash = {**cli_spark_submit(), "extra_conf": {"spark.hadoop.fs.trash.interval": "60"}}
    config = {"spark_submit": with_trash, "table_overrides": {table: {"partition_time": {"dt": "%Y%m%d%H"}}}}
    args = ["retention", "--table", table, "--older-than", "90d"]
    crashed = run_cli(args, tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": "kill@unregistered"}, config=config)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    with pytest.raises(OperationError, match="dt=2019041316 could not be moved to the Trash"):
        recover(spark, [(database, "tg")])
    assert len(data_files(root / "dt=2019041316")) == 2
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    conf.set("fs.trash.interval", "60")
    moved = Path.home() / ".Trash" / "Current" / str(root).lstrip("/")
    try:
        recover(spark, [(database, "tg")])
        assert sorted(p.name for p in moved.iterdir()) == ["dt=2019041316"]
    finally:
        conf.unset("fs.trash.interval")
        shutil.rmtree(moved, ignore_errors=True)
    assert partitions(spark, database, "tg") == ["dt=2019041317", "dt=2024053123", "dt=latest"]
    assert not (root / "dt=2019041316").exists() and len(rows_of(spark, table)) == 30


def test_the_cli_names_the_missing_key_and_its_dry_run_changes_nothing(spark, metastore, database, data_dir, tmp_path):
    root = data_dir / "cd"
    table = make_table(spark, database, "cd", root, partitions=FLAT, files=2, rows=10)
    config = {"table_overrides": {table: {"partition_time": {"dt": "%Y%m%d%H"}}}}
    refused = run_cli(["retention", "--table", table, "--dry-run"], tmp_path, metastore.uri, config=config)
    assert refused.returncode == 2 and f"table_overrides.{table}.retention.older_than" in refused.stderr
    before = state(spark, database, "cd", root)
    args = ["retention", "--table", table, "--older-than", "90d", "--dry-run"]
    dry = run_cli(args, tmp_path, metastore.uri, config=config)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "DROP dt=2019041316  2019-04-13 16:00  2 files, " in dry.stdout and "KEEP dt=2024053123" in dry.stdout
    assert state(spark, database, "cd", root) == before


def test_a_table_that_purges_on_drop_still_sends_the_data_to_the_trash(spark, database, data_dir, trash):
    """HMS 3 deletes an external table's partition data on drop with external.table.purge: retention unregisters
    with the data retained, so the directory reaches the Trash, not oblivion."""
    root = data_dir / "pg"
    make_table(
        spark, database, "pg", root, partitions=FLAT, files=2, rows=10, properties={"external.table.purge": "true"}
    )
    done = retain_table(spark, database, "pg", FLAT_POLICY, now=NOW)
    moved = trash / str(root).lstrip("/")
    try:
        assert sorted(p.name for p in moved.iterdir()) == ["dt=2019041316", "dt=2019041317"]
        assert len(data_files(moved / "dt=2019041317")) == 2
    finally:
        shutil.rmtree(moved, ignore_errors=True)
    assert done.dropped == ["dt=2019041316", "dt=2019041317"]
    assert partitions(spark, database, "pg") == ["dt=2024053123", "dt=latest"]
