"""Mutual exclusion: one writer of lakekeeper state per table, across real processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time

import pytest

from lakekeeper_dagster.engine.errors import LeaseHeldError
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.protocol import lease as lease_module
from lakekeeper_dagster.engine.protocol.journal import state_dir
from lakekeeper_dagster.engine.protocol.lease import TAKEOVER_POINT, TableLease, boot_id, pid_namespace, process_start
from lakekeeper_dagster.engine.protocol.recovery import recover
from lakekeeper_dagster_tests.tables import DATES, OPTIONS, data_files, make_table, rows_of, run_cli


@pytest.mark.slow
def test_a_held_lease_makes_another_process_fail_fast_naming_the_holder(spark, metastore, database, data_dir, tmp_path):
    table = make_table(spark, database, "held", data_dir / "held", partitions=DATES[:1], files=3)
    storage = Storage(spark)
    with TableLease(storage, state_dir((data_dir / "held").as_uri()), table, "run-in-test", owner="pytest"):
        started = time.monotonic()
        result = run_cli(["compact", "--table", table], tmp_path, metastore.uri)
    assert result.returncode == 1
    assert "being changed by another lakekeeper process" in result.stdout
    assert f"host {socket.gethostname()}, pid {os.getpid()}, run run-in-test (pytest)" in result.stdout
    assert time.monotonic() - started < 120
    assert len(data_files(data_dir / "held" / "date=2024-01-01")) == 3


@pytest.mark.slow
def test_two_compactions_started_together_exactly_one_runs(spark, metastore, database, data_dir, tmp_path):
    table = make_table(spark, database, "two", data_dir / "two", partitions=DATES, files=3)
    before = rows_of(spark, table)
    slow = {"LAKEKEEPER_FAULT": "sleep@backed_up:8"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    procs = [run_cli(["compact", "--table", table], tmp_path / d, metastore.uri, slow, wait=False) for d in "ab"]
    outputs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 1], outputs
    loser = next(out for p, (out, _) in zip(procs, outputs, strict=True) if p.returncode == 1)
    assert "being changed by another lakekeeper process" in loser
    assert rows_of(spark, table) == before
    assert all(len(data_files(data_dir / "two" / f"date={d['date']}")) == 1 for d in DATES)


@pytest.mark.slow
def test_recover_never_touches_a_live_run(spark, metastore, database, data_dir, tmp_path):
    table = make_table(spark, database, "live", data_dir / "live", partitions=DATES[:1], files=3)
    before = rows_of(spark, table)
    proc = _compaction_pausing_after_backup(table, tmp_path, metastore.uri)
    _wait_until_backed_up(proc, data_dir / ".lakekeeper-live")
    messages = recover(spark, [(database, "live")])
    assert len(messages) == 1 and "left alone" in messages[0] and "being changed by another" in messages[0]
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert "COMPACTED files 3 -> 1" in out
    assert rows_of(spark, table) == before


def _compaction_pausing_after_backup(table: str, cwd, metastore_uri: str):
    """A `compact` CLI process that holds the table's lease for 6 s once its backup is registered."""
    return run_cli(["compact", "--table", table], cwd, metastore_uri, {"LAKEKEEPER_FAULT": "sleep@backed_up:6"}, False)


def _wait_until_backed_up(proc, state, timeout: float = 120) -> None:
    """Until the CLI process's journal (under the table's state directory) records a backed-up unit."""
    deadline = time.monotonic() + timeout
    while not any("backed_up" in p.read_text() for p in (state / "journal").rglob("*.json")):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.poll() else "timeout"
        time.sleep(0.2)


def _foreign_lease(directory, age_seconds: float) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    lease = directory / "lease"
    owner = {"host": "another-host", "pid": 1, "run_id": "r", "owner": "", "started_at": 0.0, "token": "t"}
    lease.write_text(json.dumps(owner))
    (directory / ".lease.crc").unlink(missing_ok=True)  # Hadoop's local checksum of an earlier lease
    past = time.time() - age_seconds
    os.utime(lease, (past, past))


