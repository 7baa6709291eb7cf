"""Retention on real tables: flat and nested time columns, the dry run, the guards, and kills at each journal step
followed by `recover`."""

from __future__ import annotations

import signal
import time
from datetime import datetime
from pathlib import Path

import pytest

from lakekeeper_dagster.engine.errors import ConfigError, OperationError
from lakekeeper_dagster.engine.hive import backup as backups
from lakekeeper_dagster.engine.hive.catalog import list_partitions, read_table
from lakekeeper_dagster.engine.ops.retention import retain_table
from lakekeeper_dagster.engine.policies import TablePolicies
from lakekeeper_dagster.engine.protocol import writers
from lakekeeper_dagster.engine.protocol.recovery import recover
from lakekeeper_dagster_tests.tables import (
    cli_spark_submit,
    data_files,
    make_table,
    rows_of,
    run_cli,
    run_cli_in_process,
    write_files,
)

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


def without(rows: list[tuple], *dropped: str) -> list[tuple]:
    """The rows of a flat table (dt last) but those of the dropped partitions' values."""
    return [r for r in rows if r[3] not in dropped]


def test_flat_retention_dry_run_changes_nothing_then_drops_to_the_trash(spark, database, data_dir, trash):
    root = data_dir / "flat"
    table = make_table(spark, database, "flat", root, partitions=FLAT, files=2, rows=10)
    before, rows = state(spark, database, "flat", root), rows_of(spark, table)
    dry = retain_table(spark, database, "flat", FLAT_POLICY, dry_run=True, now=NOW)
    assert state(spark, database, "flat", root) == before
    text = "\n".join(dry.lines)
    assert "2 of 4 partition(s)" in text and "would drop" in text
    assert "DROP dt=2019041316  2019-04-13 16:00  2 files, " in text
    assert "DROP dt=2019041317  2019-04-13 17:00  2 files, " in text
    assert "UNTIMED dt=latest" in text and "2024053123" not in text

    done = retain_table(spark, database, "flat", FLAT_POLICY, now=NOW)
    moved = trash / str(root).lstrip("/")
    assert sorted(p.name for p in moved.iterdir()) == ["dt=2019041316", "dt=2019041317"]
    assert len(data_files(moved / "dt=2019041316")) == 2
    assert sorted(done.places) == done.dropped
    assert all(where == f"moved to the Trash (file:{moved / p})" for p, where in done.places.items())
    assert done.dropped == ["dt=2019041316", "dt=2019041317"] and done.files == 4 and done.bytes > 0
    assert partitions(spark, database, "flat") == ["dt=2024053123", "dt=latest"]
    assert sorted(p.name for p in root.iterdir()) == ["dt=2024053123", "dt=latest"]
    assert rows_of(spark, table) == without(rows, "2019041316", "2019041317")
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
    before, rows = state(spark, database, "nested", root), rows_of(spark, table)
    dry = retain_table(spark, database, "nested", NESTED_POLICY, "1d", dry_run=True, now=datetime(2025, 1, 1))
    assert state(spark, database, "nested", root) == before
    text = "\n".join(dry.lines)
    assert "KEEP year=2024/month=05/day=31/hour=23  2024-05-31 23:00" in text and "newest" in text
    assert "KEEP year=2019/month=04/day=17/hour=00" in text and "shared with a partition that is kept" in text

    done = retain_table(spark, database, "nested", NESTED_POLICY, "1d", skip_trash=True, now=datetime(2025, 1, 1))
    assert done.dropped == ["year=2019/month=04/day=16/hour=19"] and done.files == 2
    assert not (root / "year=2019" / "month=04" / "day=16" / "hour=19").exists()
    assert (root / "year=2019" / "month=04" / "day=17" / "hour=00").is_dir()  # its own (unused) directory untouched
    assert rows_of(spark, table) == [r for r in rows if r[3:] != ("2019", "04", "16", "19")]


