"""The swap on real Spark, a real metastore and real files: writers racing it, attributes, statistics, recovery."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from lakekeeper_dagster.engine.errors import OperationError, StorageError
from lakekeeper_dagster.engine.hive.backup import find_backups
from lakekeeper_dagster.engine.ops.cleanup import cleanup_backups
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.protocol.recovery import recover
from lakekeeper_dagster_tests.tables import (
    DATES,
    OPTIONS,
    Pause,
    data_files,
    hidden_dirs,
    make_table,
    rows_of,
    run_cli,
    write_files,
)
from spark_resources.py4j import external_catalog

DAY = "2024-01-01"


def row(i: int) -> tuple:
    return (i, f"v{i}", i % 7, DAY)


def run_paused_at_retiring(spark, database, table, monkeypatch, writer, point: str = "retiring") -> list:
    """Compact `table` with a pause right before the retire rename (after every check), or at another `point` of
    the swap, `writer` acting in it; the run goes on once `writer` returns."""
    releases = Path(tempfile.mkdtemp(prefix="lk-pause-"))
    pause = Pause(point, releases)

    ended = threading.Event()

    def act() -> None:
        try:
            if pause.reached.wait(300) and not ended.is_set():
                writer()
        finally:
            pause.release()

    thread = threading.Thread(target=act)
    with monkeypatch.context() as patched:  # stderr and the fault back as they were, however the run ends
        patched.setattr(sys, "stderr", pause)
        patched.setenv("LAKEKEEPER_FAULT", pause.fault)
        thread.start()
        try:
            results = compact_table(spark, database, table, OPTIONS)
        finally:
            ended.set()  # a run that ended without pausing: the writer never acts
            pause.reached.set()
            thread.join()
            shutil.rmtree(releases)
    return results


def test_a_same_size_rewrite_between_the_last_check_and_the_retire_rename_aborts_the_swap(
    spark, database, data_dir, tmp_path, monkeypatch
):
    table = make_table(spark, database, "ow", data_dir, partitions=DATES[:1], files=5, codec="none")
    partition = data_dir / f"date={DAY}"
    originals = data_files(partition)
    victim = originals[1]  # ids 40..79
    write_files(spark, (tmp_path / "new").as_uri(), 50, 40, 1, "parquet", "none")
    replacement = data_files(tmp_path / "new")[0].read_bytes()
    assert len(replacement) == victim.stat().st_size  # same name, same size: only the modification time differs
    expected = sorted([r for r in rows_of(spark, table) if not 40 <= r[0] < 80] + [row(i) for i in range(50, 90)])

    def rewrite() -> None:
        victim.write_bytes(replacement)  # in place, as a Hadoop writer does, checksum included
        (partition / f".{victim.name}.crc").unlink()

    (result,) = run_paused_at_retiring(spark, database, "ow", monkeypatch, rewrite)

    assert result.status == "failed" and "rewritten while it was being swapped" in result.reason, result.reason
    assert data_files(partition) == originals and victim.read_bytes() == replacement
    assert rows_of(spark, table) == expected  # exactly what the writer left: its rewrite, nothing of the compaction
    assert hidden_dirs(data_dir) == []
    assert [r.status for r in compact_table(spark, database, "ow", OPTIONS)] == ["compacted"]
    assert rows_of(spark, table) == expected


def test_appender_with_a_same_name_overwrite_during_the_swap_keeps_exactly_what_the_writers_wrote(
    spark, database, data_dir, tmp_path, monkeypatch
):
    """A writer appends files and replaces one under the same name (as `INSERT OVERWRITE` reuses `000000_0`)."""
    table = make_table(spark, database, "apo", data_dir, partitions=DATES[:1], files=4, rows=200)
    partition = data_dir / f"date={DAY}"
    victim = data_files(partition)[0]  # ids 0..49
    write_files(spark, (tmp_path / "new").as_uri(), 1000, 10, 1, "parquet")
    write_files(spark, (tmp_path / "late").as_uri(), 2000, 5, 1, "parquet")
    new_ids = [*range(1000, 1010), *range(2000, 2005)]
    expected = sorted([r for r in rows_of(spark, table) if r[0] >= 50] + [row(i) for i in new_ids])

    def overwrite_and_append() -> None:
        os.replace(data_files(tmp_path / "new")[0], victim)
        (partition / f".{victim.name}.crc").unlink()  # the replaced file's checksum goes with it
        os.rename(data_files(tmp_path / "late")[0], partition / "appended-0.parquet")

    (result,) = run_paused_at_retiring(spark, database, "apo", monkeypatch, overwrite_and_append)

    assert result.status == "failed" and "while it was being swapped" in result.reason, result.reason
    assert rows_of(spark, table) == expected  # nothing lost, nothing duplicated, nothing stale brought back
    assert hidden_dirs(data_dir) == []


@pytest.mark.parametrize("then", ["writer done", "originals damaged"])
def test_a_writer_re_creating_the_partition_mid_swap_loses_nothing_and_recover_finishes_once_it_is_done(
    spark, database, data_dir, tmp_path, monkeypatch, then
):
    """Between the retire rename and the install a writer re-creates the partition directory with
    one committed file and a task still running (`_temporary/`). The install takes the committed file (journaled;
    named like a staged output, it is taken under another name) and stops; `recover` stops too while the writer
    works, deleting nothing, and finishes the swap once the writer is done. When recovery must undo the swap instead
    (an original was removed from the retired directory by hand), the writer's files go back into the partition
    under their names, never deleted with the staged copy."""
    table = make_table(spark, database, "rw", data_dir, partitions=DATES[:1], files=4)
    partition = data_dir / f"date={DAY}"
    before = rows_of(spark, table)
    write_files(spark, (tmp_path / "w").as_uri(), 1000, 20, 2, "parquet")
    committed, running = data_files(tmp_path / "w")
    written = [row(i) for i in range(1000, 1020)]
    names = []

    def writer() -> None:
        (staged,) = data_files(next(data_dir.glob(".lk-staging-*")))
        names.append(staged.name)  # the writer's file of the same name as the compacted output
        (partition / "_temporary" / "0").mkdir(parents=True)
        os.rename(committed, partition / staged.name)
        os.rename(running, partition / "_temporary" / "0" / "part-w1.parquet")

    with pytest.raises(OperationError, match="a writer is working in it"):
        run_paused_at_retiring(spark, database, "rw", monkeypatch, writer, point="kept_carried")
    (staging,) = data_dir.glob(".lk-staging-*")
    (clash,) = names
    assert (staging / clash).exists() and (staging / f"{clash}_copy_lk1").exists()  # taken, journaled, kept

    with pytest.raises(StorageError, match="a writer is working in it"):
        recover(spark, [(database, "rw")])
    assert (staging / f"{clash}_copy_lk1").exists() and (partition / "_temporary/0/part-w1.parquet").exists()

    os.rename(partition / "_temporary/0/part-w1.parquet", partition / "part-w1.parquet")  # the writer's job commits
    shutil.rmtree(partition / "_temporary")
    (partition / "_SUCCESS").touch()
    if then == "originals damaged":
        (retired,) = data_dir.glob(".lk-old-*")
        data_files(retired)[0].unlink()

    messages = recover(spark, [(database, "rw")])

    assert not list(data_dir.glob(".lk-staging-*"))
    if then == "writer done":
        assert any("swap finished" in m for m in messages), messages
        assert rows_of(spark, table) == sorted(before + written)  # the compacted originals and both writer files
    else:
        assert any("rolled back" in m for m in messages), messages
        assert sorted(p.name for p in data_files(partition)) == sorted([clash, "part-w1.parquet"])
        assert rows_of(spark, table) == written  # given back; the originals wait, untouched, aside
        (aside,) = data_dir.glob(".lk-old-*")
        assert len(data_files(aside)) == 3


def test_a_writers_in_progress_file_retired_with_the_originals_is_never_cleaned_up(
    spark, database, data_dir, monkeypatch
):
    """A writer opens a hidden in-progress file in the partition after the last swap guards, right
    before the retire rename: it goes into the backup's directory with the originals (the swap compares data files).
    `cleanup` then keeps that backup, naming the file, instead of deleting it with --skip-trash."""
    table = make_table(spark, database, "ip", data_dir, partitions=DATES[:1], files=4)
    partition = data_dir / f"date={DAY}"
    before = rows_of(spark, table)

    def writer() -> None:
        (partition / ".part-0-0.inprogress.1").write_bytes(b"rows a streaming writer has not committed yet")

    (result,) = run_paused_at_retiring(spark, database, "ip", monkeypatch, writer)
    assert result.status == "compacted" and rows_of(spark, table) == before
    (retired,) = data_dir.glob(".lk-old-*")
    assert (retired / ".part-0-0.inprogress.1").exists()

    (line,) = cleanup_backups(spark, table=table, skip_trash=True)

    assert line.startswith("kept ") and ".part-0-0.inprogress.1" in line, line
    assert (retired / ".part-0-0.inprogress.1").read_bytes().startswith(b"rows a streaming writer")
    assert find_backups(spark, database, table) != []


def test_attributes_of_the_originals_are_carried_before_the_swap(spark, database, data_dir):
    table = make_table(spark, database, "attr", data_dir, partitions=DATES[:1], files=4)
    partition = data_dir / f"date={DAY}"
    partition.chmod(0o750)
    for file in data_files(partition):
        file.chmod(0o640)
        os.chown(file, 4321, 4322)
    os.chown(partition, 4321, 4322)
    before = rows_of(spark, table)

    (result,) = compact_table(spark, database, "attr", OPTIONS)

    assert result.status == "compacted", result.reason
    (new_file,) = data_files(partition)
    assert stat.S_IMODE(partition.stat().st_mode) == 0o750
    assert stat.S_IMODE(new_file.stat().st_mode) == 0o640
    assert (partition.stat().st_uid, partition.stat().st_gid) == (4321, 4322)
    assert (new_file.stat().st_uid, new_file.stat().st_gid) == (4321, 4322)
    assert rows_of(spark, table) == before


def test_an_attribute_failure_before_the_rename_leaves_the_partition_intact(spark, database, data_dir, monkeypatch):
    table = make_table(spark, database, "attf", data_dir, partitions=DATES, files=3)
    before, originals = rows_of(spark, table), data_files(data_dir / f"date={DAY}")
    monkeypatch.setenv("LAKEKEEPER_FAULT", "fail@attributes")

    results = compact_table(spark, database, "attf", OPTIONS)

    assert [r.status for r in results] == ["failed", "failed"]
    assert all("attributes could not be given to the new files" in r.reason for r in results)
    assert data_files(data_dir / f"date={DAY}") == originals and rows_of(spark, table) == before
    assert hidden_dirs(data_dir) == [] and find_backups(spark, database, table) == []
    monkeypatch.delenv("LAKEKEEPER_FAULT")
    assert [r.status for r in compact_table(spark, database, "attf", OPTIONS)] == ["compacted", "compacted"]
    assert rows_of(spark, table) == before


def _partition_parameters(spark, database: str, table: str, spec: dict) -> dict:
    converters = spark._jvm.scala.jdk.javaapi.CollectionConverters
    spec_map = external_catalog(spark).listPartitions(database, table, spark._jvm.scala.Option.empty())
    for partition in converters.asJava(spec_map):
        if dict(converters.asJava(partition.spec())) == spec:
            return dict(converters.asJava(partition.parameters()))
    raise AssertionError(f"no partition {spec}")


def _table_parameters(spark, database: str, table: str) -> dict:
    client = external_catalog(spark).unwrapped().client()
    converters = spark._jvm.scala.jdk.javaapi.CollectionConverters
    return dict(converters.asJava(client.getRawHiveTable(database, table).hiveTableProps()))


def _on_disk(directory) -> tuple[str, str]:
    files = data_files(directory)
    return str(len(files)), str(sum(f.stat().st_size for f in files))


def test_file_statistics_describe_the_files_after_a_swap(spark, database, data_dir):
    make_table(spark, database, "stp", data_dir / "p", partitions=DATES, files=4)
    make_table(spark, database, "stu", data_dir / "u", files=4)
    spark.sql(f"ANALYZE TABLE {database}.stp PARTITION (date='{DAY}') COMPUTE STATISTICS")  # Spark's own, too

    compact_table(spark, database, "stp", OPTIONS)
    compact_table(spark, database, "stu", OPTIONS)

    for spec in DATES:
        parameters = _partition_parameters(spark, database, "stp", spec)
        assert (parameters["numFiles"], parameters["totalSize"]) == _on_disk(data_dir / "p" / f"date={spec['date']}")
    described = spark.sql(f"DESCRIBE TABLE EXTENDED {database}.stp PARTITION (date='{DAY}')").collect()
    statistics = next(r.data_type for r in described if r.col_name == "Partition Statistics")
    assert statistics.startswith(f"{_on_disk(data_dir / 'p' / f'date={DAY}')[1]} bytes, 200 rows"), statistics
    parameters = _table_parameters(spark, database, "stu")
    assert (parameters["numFiles"], parameters["totalSize"]) == _on_disk(data_dir / "u")


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("meanwhile", ["insert overwrite", "attributes fail"])
def test_recovery_after_a_kill_at_swapping_verifies_the_snapshot_before_rolling_forward(
    spark, metastore, database, data_dir, tmp_path, monkeypatch, meanwhile
):
    table = make_table(spark, database, "rs", data_dir, partitions=DATES[:1], files=4)
    before, originals = rows_of(spark, table), data_files(data_dir / f"date={DAY}")
    crashed = run_cli(["compact", "--table", table], tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": "kill@swapping"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    if meanwhile == "insert overwrite":
        spark.sql(f"INSERT OVERWRITE TABLE {table} PARTITION (date='{DAY}') VALUES (7, 'new', 0), (8, 'new', 1)")
        expected = [(7, "new", 0, DAY), (8, "new", 1, DAY)]
    else:
        monkeypatch.setenv("LAKEKEEPER_FAULT", "fail@attributes")
        expected = before

    messages = recover(spark, [(database, "rs")])

    assert any("rolled back" in m for m in messages), messages
    assert rows_of(spark, table) == expected  # exactly what the overwrite wrote (or the untouched originals)
    if meanwhile == "attributes fail":
        assert data_files(data_dir / f"date={DAY}") == originals
    assert hidden_dirs(data_dir) == [] and find_backups(spark, database, table) == []
    monkeypatch.delenv("LAKEKEEPER_FAULT", raising=False)
    compact_table(spark, database, "rs", OPTIONS)
    assert rows_of(spark, table) == expected


@pytest.mark.crash
@pytest.mark.slow
def test_late_files_of_a_swap_killed_after_its_install_never_land_in_a_partition_overwritten_since(
    spark, metastore, database, data_dir, tmp_path
):
    """A file arrives after the snapshot, so the retire rename takes it; the run is killed right
    after the install, before carrying it back; the partition is overwritten before `recover`. Recovery finishes
    the swap without carrying the late file into the overwritten partition (its rows were replaced): it stays with
    the originals, and the backup's cleanup keeps them."""
    table = make_table(spark, database, "lo", data_dir, partitions=DATES[:1], files=4)
    partition = data_dir / f"date={DAY}"
    write_files(spark, (tmp_path / "late").as_uri(), 1000, 5, 1, "parquet")
    fault = {"LAKEKEEPER_FAULT": "sleep@retiring:4;kill@installed_dir"}
    running = run_cli(["compact", "--table", table], tmp_path, metastore.uri, fault, wait=False)
    for line in running.stderr:
        if "sleeping at retiring" in line:
            os.rename(data_files(tmp_path / "late")[0], partition / "late-0.parquet")  # after the snapshot
            break
    running.communicate(timeout=300)
    assert running.returncode == -signal.SIGKILL
    (retired,) = data_dir.glob(".lk-old-*")
    assert (retired / "late-0.parquet").exists()
    spark.sql(f"INSERT OVERWRITE TABLE {table} PARTITION (date='{DAY}') VALUES (7, 'new', 0), (8, 'new', 1)")

    messages = recover(spark, [(database, "lo")])

    assert any("rolled forward" in m for m in messages), messages
    assert rows_of(spark, table) == [(7, "new", 0, DAY), (8, "new", 1, DAY)]  # exactly what the overwrite wrote
    assert (retired / "late-0.parquet").exists()
    (line,) = cleanup_backups(spark, table=table, skip_trash=True)
    assert line.startswith("kept "), line


