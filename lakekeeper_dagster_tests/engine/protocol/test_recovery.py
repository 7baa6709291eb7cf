"""Crash recovery: a compaction (or rollback) killed with SIGKILL at every journal step, then `recover`."""

from __future__ import annotations

import itertools
import json
import signal

import pytest

from lakekeeper_dagster.engine.errors import LeaseHeldError, StorageError
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.backup import find_backups
from lakekeeper_dagster.engine.hive.catalog import read_table
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.protocol.journal import RECORD_WRITTEN_POINT, Journal, UnitRecord
from lakekeeper_dagster.engine.protocol.lease import TableLease
from lakekeeper_dagster.engine.protocol.recovery import recover, recover_table
from lakekeeper_dagster.engine.statuses import UnitState
from lakekeeper_dagster_tests.tables import (
    DATES,
    OPTIONS,
    data_files,
    hidden_dirs,
    make_table,
    new_cluster_apps,
    rows_of,
    run_cli,
)

COMPACTION_POINTS = ["written", "backed_up", "swapping", "retired", "installed_dir", "installed", "committed"]
SWAP_BEGUN = {"swapping", "retired", "installed_dir", "installed", "committed"}
# Each case starts a JVM, so the matrix is kept to what differs (CI's time): every step of a unit's swap on a flat
# table; on a partitioned one (a batch of units committed together) one step of each outcome for the other units
# (rolled back before the swap, left unswapped mid-swap, compacted once committed), each the later of its kind (the
# most to undo); ORC, whose files the journal, swap and recovery never look inside, once before the swap and once
# in it.
BATCH_POINTS = ["backed_up", "installed", "committed"]
ORC_CASES = [("orc", "flat", "written"), ("orc", "partitioned", "swapping")]


def unit_dirs(root, partitioned: bool):
    return [root / f"date={d['date']}" for d in DATES] if partitioned else [root]


