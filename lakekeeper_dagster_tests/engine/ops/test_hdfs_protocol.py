"""The protocol on a real HDFS (the session's minicluster): the swap, its crash recovery, rollback, cleanup and the
other operations on tables whose files live behind a NameNode, content checked row by row."""

from __future__ import annotations

import getpass
import signal

import pytest

from lakekeeper_dagster.engine.fs.locations import child
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.backup import find_backups
from lakekeeper_dagster.engine.hive.catalog import read_table
from lakekeeper_dagster.engine.ops.cleanup import cleanup_backups
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.options import CompactionOptions
from lakekeeper_dagster.engine.ops.rollback import rollback_table
from lakekeeper_dagster.engine.plan.thresholds import Thresholds
from lakekeeper_dagster.engine.protocol.journal import load_journals, state_dir
from lakekeeper_dagster.engine.protocol.recovery import recover
from lakekeeper_dagster.engine.statuses import UnitState
from lakekeeper_dagster_tests.hdfs import cli_config, data_files, dfs, exists, hidden_dirs, jpath, listing
from lakekeeper_dagster_tests.tables import DATES, MB, OPTIONS, make_table, rows_of, run_cli, write_files

pytestmark = pytest.mark.hdfs


def test_a_partitioned_table_on_hdfs_compacts_with_identical_content(spark, database, hdfs_dir):
    table = make_table(spark, database, "ev", hdfs_dir, partitions=DATES, files=6)
    first = f"{hdfs_dir}/date=2024-01-01"
    fs = dfs(spark, first)
    fs.setPermission(jpath(spark, first), spark.sparkContext._jvm.org.apache.hadoop.fs.permission.FsPermission("750"))
    before = rows_of(spark, table)

    results = compact_table(spark, database, "ev", OPTIONS)

    assert sorted((r.partition, r.status, r.files_before, r.files_after) for r in results) == [
        ("date=2024-01-01", "compacted", 6, 1),
        ("date=2024-01-02", "compacted", 6, 1),
    ]
    assert rows_of(spark, table) == before
    assert [len(data_files(spark, f"{hdfs_dir}/{spec}")) for spec in ("date=2024-01-01", "date=2024-01-02")] == [1, 1]
    assert str(fs.getFileStatus(jpath(spark, first)).getPermission().toOctal()) == "750"
    assert read_table(spark, database, "ev").location == hdfs_dir
    run = results[0].run_id
    assert hidden_dirs(spark, hdfs_dir) == [f".lk-old-{run}-date=2024-01-01", f".lk-old-{run}-date=2024-01-02"]
    assert spark.table(f"{database}.{results[0].backup_table}").count() == 400


P1, P2 = (f"date={d['date']}" for d in DATES)


THRESHOLDS = Thresholds(MB, 10.0)  # block 1 MB: a file of at least 768 KB is large


def trashed(hdfs, location: str) -> str:
    """Where the NameNode's Trash keeps `location` once moved there: `/user/<user>/.Trash/Current/<its path>`."""
    path = location.removeprefix(hdfs.uri)
    return f"{hdfs.uri}/user/{getpass.getuser()}/.Trash/Current{path}"


def identities(spark, location: str) -> dict[str, tuple[int, int, int]]:
    """Each data file of directory `location`: its HDFS file id (inode), modification time and length. A rename
    keeps all three; a rewrite, even byte for byte, gives a new id."""
    names = set(data_files(spark, location))
    return {
        str(s.getPath().getName()): (s.getFileId(), s.getModificationTime(), s.getLen())
        for s in listing(spark, location)
        if str(s.getPath().getName()) in names
    }