def test_a_lease_from_another_host_is_taken_over_only_when_not_renewed(spark, database, data_dir):
    table = make_table(spark, database, "far", data_dir / "far", partitions=DATES[:1], files=3)
    _foreign_lease(data_dir / ".lakekeeper-far", age_seconds=5)
    with pytest.raises(LeaseHeldError, match="host another-host, pid 1"):
        compact_table(spark, database, "far", OPTIONS)
    assert len(data_files(data_dir / "far" / "date=2024-01-01")) == 3
    _foreign_lease(data_dir / ".lakekeeper-far", age_seconds=3600)
    (result,) = compact_table(spark, database, "far", OPTIONS)
    assert result.status == "compacted"
    assert len(rows_of(spark, table)) == 200


@pytest.mark.slow
def test_a_run_whose_lease_was_taken_over_stops_before_the_swap(spark, metastore, database, data_dir, tmp_path):
    """Fencing: a process that stalled past the timeout while another host took its lease never swaps."""
    table = make_table(spark, database, "fenced", data_dir / "fenced", partitions=DATES[:1], files=3)
    before = rows_of(spark, table)
    proc = _compaction_pausing_after_backup(table, tmp_path, metastore.uri)
    state = data_dir / ".lakekeeper-fenced"
    _wait_until_backed_up(proc, state)
    _foreign_lease(state, age_seconds=0)  # what a taker on another host leaves after the stale-lease takeover
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, out + err[-3000:]
    assert "lost its lease before the swap of" in out and "(now: host another-host, pid 1" in out
    assert len(data_files(data_dir / "fenced" / "date=2024-01-01")) == 3
    assert rows_of(spark, table) == before
    # The new holder finishes; the next run recovers the interrupted one (rolled back: its swap never began).
    (state / "lease").unlink()
    (result,) = compact_table(spark, database, "fenced", OPTIONS)
    assert result.status == "compacted" and result.files_after == 1
    assert rows_of(spark, table) == before


def test_an_unreadable_lease_is_never_taken_at_once(spark, database, data_dir):
    """A lease another process has just created may not be written yet: it is judged by its age alone."""
    table = make_table(spark, database, "torn", data_dir / "torn", partitions=DATES[:1], files=3)
    state = data_dir / ".lakekeeper-torn"
    state.mkdir()
    (state / "lease").write_text("")
    with pytest.raises(LeaseHeldError, match="lease .* cannot be read"):
        compact_table(spark, database, "torn", OPTIONS)
    assert len(data_files(data_dir / "torn" / "date=2024-01-01")) == 3
    past = time.time() - 3600
    os.utime(state / "lease", (past, past))
    (result,) = compact_table(spark, database, "torn", OPTIONS)
    assert result.status == "compacted"
    assert len(rows_of(spark, table)) == 200


def _lease_file(directory, age_seconds: float, **fields) -> None:
    """A lease written by hand (as another process would), `age_seconds` old by its modification time."""
    directory.mkdir(parents=True, exist_ok=True)
    owner = {"host": socket.gethostname(), "pid": 1, "run_id": "r", "owner": "", "started_at": 0.0, "token": "t"}
    (directory / "lease").write_text(json.dumps({**owner, **fields}))
    (directory / ".lease.crc").unlink(missing_ok=True)
    past = time.time() - age_seconds
    os.utime(directory / "lease", (past, past))


def _this_process_space() -> dict:
    return {"boot_id": boot_id(), "pid_namespace": pid_namespace()}