ON_CLUSTER = ("orc", "partitioned", "swapping")  # the driver killed mid-swap, its executors on the test cluster


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize(
    ("fmt", "layout", "point"),
    [
        pytest.param(*case, marks=[pytest.mark.cluster] if case == ON_CLUSTER else [])
        for case in [
            *itertools.product(["parquet"], ["flat"], COMPACTION_POINTS),
            *itertools.product(["parquet"], ["partitioned"], BATCH_POINTS),
            *ORC_CASES,
        ]
    ],
)
def test_compaction_killed_at_every_step_is_recovered(
    spark, spark_cluster, metastore, database, data_dir, tmp_path, fmt, layout, point
):
    partitioned = layout == "partitioned"
    root = data_dir / "cr"
    table = make_table(spark, database, "cr", root, fmt=fmt, partitions=DATES if partitioned else None, files=4)
    before = rows_of(spark, table)

    apps_before = set(spark_cluster.applications()) if spark_cluster is not None else set()
    crashed = run_cli(["compact", "--table", table], tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": f"kill@{point}"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert (data_dir / ".lakekeeper-cr" / "lease").exists()  # left behind by the dead process
    if spark_cluster is not None:  # the killed driver's application, and only it, ran on the cluster, and is over
        assert new_cluster_apps(spark_cluster, apps_before) == [("lakekeeper-dagster", "FINISHED")]
    # A backup sits at its source's location: recovering it (as `recover --database` does, in name order) must not
    # recover the source's run through the backup's table.
    assert recover(spark, [(database, b.name) for b in find_backups(spark, database, table)]) == []

    recover(spark, [(database, "cr")])

    assert rows_of(spark, table) == before
    assert not [d for d in hidden_dirs(data_dir) if "staging" in d]
    assert not (data_dir / ".lakekeeper-cr" / "lease").exists()
    first, *rest = unit_dirs(root, partitioned)
    assert len(data_files(first)) == (1 if point in SWAP_BEGUN else 4)
    # The batch is committed together: a crash after its commit record leaves every unit compacted; one before it
    # leaves the units after the first swapped unit unswapped, and recovery rolls them back.
    assert all(len(data_files(d)) == (1 if point == "committed" else 4) for d in rest)
    assert bool(find_backups(spark, database, table)) == (point in SWAP_BEGUN)

    results = compact_table(spark, database, "cr", OPTIONS)  # the table works normally afterwards
    assert all(r.status in ("compacted", "skipped") for r in results)
    assert all(len(data_files(d)) == 1 for d in unit_dirs(root, partitioned))
    assert rows_of(spark, table) == before


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("point", ["swapping", "retired", "installed_dir", "installed", "copy_retired", "committed"])
def test_rollback_killed_at_every_step_is_recovered(spark, metastore, database, data_dir, tmp_path, point):
    root = data_dir / "rb"
    table = make_table(spark, database, "rb", root, partitions=DATES[:1], files=4)
    originals = [p.name for p in data_files(root / "date=2024-01-01")]
    before = rows_of(spark, table)
    compact_table(spark, database, "rb", OPTIONS)
    spark.sql(f"INSERT INTO {table} PARTITION (date='2024-01-01') VALUES (5000, 'late', 1)")
    expected = sorted([*before, (5000, "late", 1, "2024-01-01")])

    crashed = run_cli(["rollback", "--table", table], tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": f"kill@{point}"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    recover(spark, [(database, "rb")])

    assert rows_of(spark, table) == expected
    names = [p.name for p in data_files(root / "date=2024-01-01")]
    assert set(originals) <= set(names) and len(names) == len(originals) + 1  # originals back, the append kept
    assert hidden_dirs(data_dir) == []
    assert find_backups(spark, database, table) == []


@pytest.mark.crash
@pytest.mark.slow
def test_late_files_of_a_rollback_killed_after_its_install_never_land_in_a_partition_overwritten_since(
    spark, metastore, database, data_dir, tmp_path
):
    """A rollback is killed right after it put the originals back, before carrying back a file
    written after the compaction; the partition is then overwritten. Recovery finishes the rollback without carrying
    that file into the overwritten partition (its rows were replaced): it stays in the `.lk-rolledback-...`
    directory, not lost."""
    root = data_dir / "rl"
    table = make_table(spark, database, "rl", root, partitions=DATES[:1], files=4)
    compact_table(spark, database, "rl", OPTIONS)
    partition = root / "date=2024-01-01"
    compacted = {p.name for p in data_files(partition)}
    spark.sql(f"INSERT INTO {table} PARTITION (date='2024-01-01') VALUES (5000, 'late', 1)")
    (late,) = {p.name for p in data_files(partition)} - compacted
    fault = {"LAKEKEEPER_FAULT": "kill@installed_dir"}  # the originals put back, the late file not yet carried
    crashed = run_cli(["rollback", "--table", table], tmp_path, metastore.uri, fault)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    spark.sql(f"INSERT OVERWRITE TABLE {table} PARTITION (date='2024-01-01') VALUES (7, 'new', 0), (8, 'new', 1)")

    recover(spark, [(database, "rl")])

    assert rows_of(spark, table) == [(7, "new", 0, "2024-01-01"), (8, "new", 1, "2024-01-01")]
    (aside,) = root.glob(".lk-rolledback-*")
    assert [p.name for p in data_files(aside)] == [late]
    assert [tuple(r) for r in spark.read.parquet(f"file://{aside / late}").collect()] == [(5000, "late", 1)]


@pytest.mark.crash
@pytest.mark.slow
def test_cleanup_refuses_while_a_crashed_rollback_still_needs_the_originals(
    spark, metastore, database, data_dir, tmp_path
):
    from lakekeeper_dagster.engine.errors import OperationError
    from lakekeeper_dagster.engine.ops.cleanup import cleanup_backups

    root = data_dir / "cl"
    table = make_table(spark, database, "cl", root, partitions=DATES[:1], files=4)
    before = rows_of(spark, table)
    compact_table(spark, database, "cl", OPTIONS)
    crashed = run_cli(["rollback", "--table", table], tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": "kill@retired"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    with pytest.raises(OperationError, match="interrupted run .* run `lakekeeper-dagster recover"):
        cleanup_backups(spark, table=table, older_than_seconds=0, skip_trash=True)
    recover(spark, [(database, "cl")])
    assert rows_of(spark, table) == before and len(data_files(root / "date=2024-01-01")) == 4


def test_a_journal_step_this_version_does_not_know_is_refused_by_name(spark, data_dir):
    """A journal written by a newer version (an unknown run kind or unit state) is refused, never guessed at."""
    storage = Storage(spark)
    unit = UnitRecord("p=1", {"p": "1"}, f"{data_dir.as_uri()}/p=1", "in", "old", [])
    journal = Journal.new(data_dir.as_uri(), "db", "t", "r1", "compact", "test", [unit])
    journal.start(storage)
    journal._write(storage, {"step": "teleported", "unit": 0, "details": {}, "at": 0})
    with pytest.raises(StorageError, match="does not know .*teleported"):
        Journal.load(storage, journal.directory)


def test_a_torn_record_anywhere_in_a_journal_is_skipped_and_the_journal_goes_on(spark, data_dir):
    """A record torn by a crash (an older version wrote in place) never blocks the table: it counts as absent."""
    storage = Storage(spark)
    unit = UnitRecord("p=1", {"p": "1"}, f"{data_dir.as_uri()}/p=1", "in", "old", [])
    journal = Journal.new(data_dir.as_uri(), "db", "t", "r1", "compact", "test", [unit])
    journal.start(storage)
    journal.record(storage, UnitState.WRITTEN, 0, output_files=["a"])
    journal.record(storage, UnitState.BACKED_UP, 0)
    journal.record(storage, UnitState.SWAPPING, 0)
    directory = next(data_dir.parent.rglob("r1"))
    (directory / "00002.json").write_bytes(b'{"step": "backed_u')  # torn in the middle of the journal
    (directory / ".00002.json.crc").unlink(missing_ok=True)
    loaded = Journal.load(storage, journal.directory)
    assert loaded.units[0].state == UnitState.SWAPPING and loaded.units[0].details == {"output_files": ["a"]}
    loaded.record(storage, UnitState.INSTALLED, 0)  # goes on after the highest record present
    assert Journal.load(storage, journal.directory).units[0].state == UnitState.INSTALLED
    assert sorted(p.name for p in directory.iterdir() if not p.name.startswith(".")) == [
        f"{n:05d}.json" for n in range(5)
    ]


@pytest.mark.crash
@pytest.mark.slow
def test_compaction_killed_while_writing_a_journal_record_is_recovered(spark, metastore, database, data_dir, tmp_path):
    """Killed between a record's temporary write and its rename; a torn record in the middle on top of it."""
    root = data_dir / "jw"
    table = make_table(spark, database, "jw", root, partitions=DATES[:1], files=4)
    before = rows_of(spark, table)
    fault = {"LAKEKEEPER_FAULT": f"kill@{RECORD_WRITTEN_POINT}:swapping"}
    crashed = run_cli(["compact", "--table", table], tmp_path, metastore.uri, fault)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    (journal,) = (data_dir / ".lakekeeper-jw" / "journal").iterdir()
    assert [p.name for p in journal.glob(".0*.json.tmp-*")]  # the record that was being written
    assert all("swapping" not in p.read_text() for p in journal.glob("0*.json"))
    (journal / "00001.json").write_text('{"step": "wri')  # and a record torn in the middle (an older version's)
    (journal / ".00001.json.crc").unlink(missing_ok=True)

    recover(spark, [(database, "jw")])

    assert rows_of(spark, table) == before
    assert len(data_files(root / "date=2024-01-01")) == 4  # the swap never began: rolled back
    assert hidden_dirs(data_dir) == []
    assert not (data_dir / ".lakekeeper-jw" / "lease").exists()
    (result,) = compact_table(spark, database, "jw", OPTIONS)  # the table works normally afterwards
    assert result.status == "compacted" and rows_of(spark, table) == before


@pytest.mark.crash
@pytest.mark.slow
def test_recovery_killed_mid_roll_forward_and_recovery_without_the_lease_are_safe(
    spark, metastore, database, data_dir, tmp_path
):
    root = data_dir / "rr"
    table = make_table(spark, database, "rr", root, partitions=DATES[:1], files=4)
    before = rows_of(spark, table)
    crashed = run_cli(["compact", "--table", table], tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": "kill@swapping"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    storage, state = Storage(spark), data_dir / ".lakekeeper-rr"
    info = read_table(spark, database, "rr")

    # Fencing: a recovery whose lease another process took over changes nothing.
    lease = TableLease(storage, state.as_uri(), info.qualified_name, "stalled-recovery").acquire()
    taker = {"host": "another-host", "pid": 1, "run_id": "t", "owner": "", "started_at": 0.0, "token": "t"}
    (state / "lease").write_text(json.dumps(taker))
    with pytest.raises(LeaseHeldError, match="lost its lease before the recovery of run"):
        recover_table(spark, storage, info, lease)
    lease.release()
    assert len(data_files(root / "date=2024-01-01")) == 4 and not [d for d in hidden_dirs(data_dir) if "old" in d]
    (state / "lease").unlink()

    # A recovery killed in the middle of its roll-forward (the staged data just installed), then recovered again.
    fault = {"LAKEKEEPER_FAULT": "kill@installed_dir"}
    killed = run_cli(["recover", "--table", table], tmp_path, metastore.uri, fault)
    assert killed.returncode == -signal.SIGKILL, killed.stdout + killed.stderr[-3000:]
    assert (state / "lease").exists()  # the dead recovery's, taken over at once: its process is gone
    messages = recover(spark, [(database, "rr")])
    assert any("swap finished" in m for m in messages), messages
    assert rows_of(spark, table) == before
    assert len(data_files(root / "date=2024-01-01")) == 1
    assert not [d for d in hidden_dirs(data_dir) if "staging" in d]
    assert not (state / "lease").exists()
    assert len(find_backups(spark, database, table)) == 1