def compaction_killed_at(spark, hdfs, metastore, table: str, partition: str, tmp_path, point: str) -> tuple[str, list]:
    """A CLI compaction of `table` on the test HDFS, paused right before its first retire rename (its snapshot and
    swap guards passed) while a writer appends one file to `partition`, then SIGKILLed at `point`. The appended file's
    name and rows."""
    late_dir = f"{partition.rsplit('/', 1)[0]}-late"  # beside the table's directory: not the table's until moved in
    write_files(spark, late_dir, 5000, 10, 1, "parquet")
    (late,) = data_files(spark, late_dir)
    release = tmp_path / "release"
    fault = {"LAKEKEEPER_FAULT": f"pause@retiring:{release};kill@{point}"}
    args = ["compact", "--table", table]
    running = run_cli(args, tmp_path, metastore.uri, fault, wait=False, config=cli_config(hdfs))
    try:
        for line in running.stderr:
            if "pausing at retiring" in line:
                fs = dfs(spark, partition)
                assert fs.rename(jpath(spark, f"{late_dir}/{late}"), jpath(spark, f"{partition}/{late}"))
                break
    finally:
        release.touch()  # the run goes on, whatever happened here
        _, err = running.communicate(timeout=300)
    assert running.returncode == -signal.SIGKILL, err[-3000:]
    return late, [(i, f"v{i}", i % 7, partition.rsplit("=", 1)[1]) for i in range(5000, 5010)]


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("point", ["retired", "installed_dir"])
def test_a_compaction_killed_mid_swap_on_hdfs_is_recovered_with_a_late_file_kept_once(
    spark, hdfs, metastore, database, hdfs_dir, tmp_path, point
):
    """The swap's riskiest moments on a NameNode: the partition directory retired and none in its place
    (`retired`), the new data installed but the late file not carried back yet (`installed_dir`; the local crash
    matrix has every other step). A file a writer appended after the snapshot is carried into the compacted
    partition exactly once, by recovery; the second partition, its swap not begun, is rolled back."""
    table = make_table(spark, database, "kv", hdfs_dir, partitions=DATES, files=4)
    originals = data_files(spark, f"{hdfs_dir}/{P1}")
    before = rows_of(spark, table)

    late, late_rows = compaction_killed_at(spark, hdfs, metastore, table, f"{hdfs_dir}/{P1}", tmp_path, point)

    storage, lease = Storage(spark), child(state_dir(hdfs_dir), "lease")
    (journal,) = load_journals(storage, hdfs_dir)
    assert not journal.done and exists(spark, lease)  # left behind by the dead process
    assert [u.state for u in journal.units] == [UnitState.SWAPPING, UnitState.BACKED_UP]
    assert exists(spark, f"{hdfs_dir}/{P1}") == (point != "retired")  # retired: no partition directory at all

    messages = recover(spark, [(database, "kv")])

    assert rows_of(spark, table) == sorted(before + late_rows)
    (journal,) = load_journals(storage, hdfs_dir)
    assert journal.done and not exists(spark, lease)
    assert [u.state for u in journal.units] == [UnitState.COMMITTED, UnitState.ABORTED]
    assert journal.units[0].details["carried"] == 1
    assert any(f"{P1}: swap finished" in m for m in messages) and any(f"{P2}: interrupted" in m for m in messages)
    compacted = data_files(spark, f"{hdfs_dir}/{P1}")
    assert len(compacted) == 2 and late in compacted  # the compacted file and the late one, once
    assert len(data_files(spark, f"{hdfs_dir}/{P2}")) == 4
    retired = f".lk-old-{journal.run_id}-{P1}"
    assert hidden_dirs(spark, hdfs_dir) == [retired]  # no staging left: only the backup's originals
    assert data_files(spark, f"{hdfs_dir}/{retired}") == originals  # without the late file
    assert [b.name for b in find_backups(spark, database, table)] == [journal.backup_table]


def test_large_files_are_carried_unchanged_and_rollback_brings_back_the_very_originals_on_hdfs(
    spark, hdfs, database, hdfs_dir
):
    table = make_table(spark, database, "mx", hdfs_dir, partitions=DATES[:1], files=3, rows=30)
    partition = f"{hdfs_dir}/{P1}"
    spark.range(100_000, 140_000, numPartitions=1).selectExpr(  # one file above the size target (random text)
        "id", "concat(uuid(), uuid()) AS v", "cast(id % 7 AS int) AS n"
    ).write.mode("append").parquet(partition)
    originals = identities(spark, partition)
    (large,) = [name for name, (_, _, size) in originals.items() if size >= THRESHOLDS.min_file_bytes]
    before = rows_of(spark, table)

    (result,) = compact_table(spark, database, "mx", CompactionOptions(THRESHOLDS))

    assert (result.status, result.files_before, result.files_after) == ("compacted", 4, 2), result.reason
    assert rows_of(spark, table) == before
    after = identities(spark, partition)
    assert after[large] == originals[large]  # the same file, moved aside and back by renames, never rewritten
    (written,) = set(after) - {large}
    (retired,) = hidden_dirs(spark, hdfs_dir)
    assert sorted(data_files(spark, f"{hdfs_dir}/{retired}")) == sorted(set(originals) - {large})

    (line,) = rollback_table(spark, database, "mx")

    assert line.startswith(f"{table} {P1}: restored from "), line
    assert identities(spark, partition) == originals  # the very files: same ids, times and lengths
    assert rows_of(spark, table) == before
    assert hidden_dirs(spark, hdfs_dir) == [] and find_backups(spark, database, table) == []
    (copy,) = [d for d in hidden_dirs(spark, trashed(hdfs, hdfs_dir)) if d.startswith(".lk-rolledback-")]
    assert data_files(spark, f"{trashed(hdfs, hdfs_dir)}/{copy}") == [written]  # the compacted copy, in the Trash


def test_cleanup_moves_a_backup_to_the_hdfs_trash_and_skip_trash_deletes_it_at_once(spark, hdfs, database, hdfs_dir):
    table = make_table(spark, database, "cu", hdfs_dir, partitions=DATES[:1], files=3)
    partition = f"{hdfs_dir}/{P1}"
    originals = data_files(spark, partition)
    (first,) = compact_table(spark, database, "cu", OPTIONS)
    retired = f"{hdfs_dir}/.lk-old-{first.run_id}-{P1}"

    (line,) = cleanup_backups(spark, table=table)

    assert line == f"dropped {database}.{first.backup_table} (backup of {table}); {retired} moved to the Trash"
    assert not exists(spark, retired) and find_backups(spark, database, table) == []
    assert data_files(spark, trashed(hdfs, retired)) == originals  # on the NameNode, in the user's Trash

    spark.sql(f"INSERT INTO {table} PARTITION (date='2024-01-01') VALUES (5000, 'late', 1)")
    (second,) = compact_table(spark, database, "cu", CompactionOptions(OPTIONS.thresholds, force=True))
    again = f"{hdfs_dir}/.lk-old-{second.run_id}-{P1}"
    assert exists(spark, again)

    (line,) = cleanup_backups(spark, table=table, skip_trash=True)

    assert line == f"dropped {database}.{second.backup_table} (backup of {table}); {again} deleted"
    assert not exists(spark, again) and not exists(spark, trashed(hdfs, again))
    assert len(rows_of(spark, table)) == 201 and len(data_files(spark, partition)) == 1
