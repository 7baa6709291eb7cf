"""The history of operations on real tables: one record per unit with figures that match the data; a history write
that fails never fails the operation, and its records arrive with the next run."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from lakekeeper_dagster.engine.errors import OperationError
from lakekeeper_dagster.engine.hive.catalog import read_table
from lakekeeper_dagster.engine.hive.history_table import read_rows
from lakekeeper_dagster.engine.ops.cleanup import cleanup_backups
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.diff import diff_run, render_diff
from lakekeeper_dagster.engine.ops.merge import merge_table
from lakekeeper_dagster.engine.ops.retention import retain_table
from lakekeeper_dagster.engine.ops.rollback import rollback_table
from lakekeeper_dagster.engine.policies import TablePolicies
from lakekeeper_dagster.engine.protocol.history import HistorySink, recorded
from lakekeeper_dagster.engine.protocol.recovery import recover
from lakekeeper_dagster.engine.rewrite.fingerprint import aggregates
from lakekeeper_dagster.engine.rewrite.schema import data_schema
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster_tests.tables import DATES, OPTIONS, data_files, make_table, run_cli


def fingerprint(spark, database: str, table: str, directory: Path) -> tuple[int, str]:
    """Rows and checksum of a directory's files, computed here from the data (the engine's row hash)."""
    schema = data_schema(read_table(spark, database, table))
    row = spark.read.schema(schema).parquet(str(directory)).agg(*aggregates(schema)).collect()[0]
    return int(row["rows"]), str(row["checksum"])


@pytest.fixture
def sink(database, tmp_path) -> HistorySink:
    return HistorySink(f"{database}_h.history", tmp_path / "pending", dagster_run_id="run-1")


@pytest.fixture
def history_db(spark, database):
    yield f"{database}_h"
    spark.sql(f"DROP DATABASE IF EXISTS `{database}_h` CASCADE")


def test_each_operation_appends_its_units_with_the_figures_of_the_data(spark, database, data_dir, sink, history_db):
    table = make_table(spark, database, "ev", data_dir, partitions=DATES, files=3)
    before = {d["date"]: fingerprint(spark, database, "ev", data_dir / f"date={d['date']}") for d in DATES}
    sizes = {d["date"]: sum(p.stat().st_size for p in data_files(data_dir / f"date={d['date']}")) for d in DATES}
    with recorded(sink):
        results = compact_table(spark, database, "ev", OPTIONS)
        after = {d["date"]: fingerprint(spark, database, "ev", data_dir / f"date={d['date']}") for d in DATES}
        compacted_sizes = {d: sum(p.stat().st_size for p in data_files(data_dir / f"date={d}")) for d in after}
        rollback_table(spark, database, "ev", partition="date=2024-01-01")
        cleanup_backups(spark, table=table)
    assert [r.status for r in results] == [UnitStatus.COMPACTED] * 2
    rows = read_rows(spark, history_db, "history", source=table)
    compacted = [r for r in rows if r["operation"] == "compact"]
    assert [r["partition_name"] for r in compacted] == ["date=2024-01-01", "date=2024-01-02"]
    for record in compacted:
        date = record["partition_name"].removeprefix("date=")
        assert record["status"] == "committed" and record["run_id"] == results[0].run_id
        assert (record["rows_before"], record["checksum_before"]) == before[date]
        assert (record["rows_after"], record["checksum_after"]) == before[date] == after[date]
        assert (record["files_before"], record["files_after"], record["bytes_before"]) == (3, 1, sizes[date])
        assert record["bytes_after"] == compacted_sizes[date]
        assert record["backup_table"] == results[0].backup_table
        assert record["dagster_run_id"] == "run-1" and record["os_user"] and record["host"]
        assert record["started_at"].endswith("Z") and record["seconds"] >= 0
    (rollback,) = [r for r in rows if r["operation"] == "rollback"]
    assert (rollback["partition_name"], rollback["status"]) == ("date=2024-01-01", "committed")
    assert (rollback["files_before"], rollback["files_after"]) == (1, 3)
    assert (rollback["rows_after"], rollback["checksum_after"]) == before["2024-01-01"]
    (cleanup,) = [r for r in rows if r["operation"] == "cleanup"]
    assert (cleanup["partition_name"], cleanup["status"], cleanup["files_before"]) == ("date=2024-01-02", "dropped", 3)
    assert cleanup["files_after"] == 0 and cleanup["backup_table"] == f"{database}.{results[0].backup_table}"
    assert not list(sink.pending_dir.glob("*.jsonl"))  # everything written


def test_a_failed_history_write_never_fails_the_run_and_arrives_with_the_next(
    spark, database, data_dir, sink, history_db
):
    make_table(spark, database, "one", data_dir / "one", partitions=DATES[:1], files=3)
    make_table(spark, database, "two", data_dir / "two", partitions=DATES[:1], files=3)
    with recorded(sink):
        compact_table(spark, database, "one", OPTIONS)  # creates the history table
    location = Path(read_table(spark, history_db, "history").location.removeprefix("file:"))
    aside = location.rename(location.with_name("aside"))
    location.write_text("in the way")  # the history's location unwritable (as root too: a file, not a directory)
    try:
        with recorded(sink):
            results = compact_table(spark, database, "two", OPTIONS)
    finally:
        location.unlink()
        aside.rename(location)
    assert [r.status for r in results] == [UnitStatus.COMPACTED]  # the run itself went through
    assert len(list(sink.pending_dir.glob("pending-*.jsonl"))) == 1
    assert [r["table_name"] for r in read_rows(spark, history_db, "history")] == [f"{database}.one"]
    with recorded(sink):
        compact_table(spark, database, "one", OPTIONS)  # nothing to do: no run, no record; no flush either
        rollback_table(spark, database, "one")  # a run: flushes the pending records first
    rows = read_rows(spark, history_db, "history")
    assert sorted((r["table_name"], r["operation"]) for r in rows) == [
        (f"{database}.one", "compact"),
        (f"{database}.one", "rollback"),
        (f"{database}.two", "compact"),
    ]
    assert not list(sink.pending_dir.glob("*.jsonl"))


def test_records_whose_flush_failed_after_they_landed_are_recorded_once(
    spark, database, data_dir, sink, history_db, monkeypatch
):
    """A flush that fails (or is killed) after a pending file's records landed in the table leaves
    the file pending; the next run's flush appends none of them a second time."""
    make_table(spark, database, "one", data_dir / "one", partitions=DATES[:2], files=3)
    monkeypatch.setenv("LAKEKEEPER_FAULT", "fail@history_appended")
    with recorded(sink):
        compact_table(spark, database, "one", OPTIONS)
    monkeypatch.delenv("LAKEKEEPER_FAULT")
    assert len(list(sink.pending_dir.glob("pending-*.jsonl"))) == 1
    assert len(read_rows(spark, history_db, "history")) == 2  # landed before the failure

    with recorded(sink):
        rollback_table(spark, database, "one")  # flushes the pending file again, then its own records

    rows = read_rows(spark, history_db, "history")
    assert sorted((r["operation"], r["partition_name"]) for r in rows) == [
        ("compact", f"date={DATES[0]['date']}"),
        ("compact", f"date={DATES[1]['date']}"),
        ("rollback", f"date={DATES[0]['date']}"),
        ("rollback", f"date={DATES[1]['date']}"),
    ]
    assert not list(sink.pending_dir.glob("*.jsonl"))