@pytest.mark.parametrize("race", ["together", "one after the other"])
def test_two_takers_of_one_stale_lease_exactly_one_wins(spark, data_dir, monkeypatch, race):
    """Both judge the lease stale, then take it over: together (both paused after judging), or the second only
    after the first has finished its takeover (the second paused after judging until then). One wins, intact."""
    state = data_dir / ".lakekeeper-race"
    _lease_file(state, age_seconds=3600, host="another-host")
    storage = Storage(spark)
    takers = [TableLease(storage, state.as_uri(), "db.race", f"taker-{i}", timeout_seconds=60) for i in range(2)]
    outcomes: dict[int, object] = {}

    def take(i: int) -> None:
        try:
            outcomes[i] = takers[i].acquire()
        except LeaseHeldError as error:
            outcomes[i] = error

    threads = [threading.Thread(target=take, args=(i,)) for i in range(2)]
    if race == "together":
        monkeypatch.setenv("LAKEKEEPER_FAULT", f"sleep@{TAKEOVER_POINT}:1")
        for thread in threads:
            thread.start()
    else:
        judged, go = threading.Event(), threading.Event()

        def pause_the_second(point: str) -> None:  # the fault point, held until the first taker has finished
            if point == TAKEOVER_POINT and threading.current_thread() is threads[1]:
                judged.set()
                go.wait()

        monkeypatch.setattr(lease_module, "kill_point", pause_the_second)
        threads[1].start()
        judged.wait()
        threads[0].start()
        threads[0].join()
        go.set()
    for thread in threads:
        thread.join()
    winners = [i for i, outcome in outcomes.items() if isinstance(outcome, TableLease)]
    assert len(winners) == 1, outcomes
    (loser,) = set(outcomes) - set(winners)
    assert "taking over its stale lease" in str(outcomes[loser]) or "same moment" in str(outcomes[loser])
    assert json.loads((state / "lease").read_text())["token"] == takers[winners[0]].me.token
    takers[winners[0]].ensure_held("the check")  # the winner's lease is intact and fences as its own
    takers[winners[0]].release()
    assert sorted(p.name for p in state.iterdir() if not p.name.startswith(".")) == []  # no claim left behind


def test_a_takeover_claim_left_by_a_dead_taker_does_not_block(spark, data_dir):
    state = data_dir / ".lakekeeper-claimed"
    _lease_file(state, age_seconds=3600, host="another-host")
    claimant = {"host": "another-host", "pid": 2, "run_id": "c", "owner": "", "started_at": 0.0, "token": "c"}
    (state / "lease.takeover-t").write_text(json.dumps(claimant))
    storage = Storage(spark)
    taker = TableLease(storage, state.as_uri(), "db.claimed", "taker", timeout_seconds=60)
    with pytest.raises(LeaseHeldError, match="is taking over its stale lease"):
        taker.acquire()  # a fresh claim: its claimant may be working
    past = time.time() - 3600
    os.utime(state / "lease.takeover-t", (past, past))
    with taker:
        assert json.loads((state / "lease").read_text())["token"] == taker.me.token
    assert not (state / "lease").exists() and not (state / "lease.takeover-t").exists()


@pytest.mark.slow
def test_a_reused_pid_on_this_host_is_taken_over_at_once(spark, data_dir):
    """The pid lives, but it is another process (another start time): the holder is dead."""
    state = data_dir / ".lakekeeper-reused"
    other = subprocess.Popen(["sleep", "60"])
    try:
        started = process_start(other.pid)
        _lease_file(state, age_seconds=0, pid=other.pid, process_start=started, **_this_process_space())
        taker = TableLease(Storage(spark), state.as_uri(), "db.reused", "taker", timeout_seconds=60)
        with pytest.raises(LeaseHeldError, match=f"pid {other.pid}"):
            taker.acquire()  # the very process: alive, held
        _lease_file(state, age_seconds=0, pid=other.pid, process_start=started + 1, **_this_process_space())
        with taker:
            assert json.loads((state / "lease").read_text())["token"] == taker.me.token
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("space", ["other pid namespace", "other boot", "not recorded"])
def test_a_same_host_lease_of_an_invisible_process_waits_for_the_timeout(spark, data_dir, space):
    """Containers sharing a hostname: a pid from another namespace says nothing; only the renewal timeout counts."""
    state = data_dir / ".lakekeeper-ns"
    identity = {
        "other pid namespace": {**_this_process_space(), "pid_namespace": pid_namespace() + 1, "process_start": 1},
        "other boot": {**_this_process_space(), "boot_id": "another-boot", "process_start": 1},
        "not recorded": {},  # a lease written before start times were recorded
    }[space]
    pid = _a_pid_that_is_gone()
    _lease_file(state, age_seconds=5, pid=pid, **identity)
    taker = TableLease(Storage(spark), state.as_uri(), "db.ns", "taker", timeout_seconds=60)
    with pytest.raises(LeaseHeldError, match=f"pid {pid}"):
        taker.acquire()
    _lease_file(state, age_seconds=3600, pid=pid, **identity)
    with taker:
        assert json.loads((state / "lease").read_text())["token"] == taker.me.token


def _a_pid_that_is_gone() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid
