"""Progress while an operation works: a real compaction reports its plan, each batch and each unit's steps, in
order and with the figures the files and the table really have; rollback, recovery and cleanup each unit."""

from __future__ import annotations

import re

import pytest

from lakekeeper_dagster.engine.ops import write
from lakekeeper_dagster.engine.ops.cleanup import cleanup_backups
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.options import CompactionOptions
from lakekeeper_dagster.engine.ops.rollback import rollback_table
from lakekeeper_dagster.engine.plan.progress import ProgressEvent
from lakekeeper_dagster.engine.plan.thresholds import Batching, human_bytes
from lakekeeper_dagster.engine.protocol import writers
from lakekeeper_dagster.engine.protocol.recovery import recover
from lakekeeper_dagster.engine.statuses import ProgressStep as Step
from lakekeeper_dagster_tests.tables import OPTIONS, data_files, hidden_dirs, make_table, rows_of

DAYS = [{"date": f"2024-03-0{d}"} for d in (1, 2, 3)]


def _size(directory) -> int:
    return sum(f.stat().st_size for f in data_files(directory))


def _rows(spark, table: str, partition: str) -> int:
    return spark.table(table).where(f"date = '{partition.split('=')[1]}'").count()


def test_a_compaction_reports_each_batch_and_each_units_steps_with_real_figures(spark, database, data_dir, monkeypatch):
    table = make_table(spark, database, "pg", data_dir, partitions=DAYS, files=3, rows=50)
    before = rows_of(spark, table)
    sizes = {f"date={d['date']}": _size(data_dir / f"date={d['date']}") for d in DAYS}
    (data_dir / "date=2024-03-03" / ".part-0.inprogress.1").write_bytes(b"a writer is writing")  # live: waited for
    monkeypatch.setattr(writers, "WRITER_WAIT_SECONDS", 1.0)
    monkeypatch.setattr(write, "SPARK_REPORT_SECONDS", 0.01)  # every Spark write outlasts this: reported as waited for
    options = CompactionOptions(OPTIONS.thresholds, batching=Batching(max_units=2, concurrent_jobs=2))
    events: list[ProgressEvent] = []

    results = {r.partition: r for r in compact_table(spark, database, "pg", options, progress=events.append)}

    assert [r.status for r in results.values()] == ["compacted", "compacted", "failed"]
    assert rows_of(spark, table) == before
    run = [e for e in events if e.unit is None and e.step != Step.WAITING]
    assert [(e.step, e.batch, e.batches, e.units) for e in run] == [
        (Step.PLANNED, 0, 2, 3),
        (Step.BATCH, 1, 2, 2),
        (Step.BATCH, 2, 2, 1),
    ]
    assert (run[0].files_before, run[0].bytes_before) == (9, sum(sizes.values()))
    assert run[1].bytes_before == sizes["date=2024-03-01"] + sizes["date=2024-03-02"]
    spark_waits = [e for e in events if e.step == Step.WAITING and e.unit is None]
    assert spark_waits and all(e.detail.startswith("the Spark writes of date=2024-03-0") for e in spark_waits)
    # Each unit's steps in protocol order, after its batch started and before the next one did.
    positions = {id(e): i for i, e in enumerate(events)}
    for name, batch_event in [("date=2024-03-01", run[1]), ("date=2024-03-02", run[1]), ("date=2024-03-03", run[2])]:
        mine = [e for e in events if e.unit == name]
        assert all(positions[id(e)] > positions[id(batch_event)] for e in mine)
        directory = data_dir / name
        if name == "date=2024-03-03":
            assert [e.step for e in mine] == [Step.WRITTEN, Step.VERIFIED, Step.WAITING, Step.FAILED]
            assert ".part-0.inprogress.1" in mine[2].detail and mine[3].detail == results[name].reason
            assert len(data_files(directory)) == 3  # untouched
            continue
        assert all(positions[id(e)] < positions[id(run[2])] for e in mine)
        written, verified, swapped, committed = mine
        assert [e.step for e in mine] == [Step.WRITTEN, Step.VERIFIED, Step.SWAPPED, Step.COMMITTED]
        (output,) = data_files(directory)
        rows = _rows(spark, table, name)
        assert rows == 50
        assert (written.files_before, written.files_after) == (3, 1)
        assert (written.bytes_before, written.bytes_after) == (sizes[name], output.stat().st_size)
        assert written.seconds > 0
        assert (verified.rows_before, verified.rows_after, verified.checksum_matches) == (rows, rows, True)
        assert (committed.files_before, committed.files_after, committed.rows_before, committed.rows_after) == (
            3,
            1,
            rows,
            rows,
        )
        assert (committed.bytes_before, committed.bytes_after) == (sizes[name], output.stat().st_size)
        assert written.describe() == (
            f"{name}: written 3 -> 1 files, {human_bytes(sizes[name])} -> {human_bytes(output.stat().st_size)} "
            f"in {written.seconds:.1f} s"
        )
        assert verified.describe() == f"{name}: verified rows 50 -> 50, checksum match"
        assert re.fullmatch(rf"{name}: committed files 3 -> 1, .+ -> .+, rows 50 -> 50", committed.describe())