def test_the_history_table_is_never_managed(spark, database, data_dir, sink, history_db):
    make_table(spark, database, "ev", data_dir, partitions=DATES[:1], files=3)
    with recorded(sink):
        compact_table(spark, database, "ev", OPTIONS)
    assert "operation history" in read_table(spark, history_db, "history").skip_reason()
    with pytest.raises(OperationError, match="operation history"):
        compact_table(spark, history_db, "history", OPTIONS)


def test_a_history_table_naming_another_table_writes_nothing_into_it(spark, database, data_dir, tmp_path):
    """A typo or a clash in history.table: the run goes through, the other table is untouched, the records wait."""
    make_table(spark, database, "theirs", data_dir / "theirs", partitions=DATES[:1], files=2)
    make_table(spark, database, "ours", data_dir / "ours", partitions=DATES[:1], files=3)
    before = sorted(str(p.relative_to(data_dir)) for p in (data_dir / "theirs").rglob("*"))
    clash = HistorySink(f"{database}.theirs", tmp_path / "pending")
    with recorded(clash):
        results = compact_table(spark, database, "ours", OPTIONS)
    assert [r.status for r in results] == [UnitStatus.COMPACTED]
    assert sorted(str(p.relative_to(data_dir)) for p in (data_dir / "theirs").rglob("*")) == before
    assert len(list(clash.pending_dir.glob("pending-*.jsonl"))) == 1
    assert "lakekeeper.history" not in read_table(spark, database, "theirs").table_properties


