"""What only HDFS limits, on the session's real NameNode: quotas a compaction's staged copy would exceed (refused
before anything is written), and files a writer holds open with `hflush` (their size and time do not show the
writer at work: waited for, then refused)."""

from __future__ import annotations

import threading

import pytest

from lakekeeper_dagster.engine.errors import StorageError
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.protocol import swap, writers
from lakekeeper_dagster.engine.statuses import ProgressStep, UnitStatus
from lakekeeper_dagster_tests.hdfs import data_files, dfs, hidden_dirs, jpath
from lakekeeper_dagster_tests.tables import MB, OPTIONS, rows_of

pytestmark = pytest.mark.hdfs

RESET = -1  # setQuota's "no quota"
HOURS = ({"date": "2024-01-01", "h": "00"}, {"date": "2024-01-01", "h": "01"})


def _set_quota(spark, location: str, names: int = RESET, space: int = RESET) -> None:
    dfs(spark, location).setQuota(jpath(spark, location), names, space)


def _usage(spark, location: str):
    return dfs(spark, location).getQuotaUsage(jpath(spark, location))


def _bare(location: str) -> str:
    """A location's path, as the NameNode's messages name it."""
    return "/" + location.split("://", 1)[1].split("/", 1)[1]


def _untouched(spark, database: str, table: str, location: str, before: list, files: dict) -> None:
    """Rows and files as they were, no hidden directory of a run, no backup table."""
    assert rows_of(spark, table) == before
    assert {d: data_files(spark, d) for d in files} == files
    directories = sorted({location, *files, *(unit.rsplit("/", 1)[0] for unit in files)})  # staging: beside a unit
    assert [hidden_dirs(spark, d) for d in directories] == [[]] * len(directories)
    assert [t.name for t in spark.catalog.listTables(database) if t.name.startswith("__bkp")] == []


def test_a_quota_within_the_table_the_staged_copy_would_exceed_refuses_before_anything_is_written(
    spark, database, hdfs_dir
):
    location = f"{hdfs_dir}/logs"
    table, units = _text_table(spark, database, location, HOURS)
    day = f"{location}/date=2024-01-01"
    before, files = rows_of(spark, table), {u: data_files(spark, u) for u in units}

    # a space quota two levels above the units (the table's directory): a copy needs a whole 128 MB block
    used = _usage(spark, location).getSpaceConsumed()
    _set_quota(spark, location, space=used + MB)
    refused = compact_table(spark, database, "logs", OPTIONS)
    assert [(r.status, r.partition) for r in refused] == [(UnitStatus.FAILED, "date=2024-01-01/h=00")] + [
        (UnitStatus.FAILED, "date=2024-01-01/h=01")
    ]
    reason = refused[0].reason
    assert f"{table} partition date=2024-01-01/h=00: its staged copy would exceed the space quota of {location}" in (
        reason
    )
    assert f"quota {used + MB} B, used {used} B, the copy needs {128 * MB} B" in reason
    assert "x replication 1" in reason and "raise the quota (hdfs dfsadmin -setSpaceQuota) or free space" in reason
    _untouched(spark, database, table, location, before, files)

    # a namespace quota on the units' parent, room for one copy only: the first compacts, the second is refused
    _set_quota(spark, location)
    names = _usage(spark, day).getFileAndDirectoryCount()
    _set_quota(spark, day, names=names + 8)  # a copy of one file: its directory, file, Spark's own (7)
    first, second = sorted(compact_table(spark, database, "logs", OPTIONS), key=lambda r: r.partition)
    assert (first.status, first.files_after) == (UnitStatus.COMPACTED, 1), first.reason
    assert second.status == UnitStatus.FAILED
    assert (
        f"partition date=2024-01-01/h=01: its staged copy would exceed the namespace quota of {day}: quota "
        f"{names + 8} files and directories, used {names} and 2 more by this run's other partitions, the copy "
        "needs 7 (its directory, its 1 file(s)" in second.reason
    )
    assert "raise the quota (hdfs dfsadmin -setQuota) or remove files" in second.reason
    assert rows_of(spark, table) == before
    assert data_files(spark, units[1]) == files[units[1]]

    # a quota large enough lets it through
    _set_quota(spark, day, names=names + 100, space=used + 1024 * MB)
    (last,) = [r for r in compact_table(spark, database, "logs", OPTIONS) if r.partition.endswith("h=01")]
    assert (last.status, last.files_after) == (UnitStatus.COMPACTED, 1)
    assert rows_of(spark, table) == before