def test_the_guards_refuse_before_anything_changes(spark, database, data_dir):
    root = data_dir / "guard"
    make_table(spark, database, "guard", root, partitions=FLAT, files=1, rows=5)
    before = state(spark, database, "guard", root)
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, retention={"older_than": "1h", "max_fraction": 0.25})
    dry = "\n".join(retain_table(spark, database, "guard", policy, now=NOW, dry_run=True).lines)
    assert f"REFUSED: {database}.guard: dropping 2" in dry
    assert f"REFUSED: {database}.guard: its filesystem has no Trash" in dry
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


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("point", KILL_POINTS)
def test_retention_killed_at_each_journal_step_is_recovered(spark, metastore, database, data_dir, tmp_path, point):
    root = data_dir / "kr"
    table = make_table(spark, database, "kr", root, partitions=FLAT, files=2, rows=10)
    rows = rows_of(spark, table)
    config = {"table_overrides": {table: {"partition_time": {"dt": "%Y%m%d%H"}}}}
    args = ["retention", "--table", table, "--older-than", "90d", "--skip-trash"]
    crashed = run_cli(args, tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": f"kill@{point}"}, config=config)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    recover(spark, [(database, "kr")])
    # the first partition's drop was begun: finished; the second one's not yet begun: untouched
    assert partitions(spark, database, "kr") == ["dt=2019041317", "dt=2024053123", "dt=latest"]
    assert sorted(p.name for p in root.iterdir()) == ["dt=2019041317", "dt=2024053123", "dt=latest"]
    assert rows_of(spark, table) == without(rows, "2019041316")
    assert not any((data_dir / ".lakekeeper-kr" / "journal").iterdir())


@pytest.mark.crash
@pytest.mark.slow
def test_a_killed_retention_of_a_bucketed_table_is_recovered(spark, metastore, database, data_dir, tmp_path):
    """Retention runs on bucketed tables (it rewrites no file), which compaction refuses; `recover`
    skipped them, so the run's journal and its unregistered partition's data stayed forever."""
    root = data_dir / "kb"
    table = make_table(spark, database, "kb", root, partitions=FLAT, files=2, rows=10, buckets=2)
    assert read_table(spark, database, "kb").num_buckets == 2
    rows = rows_of(spark, table)
    config = {"table_overrides": {table: {"partition_time": {"dt": "%Y%m%d%H"}}}}
    args = ["retention", "--table", table, "--older-than", "90d", "--skip-trash"]
    crashed = run_cli(args, tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": "kill@unregistered"}, config=config)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]

    messages = recover(spark, [(database, "kb")])

    assert any("dt=2019041316" in m and "rolled forward" in m for m in messages), messages
    assert partitions(spark, database, "kb") == ["dt=2019041317", "dt=2024053123", "dt=latest"]
    assert sorted(p.name for p in root.iterdir()) == ["dt=2019041317", "dt=2024053123", "dt=latest"]
    assert rows_of(spark, table) == without(rows, "2019041316")
    assert not any((data_dir / ".lakekeeper-kb" / "journal").iterdir())


@pytest.mark.slow
@pytest.mark.crash
@pytest.mark.parametrize("point", ["dropping", "unregistered"])
def test_recover_never_drops_a_partition_re_added_after_the_kill(spark, metastore, database, data_dir, tmp_path, point):
    """Killed with its intent journaled (the partition still registered) or once unregistered: an operator
    re-adds the partition before `recover`, which leaves it and its directory alone."""
    root = data_dir / "ra"
    table = make_table(spark, database, "ra", root, partitions=FLAT[:3], files=2, rows=10)
    rows = rows_of(spark, table)
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
    assert len(data_files(root / "dt=2019041316")) == 2 and rows_of(spark, table) == rows


@pytest.mark.crash
@pytest.mark.slow
def test_recover_refuses_to_delete_what_was_meant_for_a_trash_that_is_gone(
    spark, metastore, database, data_dir, tmp_path, trash_home
):
    """Killed once unregistered by a run with a Trash; recovered where there is none: refused (the directory
    stays), then finished once the Trash is back."""
    root = data_dir / "tg"
    table = make_table(spark, database, "tg", root, partitions=FLAT, files=2, rows=10)
    rows = rows_of(spark, table)
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
    moved = trash_home / str(root).lstrip("/")
    try:
        recover(spark, [(database, "tg")])
        assert sorted(p.name for p in moved.iterdir()) == ["dt=2019041316"]
    finally:
        conf.unset("fs.trash.interval")
    assert partitions(spark, database, "tg") == ["dt=2019041317", "dt=2024053123", "dt=latest"]
    assert not (root / "dt=2019041316").exists() and rows_of(spark, table) == without(rows, "2019041316")


def test_the_cli_names_the_missing_key_and_its_dry_run_changes_nothing(spark, database, data_dir, tmp_path):
    """The config file's `dry_run: true` makes a dry run without `--dry-run`, as it does for compact (the command
    run in this process, on the test session)."""
    root = data_dir / "cd"
    table = make_table(spark, database, "cd", root, partitions=FLAT, files=2, rows=10)
    config = {"dry_run": True, "table_overrides": {table: {"partition_time": {"dt": "%Y%m%d%H"}}}}
    refused = run_cli_in_process(spark, ["retention", "--table", table, "--dry-run"], tmp_path, config)
    assert refused.returncode == 2 and f"table_overrides.{table}.retention.older_than" in refused.stderr
    before = state(spark, database, "cd", root)
    args = ["retention", "--table", table, "--older-than", "90d", "--skip-trash"]
    dry = run_cli_in_process(spark, args, tmp_path, config)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert "DROP dt=2019041316  2019-04-13 16:00  2 files, " in dry.stdout and "KEEP dt=2024053123" in dry.stdout
    assert state(spark, database, "cd", root) == before


def test_a_table_that_purges_on_drop_is_refused_unless_skip_trash(spark, database, data_dir, trash):
    """With external.table.purge the metastore may delete a partition's data when it is unregistered (HMS 3),
    beyond the Trash: refused before anything changes, named in the dry run too; --skip-trash deletes anyway."""
    root = data_dir / "pg"
    table = make_table(
        spark, database, "pg", root, partitions=FLAT, files=2, rows=10, properties={"external.table.purge": "true"}
    )
    before, rows = state(spark, database, "pg", root), rows_of(spark, table)
    message = rf"{database}.pg: its table property external.table.purge is true.*--skip-trash"
    with pytest.raises(OperationError, match=message):
        retain_table(spark, database, "pg", FLAT_POLICY, now=NOW)
    dry = "\n".join(retain_table(spark, database, "pg", FLAT_POLICY, now=NOW, dry_run=True).lines)
    assert "REFUSED: " + f"{database}.pg: its table property external.table.purge is true" in dry
    assert state(spark, database, "pg", root) == before
    done = retain_table(spark, database, "pg", FLAT_POLICY, now=NOW, skip_trash=True)
    assert done.dropped == ["dt=2019041316", "dt=2019041317"] and done.places["dt=2019041316"] == "deleted"
    assert partitions(spark, database, "pg") == ["dt=2024053123", "dt=latest"]
    assert rows_of(spark, table) == without(rows, "2019041316", "2019041317")


def killed_once_unregistered(spark, metastore, database: str, name: str, root: Path, cwd: Path):
    """A three-partition table whose retention (CLI, --skip-trash) was killed once its first partition was
    unregistered; the table and its rows before."""
    table = make_table(spark, database, name, root, partitions=FLAT[:3], files=2, rows=10)
    rows = rows_of(spark, table)
    config = {"table_overrides": {table: {"partition_time": {"dt": "%Y%m%d%H"}}}}
    args = ["retention", "--table", table, "--older-than", "90d", "--skip-trash", "--force"]
    crashed = run_cli(args, cwd, metastore.uri, {"LAKEKEEPER_FAULT": "kill@unregistered"}, config=config)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    return table, rows


@pytest.mark.crash
@pytest.mark.slow
def test_recover_leaves_a_directory_another_partition_was_pointed_at_after_the_kill(
    spark, metastore, database, data_dir, tmp_path
):
    """Killed once unregistered; an operator registers another partition over the dropped directory: recover
    lists the table's partitions right before the move and leaves the directory (and that partition's data)."""
    root = data_dir / "sl"
    table, rows = killed_once_unregistered(spark, metastore, database, "sl", root, tmp_path)
    spark.sql(f"ALTER TABLE {table} ADD PARTITION (dt='2099010100') LOCATION 'file:{root}/dt=2019041316'")
    first, _second = recover(spark, [(database, "sl")])
    assert "dt=2019041316: left in place: partition dt=2099010100 of the table uses" in first
    assert len(data_files(root / "dt=2019041316")) == 2
    relabelled = [(*r[:3], "2099010100") for r in rows if r[3] == "2019041316"]
    assert rows_of(spark, table) == sorted(without(rows, "2019041316") + relabelled)


def test_a_partition_being_written_is_not_dropped(spark, database, data_dir, monkeypatch):
    """A fresh in-progress file in an old partition (a writer still at work): that partition fails with nothing
    changed, the others are dropped."""
    monkeypatch.setattr(writers, "WRITER_WAIT_SECONDS", 0.5)
    root = data_dir / "wr"
    table = make_table(spark, database, "wr", root, partitions=FLAT, files=2, rows=10)
    rows = rows_of(spark, table)
    (root / "dt=2019041316" / ".part-0.inprogress.x").write_text("")
    done = retain_table(spark, database, "wr", FLAT_POLICY, now=NOW, skip_trash=True)
    assert done.dropped == ["dt=2019041317"]
    assert "dt=2019041316: not dropped: " in "\n".join(done.lines) and "in progress" in "\n".join(done.lines)
    assert list(done.failed) == ["dt=2019041316"] and "in progress" in done.failed["dt=2019041316"]
    assert partitions(spark, database, "wr") == ["dt=2019041316", "dt=2024053123", "dt=latest"]
    assert rows_of(spark, table) == without(rows, "2019041317")


def test_a_text_table_is_dropped_from_and_a_view_refused(spark, database, data_dir):
    """Retention rewrites no file: a text table (which compaction refuses) is fine; a view is not a table."""
    root = data_dir / "tx"
    table = f"{database}.tx"
    spark.sql(
        f"CREATE EXTERNAL TABLE {table} (id BIGINT, v STRING, n INT) PARTITIONED BY (dt STRING) STORED AS TEXTFILE "
        f"LOCATION '{root.as_uri()}'"
    )
    for n, spec in enumerate(FLAT):
        spark.sql(f"INSERT INTO {table} PARTITION (dt='{spec['dt']}') VALUES ({n}, 'a', 1), ({n + 10}, 'b', 2)")
    rows = rows_of(spark, table)
    done = retain_table(spark, database, "tx", FLAT_POLICY, now=NOW, skip_trash=True)
    assert done.dropped == ["dt=2019041316", "dt=2019041317"]
    assert rows_of(spark, table) == without(rows, "2019041316", "2019041317")
    spark.sql(f"CREATE VIEW {database}.txv AS SELECT * FROM {table}")
    with pytest.raises(OperationError, match=rf"{database}.txv cannot be managed by retention: view"):
        retain_table(spark, database, "txv", FLAT_POLICY, now=NOW, skip_trash=True)


def test_a_compaction_backup_still_holding_a_dropped_partition_is_reported(spark, database, data_dir):
    """Its originals stay readable in the backup until cleanup: the dry run and the run name it."""
    root = data_dir / "bk"
    table = make_table(spark, database, "bk", root, partitions=FLAT, files=1, rows=5)
    info = read_table(spark, database, "bk")
    kept = data_dir / "bk-originals"
    kept.mkdir()
    backups.create_backup(spark, info, "bk_backup", "r1", str(kept / "journal"))
    backups.add_partitions(spark, f"{database}.bk_backup", [({"dt": "2019041317"}, kept.as_uri())])
    dry = retain_table(spark, database, "bk", FLAT_POLICY, now=NOW, skip_trash=True, dry_run=True)
    done = retain_table(spark, database, "bk", FLAT_POLICY, now=NOW, skip_trash=True)
    for outcome in (dry, done):
        assert outcome.backups == [f"{database}.bk_backup: dt=2019041317"]
        assert f"BACKUP {database}.bk_backup: dt=2019041317: " in "\n".join(outcome.lines)
    assert f"until `lakekeeper-dagster cleanup --table {table}`" in "\n".join(done.lines)


def test_a_partition_holding_another_tables_data_is_kept(spark, database, data_dir):
    """Another table over one old partition's directory, a third inside another's: both partitions are kept with
    the reason (moving them away took those tables' data), the one beside them is dropped."""
    root = data_dir / "ot"
    table = make_table(spark, database, "ot", root, partitions=[*FLAT, {"dt": "2019041318"}], files=2, rows=10)
    over, nested = f"{database}.over", f"{database}.nested"
    for name, where in [(over, f"{root}/dt=2019041316"), (nested, f"{root}/dt=2019041317/nested")]:
        columns = "(id BIGINT, v STRING, n INT) STORED AS PARQUET"
        spark.sql(f"CREATE EXTERNAL TABLE {name} {columns} LOCATION 'file:{where}'")
    write_files(spark, f"file:{root}/dt=2019041317/nested", 500, 5, 1, "parquet")
    rows = rows_of(spark, table)
    others = {over: rows_of(spark, over), nested: rows_of(spark, nested)}
    assert len(others[over]) == 10 and len(others[nested]) == 5
    done = retain_table(spark, database, "ot", FLAT_POLICY, now=NOW, skip_trash=True)
    assert done.dropped == ["dt=2019041318"] and done.failed == {}
    shown = "\n".join(done.lines)
    assert "KEEP dt=2019041316  2019-04-13 16:00  2 files, " in shown
    assert f"another table's data would go with it: {over} uses file:{root}/dt=2019041316, which moving" in shown
    assert f"another table's data would go with it: {nested} uses file:{root}/dt=2019041317/nested" in shown
    assert partitions(spark, database, "ot") == ["dt=2019041316", "dt=2019041317", "dt=2024053123", "dt=latest"]
    assert rows_of(spark, table) == without(rows, "2019041318")
    assert {name: rows_of(spark, name) for name in others} == others


def test_retention_of_a_table_with_a_merge_policy_is_refused(spark, database, data_dir):
    """Retention would never reach the periods a merge moved away (kept past the age without a word): a table with a
    merge policy is refused, naming the key, before anything changes (the config file refuses both policies set)."""
    root = data_dir / "mp"
    make_table(spark, database, "mp", root, partitions=FLAT, files=1, rows=5)
    before = state(spark, database, "mp", root)
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge={"into": "%Y%m%d", "view": "mp_all"})
    with pytest.raises(ConfigError, match=f"{database}.mp: table_overrides.{database}.mp.merge is set: retention"):
        retain_table(spark, database, "mp", policy, "90d", now=NOW, skip_trash=True)
    assert state(spark, database, "mp", root) == before


@pytest.mark.crash
@pytest.mark.slow
def test_recover_leaves_a_directory_another_table_was_created_over_after_the_kill(
    spark, metastore, database, data_dir, tmp_path
):
    """Killed once unregistered; an operator saves the data by creating a table over the directory: recover checks
    the other tables right before the move and leaves the directory (and that table's data)."""
    root = data_dir / "rs"
    _table, rows = killed_once_unregistered(spark, metastore, database, "rs", root, tmp_path)
    rescue = f"{database}.rescue"
    spark.sql(
        f"CREATE EXTERNAL TABLE {rescue} (id BIGINT, v STRING, n INT) STORED AS PARQUET "
        f"LOCATION 'file:{root}/dt=2019041316'"
    )
    saved = rows_of(spark, rescue)
    assert saved == sorted(r[:3] for r in rows if r[3] == "2019041316")
    first, _second = recover(spark, [(database, "rs")])
    assert f"dt=2019041316: left in place: another table's data would go with it ({rescue} uses" in first
    assert len(data_files(root / "dt=2019041316")) == 2 and rows_of(spark, rescue) == saved