def test_diff_after_a_compaction_shows_the_files_and_with_verify_equal_content(
    spark, database, data_dir, sink, history_db
):
    make_table(spark, database, "df", data_dir, partitions=DATES[:1], files=3, codec="snappy")
    with recorded(sink):
        (result,) = compact_table(spark, database, "df", OPTIONS)
    diff = diff_run(spark, sink.table, database, "df")
    (unit,) = diff.units
    assert (diff.run_id, diff.operation) == (result.run_id, "compact")
    assert unit.location_unchanged and unit.partition == "date=2024-01-01"
    assert (unit.files_before, unit.files_after, unit.bytes_after) == (3, 1, result.bytes_after)
    assert unit.codecs_before == unit.codecs_after == ("SNAPPY",) and unit.schema_unchanged
    assert (unit.rows_before, unit.checksum_before) == (result.rows_before, result.checksum_before)
    assert (
        unit.backup_table == f"{database}.{result.backup_table}" and Path(unit.originals.removeprefix("file:")).is_dir()
    )
    assert unit.verified is None  # no data read
    assert unit.statistics["numFiles"] == ["3", "1"]  # the metastore's file statistics, as the commit changed them
    assert unit.statistics["totalSize"] == [str(result.bytes_before), str(result.bytes_after)]
    assert diff_run(spark, sink.table, database, "df", verify=True).units[0].verified is True
    table = render_diff(diff)
    assert "| date=2024-01-01 | unchanged " in table and "| 3 -> 1 |" in table and "| equal |" in table
    assert "numFiles 3 -> 1" in table


def test_retention_records_each_dropped_partition_with_its_files(spark, database, data_dir, sink, history_db):
    old, new = {"dt": "2019041316"}, {"dt": "2024053123"}
    table = make_table(spark, database, "ret", data_dir, partitions=[old, new], files=2, rows=10)
    size = sum(p.stat().st_size for p in data_files(data_dir / "dt=2019041316"))
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, retention={"older_than": "90d"})
    with recorded(sink):
        outcome = retain_table(spark, database, "ret", policy, skip_trash=True, now=datetime(2024, 6, 1))
    assert outcome.dropped == ["dt=2019041316"]
    (record,) = read_rows(spark, history_db, "history", source=table)
    assert (record["operation"], record["partition_name"], record["status"]) == (
        "retention",
        "dt=2019041316",
        "dropped",
    )
    assert (record["files_before"], record["bytes_before"], record["files_after"], record["bytes_after"]) == (
        2,
        size,
        0,
        0,
    )
    assert record["reason"] == "deleted" and record["backup_table"] is None


def test_merge_records_each_period_with_the_copy_figures(spark, database, data_dir, sink, history_db):
    hours = [{"dt": "2019041316"}, {"dt": "2019041317"}, {"dt": "2024053123"}]
    table = make_table(spark, database, "mrg", data_dir, partitions=hours, files=2, rows=10)
    size = sum(p.stat().st_size for h in ("16", "17") for p in data_files(data_dir / f"dt=20190413{h}"))
    merge = {"into": "%Y%m%d", "older_than": "90d", "view": "mrg_all", "settle_seconds": 0}
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge=merge)
    with recorded(sink):
        outcome = merge_table(spark, database, "mrg", policy, skip_trash=True, now=datetime(2024, 6, 1))
    assert outcome.merged == ["dt=20190413"]
    (record,) = read_rows(spark, history_db, "history", source=table)
    assert (record["operation"], record["partition_name"], record["status"]) == ("merge", "dt=20190413", "merged")
    assert (record["files_before"], record["bytes_before"]) == (4, size) and record["files_after"] >= 1
    view = spark.sql(f"SELECT count(*) FROM {database}.mrg_all WHERE dt LIKE '20190413%'").collect()[0][0]
    assert record["rows_before"] == record["rows_after"] == view == 20
    assert record["checksum_before"] == record["checksum_after"] is not None


@pytest.mark.slow
@pytest.mark.crash
def test_a_run_recovery_finishes_is_recorded_as_recover(
    spark, metastore, database, data_dir, tmp_path, sink, history_db
):
    table = make_table(spark, database, "rc", data_dir, partitions=DATES[:1], files=3)
    before = fingerprint(spark, database, "rc", data_dir / "date=2024-01-01")
    crashed = run_cli(["compact", "--table", table], tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": "kill@swapping"})
    assert crashed.returncode != 0
    with recorded(sink):
        assert recover(spark, [(database, "rc")])
    (record,) = read_rows(spark, history_db, "history", source=table)
    assert (record["operation"], record["status"], record["files_before"], record["files_after"]) == (
        "recover", "committed", 3, 1,
    )  # fmt: skip
    assert (
        (record["rows_before"], record["checksum_before"]) == before == (record["rows_after"], record["checksum_after"])
    )
    assert fingerprint(spark, database, "rc", data_dir / "date=2024-01-01") == before