def test_a_quota_lowered_after_the_check_fails_the_write_with_the_namenodes_words(spark, database, hdfs_dir):
    table, (unit,) = _text_table(spark, database, hdfs_dir)
    before, files = rows_of(spark, table), {unit: data_files(spark, unit)}
    _set_quota(spark, hdfs_dir, space=_usage(spark, hdfs_dir).getSpaceConsumed() + 1024 * MB)  # room: admitted

    def lower_the_quota(event) -> None:  # the units are admitted; an administrator lowers the quota meanwhile
        if event.step == ProgressStep.PLANNED:
            _set_quota(spark, hdfs_dir, space=_usage(spark, hdfs_dir).getSpaceConsumed() + MB)

    (refused,) = compact_table(spark, database, "logs", OPTIONS, progress=lower_the_quota)

    assert refused.status == UnitStatus.FAILED
    assert f"{table} partition date=2024-01-01: its staged copy exceeded an HDFS quota (The DiskSpace quota of " in (
        refused.reason
    )
    assert f"{_bare(hdfs_dir)} is exceeded: quota = " in refused.reason
    assert "the staged files were deleted and the original files are untouched. Raise that quota" in refused.reason
    _untouched(spark, database, table, hdfs_dir, before, files)


def test_a_quota_above_the_table_without_a_block_to_spare_refuses_the_run_and_leaves_no_lease(
    spark, database, hdfs_dir
):
    location = f"{hdfs_dir}/logs"
    table, (unit,) = _text_table(spark, database, location)
    before, files = rows_of(spark, table), {unit: data_files(spark, unit)}
    # the table's state (lease, journal) is written beside it, each file charged a whole block (1 MiB) while written
    _set_quota(spark, hdfs_dir, space=_usage(spark, hdfs_dir).getSpaceConsumed() + MB // 2)

    with pytest.raises(StorageError, match=f"The DiskSpace quota of {_bare(hdfs_dir)} is exceeded.*raise that quota"):
        compact_table(spark, database, "logs", OPTIONS)

    _untouched(spark, database, table, location, before, files)
    state = f"{hdfs_dir}/.lakekeeper-logs"
    leftovers = dfs(spark, state).listFiles(jpath(spark, state), True)
    assert not leftovers.hasNext()  # no empty lease left behind by the failed write
    _set_quota(spark, hdfs_dir)
    (result,) = compact_table(spark, database, "logs", OPTIONS)
    assert (result.status, result.files_after) == (UnitStatus.COMPACTED, 1)
    assert rows_of(spark, table) == before


def _text_table(spark, database: str, location: str, specs: tuple[dict, ...] = ({"date": "2024-01-01"},)):
    """A delimited text table `logs` whose partitions (`specs`, of the same keys) hold four files of two lines each;
    (its name, the partitions' directories)."""
    columns = ", ".join(f"{key} STRING" for key in specs[0])
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.logs (id INT, v STRING) PARTITIONED BY ({columns}) ROW FORMAT "
        f"DELIMITED FIELDS TERMINATED BY ',' STORED AS TEXTFILE LOCATION '{location}'"
    )
    units = []
    for number, spec in enumerate(specs):
        units.append("/".join([location, *(f"{k}={v}" for k, v in spec.items())]))
        for i in range(4):
            stream = dfs(spark, location).create(jpath(spark, f"{units[-1]}/part-{i}.txt"))
            first = 100 * number + 2 * i
            stream.write(bytearray(f"{first},a{i}\n{first + 1},b{i}\n".encode()))
            stream.close()
        values = ", ".join(f"{k}='{v}'" for k, v in spec.items())
        spark.sql(f"ALTER TABLE {database}.logs ADD PARTITION ({values})")
    return f"{database}.logs", units


def _append_held_open(spark, path: str, line: str):
    """A real writer: `line` appended to `path` and hflushed, the stream kept open (returned)."""
    stream = dfs(spark, path).append(jpath(spark, path))
    stream.write(bytearray(line.encode()))
    stream.hflush()
    return stream


def test_a_file_held_open_by_a_writer_is_waited_for_then_the_unit_is_refused(spark, database, hdfs_dir, monkeypatch):
    table, (unit,) = _text_table(spark, database, hdfs_dir)
    monkeypatch.setattr(writers, "WRITER_WAIT_SECONDS", 1.0)
    held = f"{unit}/part-2.txt"
    stream = _append_held_open(spark, held, "100,appended\n")
    try:
        shown = dfs(spark, held).getFileStatus(jpath(spark, held)).getLen()
        stream.write(bytearray(b"101,appended\n"))
        stream.hflush()
        assert dfs(spark, held).getFileStatus(jpath(spark, held)).getLen() == shown  # the NameNode does not show it
        before, files = rows_of(spark, table), {unit: data_files(spark, unit)}

        (refused,) = compact_table(spark, database, "logs", OPTIONS)

        assert (refused.status, refused.raced) == (UnitStatus.FAILED, True)
        assert f"{table} partition date=2024-01-01: its file {held} is held open by a writer" in refused.reason
        assert "was not closed within 1s" in refused.reason and "retry when the writer is done" in refused.reason
        _untouched(spark, database, table, hdfs_dir, before, files)
    finally:
        stream.close()