@pytest.mark.crash
@pytest.mark.slow
def test_staging_gone_after_the_retire_rename_recovery_restores_the_originals(
    spark, metastore, database, data_dir, tmp_path
):
    table = make_table(spark, database, "sg", data_dir, partitions=DATES[:1], files=4)
    before, names = rows_of(spark, table), [f.name for f in data_files(data_dir / f"date={DAY}")]
    crashed = run_cli(["compact", "--table", table], tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": "kill@retired"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert not (data_dir / f"date={DAY}").exists()
    (staging,) = data_dir.glob(".lk-staging-*")
    shutil.rmtree(staging)

    messages = recover(spark, [(database, "sg")])

    assert any("rolled back" in m for m in messages), messages
    assert rows_of(spark, table) == before
    assert [f.name for f in data_files(data_dir / f"date={DAY}")] == names
    assert hidden_dirs(data_dir) == [] and find_backups(spark, database, table) == []
    assert [r.status for r in compact_table(spark, database, "sg", OPTIONS)] == ["compacted"]
    assert rows_of(spark, table) == before


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize(
    ("point", "meanwhile"),
    [("retired", "overwritten"), ("swapping", "directory deleted"), ("swapping", "partition dropped")],
)
def test_recovery_of_a_swap_interrupted_then_changed_by_the_user(
    spark, metastore, database, data_dir, tmp_path, point, meanwhile
):
    """Days may pass between a crash and `recover`: whatever the user did meanwhile stays as they left it, and the
    table never stays blocked."""
    table = make_table(spark, database, "ic", data_dir, partitions=DATES[:1], files=4)
    before = rows_of(spark, table)
    crashed = run_cli(["compact", "--table", table], tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": f"kill@{point}"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    partition = data_dir / f"date={DAY}"
    if meanwhile == "overwritten":  # the partition directory was retired: the overwrite creates it anew
        spark.sql(f"INSERT OVERWRITE TABLE {table} PARTITION (date='{DAY}') VALUES (7, 'new', 0), (8, 'new', 1)")
        expected = [(7, "new", 0, DAY), (8, "new", 1, DAY)]
    elif meanwhile == "directory deleted":
        shutil.rmtree(partition)
        expected = []
    else:
        spark.sql(f"ALTER TABLE {table} DROP PARTITION (date='{DAY}')")
        expected = []

    messages = recover(spark, [(database, "ic")])

    assert rows_of(spark, table) == expected
    assert not list(data_dir.glob(".lk-staging-*"))
    if meanwhile == "overwritten":  # never merged: the originals wait, untouched, beside the user's new data
        assert any("written again" in m for m in messages), messages
        (aside,) = data_dir.glob(".lk-old-*")
        assert len(data_files(aside)) == 4 and len(before) == 200
    elif meanwhile == "directory deleted":
        assert not partition.exists() and hidden_dirs(data_dir) == []
        assert [r.status for r in compact_table(spark, database, "ic", OPTIONS)] == ["skipped"]  # not blocked
    else:
        assert len(data_files(partition)) == 1  # rolled forward; the dropped partition's statistics are not set
