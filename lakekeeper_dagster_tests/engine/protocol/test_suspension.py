"""Suspension: a partition that fails every run is left alone after `suspend_after_failures` runs
in a row, says so in its result and in `analyze`, and is compacted again once resumed."""

from __future__ import annotations

from dataclasses import replace

from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.ops.analyze import analyze_tables
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.protocol import writers
from lakekeeper_dagster.engine.protocol.lease import TableLease
from lakekeeper_dagster.engine.statuses import PlanStatus, UnitStatus
from lakekeeper_dagster_tests.engine.rewrite.test_text_compaction import _table
from lakekeeper_dagster_tests.tables import DATES, OPTIONS, data_files, make_table, run_cli_in_process

BOM = b"\xef\xbb\xbf"
DATE = "date=2024-01-01"


def _files(directory, bom: bool) -> None:
    """Four one-line files, each starting with a UTF-8 byte-order mark when `bom`: Hadoop's line reader drops the mark
    at the start of a file only, so once concatenated the later files' marks land inside a value."""
    directory.mkdir(parents=True, exist_ok=True)
    for n in range(4):
        (directory / f"part-{n}").write_bytes((BOM if bom else b"") + f"{n}|v{n}|x|k:{n}\n".encode())


def test_a_partition_failing_every_run_is_suspended_until_resumed(spark, database, data_dir, tmp_path):
    table = _table(spark, database, "bom", data_dir, ["2024-01-01"])
    _files(data_dir / DATE, bom=True)
    on_disk = sorted((p.name, p.read_bytes()) for p in data_files(data_dir / DATE))
    options = replace(OPTIONS, suspend_after=3)

    for run in range(3):
        (result,) = compact_table(spark, database, "bom", options)
        assert result.status == UnitStatus.FAILED and "verification failed" in result.reason, run
    (suspended,) = compact_table(spark, database, "bom", options)
    assert suspended.status == UnitStatus.SUSPENDED
    assert "suspended after 3 failed runs in a row" in suspended.reason and "verification failed" in suspended.reason
    assert f"resume --table {table} --partition '{DATE}'" in suspended.reason
    assert sorted((p.name, p.read_bytes()) for p in data_files(data_dir / DATE)) == on_disk  # nothing was touched
    ((plan,),) = [p.partitions for p in analyze_tables(spark, [(database, "bom")], OPTIONS.thresholds, 3)]
    assert plan.status == PlanStatus.SUSPENDED and not plan.needs_compaction and plan.reason == suspended.reason
    shown = run_cli_in_process(spark, ["analyze", "--table", table], tmp_path).stdout
    assert "SUSPENDED" in shown and suspended.reason in shown
    # another setting: suspended after more failures, or never
    assert compact_table(spark, database, "bom", replace(options, suspend_after=0))[0].status == UnitStatus.FAILED

    missing = run_cli_in_process(spark, ["resume", "--table", table, "--partition", "date=1999-01-01"], tmp_path)
    assert missing.returncode == 2 and "does not exist" in missing.stderr  # bad input: nothing resumed
    assert compact_table(spark, database, "bom", options)[0].status == UnitStatus.SUSPENDED
    with TableLease(Storage(spark), str(data_dir.parent / f".lakekeeper-{data_dir.name}"), table, "r1", "a run"):
        held = run_cli_in_process(spark, ["resume", "--table", table, "--partition", DATE], tmp_path)
    assert held.returncode == 1 and f"table {table}" in held.stderr and "a run" in held.stderr  # a run counts: wait
    assert compact_table(spark, database, "bom", options)[0].status == UnitStatus.SUSPENDED
    resumed = run_cli_in_process(spark, ["resume", "--table", table, "--partition", DATE], tmp_path)
    assert resumed.returncode == 0 and f"{table} {DATE}: resumed" in resumed.stdout
    assert compact_table(spark, database, "bom", options)[0].status == UnitStatus.FAILED  # tried again: 1 in a row
    counts = data_dir.parent / f".lakekeeper-{data_dir.name}" / "failures.json"
    counts.write_text('{"date=2024-01-01": {"runs": "many"')  # torn (or edited): counted as none, never a crash
    assert compact_table(spark, database, "bom", options)[0].status == UnitStatus.FAILED
    _files(data_dir / DATE, bom=False)  # the cause fixed: it compacts, and its failures are forgotten
    assert compact_table(spark, database, "bom", options)[0].status == UnitStatus.COMPACTED
    again = run_cli_in_process(spark, ["resume", "--table", table], tmp_path)
    assert again.stdout.strip() == f"{table}: no suspended or failing partition" and not counts.exists()


def test_a_failure_a_writer_at_work_caused_never_suspends(spark, database, data_dir, monkeypatch):
    """A partition still being written (a job's `_temporary/` in it) fails each run after the wait, and the next run
    may well succeed: it is never counted toward a suspension."""
    monkeypatch.setattr(writers, "WRITER_WAIT_SECONDS", 0.5)
    make_table(spark, database, "busy", data_dir, partitions=DATES[:1], files=4)
    task = data_dir / "date=2024-01-01" / "_temporary" / "0" / "_temporary" / "attempt_0"
    task.mkdir(parents=True)
    (task / "part-00000.parquet").write_bytes(b"being written")
    options = replace(OPTIONS, suspend_after=1)
    for _ in range(2):
        (result,) = compact_table(spark, database, "busy", options)
        assert result.status == UnitStatus.FAILED and "in progress" in result.reason
    assert not (data_dir.parent / f".lakekeeper-{data_dir.name}" / "failures.json").exists()