def test_skipped_units_and_an_unpartitioned_table_are_reported(spark, database, data_dir):
    make_table(spark, database, "flat", data_dir / "flat", files=4, rows=30)
    make_table(spark, database, "one", data_dir / "one", partitions=DAYS[:1], files=1, rows=30)
    size = human_bytes(_size(data_dir / "flat"))
    events: list[ProgressEvent] = []

    compact_table(spark, database, "flat", OPTIONS, progress=events.append)
    compact_table(spark, database, "one", OPTIONS, progress=events.append)

    lines = [e.describe() for e in events]
    assert lines[0] == f"{database}.flat: 1 table to compact, 4 files, {size}, in 1 batch"
    assert [e.step for e in events if e.table == f"{database}.flat"][1:] == [
        Step.BATCH,
        Step.WRITTEN,
        Step.VERIFIED,
        Step.SWAPPED,
        Step.COMMITTED,
    ]
    assert lines[2].startswith(f"{database}.flat: written 4 -> 1 files")  # no partition: the table is the subject
    (skipped,) = [e for e in events if e.table == f"{database}.one"]
    assert skipped.step == Step.SKIPPED and skipped.describe().startswith("date=2024-03-01: skipped: ")


def test_a_reporter_that_fails_changes_nothing_the_compaction_does(spark, database, data_dir):
    table = make_table(spark, database, "bad", data_dir, partitions=DAYS[:2], files=3, rows=20)
    before = rows_of(spark, table)

    def broken(event: ProgressEvent) -> None:
        raise ValueError(f"the log is unreachable ({event.step})")

    results = compact_table(spark, database, "bad", OPTIONS, progress=broken)

    assert [(r.status, r.files_after, r.rows_after) for r in results] == [("compacted", 1, 20)] * 2
    assert rows_of(spark, table) == before
    assert [d.split("-")[1] for d in hidden_dirs(data_dir)] == ["old", "old"]  # only the backup's originals


class _Interrupted(BaseException):
    """What a Ctrl-C is to the engine: not an error it handles."""


def test_rollback_recovery_and_cleanup_report_each_unit(spark, database, data_dir):
    table = make_table(spark, database, "rb", data_dir, partitions=DAYS[:2], files=3, rows=20)
    before = rows_of(spark, table)
    compact_table(spark, database, "rb", OPTIONS)
    events: list[ProgressEvent] = []

    lines = rollback_table(spark, database, "rb", progress=events.append)

    assert [(e.step, e.unit) for e in events] == [
        (Step.RESTORED, "date=2024-03-01"),
        (Step.RESTORED, "date=2024-03-02"),
    ]
    assert [e.describe() for e in events] == [f"restored: {line}" for line in lines]
    assert rows_of(spark, table) == before

    # A run interrupted right after its first swap (as by Ctrl-C), then recovered: one line per unit.
    def interrupt(event: ProgressEvent) -> None:
        if event.step == Step.SWAPPED:
            raise _Interrupted

    with pytest.raises(_Interrupted):
        compact_table(spark, database, "rb", OPTIONS, progress=interrupt)
    events.clear()
    messages = recover(spark, [(database, "rb")], progress=events.append)
    assert len(messages) == 2 and [e.describe() for e in events] == [f"recovered: {m}" for m in messages]
    assert "date=2024-03-01: swap finished (rolled forward)" in messages[0]
    assert "date=2024-03-02: interrupted before the swap" in messages[1]
    assert rows_of(spark, table) == before

    events.clear()
    dropped = cleanup_backups(spark, table=table, skip_trash=True, progress=events.append)
    assert len(dropped) == 1 and [e.describe() for e in events] == [f"cleaned: {line}" for line in dropped]
    assert rows_of(spark, table) == before and hidden_dirs(data_dir) == []