def test_a_file_closed_during_the_wait_is_compacted_with_what_its_writer_appended(
    spark, database, hdfs_dir, monkeypatch
):
    table, (unit,) = _text_table(spark, database, hdfs_dir)
    original = rows_of(spark, table)
    monkeypatch.setattr(writers, "WRITER_WAIT_SECONDS", 30.0)
    stream = _append_held_open(spark, f"{unit}/part-2.txt", "100,appended\n")
    closing = threading.Timer(1.0, stream.close)  # the writer closes its file a second into the wait
    waited = []

    def close_once_waiting(event) -> None:
        waited.append(event)
        if event.step == ProgressStep.WAITING and closing.ident is None:  # not started yet
            closing.start()

    try:
        (result,) = compact_table(spark, database, "logs", OPTIONS, progress=close_once_waiting)
    finally:
        if closing.is_alive():
            closing.join()
        stream.close()  # a no-op once the writer closed it

    assert (result.status, result.files_before, result.files_after) == (UnitStatus.COMPACTED, 4, 1)
    assert any(e.step == ProgressStep.WAITING and "held open by a writer" in e.detail for e in waited)
    assert rows_of(spark, table) == sorted([*original, (100, "appended", "2024-01-01")])


def test_a_file_opened_by_a_writer_after_the_snapshot_refuses_the_swap(spark, database, hdfs_dir, monkeypatch):
    table, (unit,) = _text_table(spark, database, hdfs_dir)
    original = rows_of(spark, table)
    monkeypatch.setattr(writers, "WRITER_WAIT_SECONDS", 1.0)
    held = f"{unit}/part-0.txt"
    streams = []

    def open_after_the_copy(event) -> None:  # the staged copy is written and verified: a writer appends now
        if event.step == ProgressStep.VERIFIED:
            streams.append(_append_held_open(spark, held, "100,appended\n"))

    try:
        (refused,) = compact_table(spark, database, "logs", OPTIONS, progress=open_after_the_copy)
    finally:
        for stream in streams:
            stream.close()

    assert (refused.status, refused.raced) == (UnitStatus.FAILED, True)
    assert f"its file {held} is held open by a writer" in refused.reason
    assert sorted(data_files(spark, unit)) == [f"part-{i}.txt" for i in range(4)]
    assert hidden_dirs(spark, hdfs_dir) == []
    assert rows_of(spark, table) == sorted([*original, (100, "appended", "2024-01-01")])


def test_a_file_opened_right_before_the_retire_rename_undoes_the_swap(spark, database, hdfs_dir, monkeypatch):
    """A writer that opens an original after the last check, between it and the retire rename: its stream follows
    the file into the retired directory, and neither size nor time shows what it appends. Found open once the
    originals are retired, the swap is undone; the appended row stays in the table."""
    table, (unit,) = _text_table(spark, database, hdfs_dir)
    original = rows_of(spark, table)
    held, streams = f"{unit}/part-1.txt", []
    carry = swap.copy_attributes

    def open_before_the_rename(storage, source: str, target: str, owners: bool = True) -> list[str]:  # its last step
        missing = carry(storage, source, target, owners)
        streams.append(dfs(spark, held).append(jpath(spark, held)))  # open, nothing flushed: size, time as before
        return missing

    monkeypatch.setattr(swap, "copy_attributes", open_before_the_rename)
    try:
        (undone,) = compact_table(spark, database, "logs", OPTIONS)
    finally:
        for stream in streams:  # the writer goes on in the file it opened, and closes it
            stream.write(bytearray(b"100,appended\n"))
            stream.close()

    assert (undone.status, undone.raced) == (UnitStatus.FAILED, True)
    assert "was opened by a writer while it was being swapped" in undone.reason and "part-1.txt" in undone.reason
    assert sorted(data_files(spark, unit)) == [f"part-{i}.txt" for i in range(4)]
    assert hidden_dirs(spark, hdfs_dir) == []
    assert rows_of(spark, table) == sorted([*original, (100, "appended", "2024-01-01")])
