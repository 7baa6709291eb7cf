"""`lakekeeper-dagster history` and `diff` on a real metastore: the CLI's runs append their records, filtered by
table, age and run, as JSON or lines; the diff of the compaction, re-counted with --verify. The commands run in
this process, on the test session (what they do and print is tested here, not the process)."""

from __future__ import annotations

import json

import pytest

from lakekeeper_dagster.cli.history import render_totals
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.history_table import append_rows
from lakekeeper_dagster.engine.protocol.history import HistoryRecord
from lakekeeper_dagster_tests.tables import DATES, make_table, rows_of, run_cli_in_process


def test_history_lists_the_cli_runs_by_table_and_age(spark, metastore, database, data_dir, tmp_path):
    table = make_table(spark, database, "ev", data_dir, partitions=DATES[:1], files=4)
    history = f"{database}_h.history"
    config = {"history": {"table": history, "pending_dir": str(tmp_path / "pending")}}
    old = HistoryRecord("20200101T000000-aaaaaa", "compact", table, "date=2020-01-01", "committed", "",
                        "2020-01-01T00:00:00Z", 1.0)  # fmt: skip
    other = HistoryRecord("20260101T000000-bbbbbb", "retention", f"{database}.other", "dt=1", "dropped", "",
                          "2026-01-01T00:00:00Z", 1.0)  # fmt: skip
    try:
        done = run_cli_in_process(spark, ["compact", "--table", table], tmp_path, config)
        assert done.returncode == 0, done.stderr[-3000:]
        append_rows(spark, Storage(spark), f"{database}_h", "history", [old.row(), other.row()])

        listed = run_cli_in_process(spark, ["history", "--table", table, "--json"], tmp_path, config)
        assert listed.returncode == 0, listed.stderr[-3000:]
        records = json.loads(listed.stdout)
        assert [(r["run_id"], r["operation"]) for r in records][0] == (old.run_id, "compact")
        (compacted,) = records[1:]
        assert (compacted["table_name"], compacted["partition_name"], compacted["status"]) == (
            table, "date=2024-01-01", "committed",
        )  # fmt: skip
        assert (compacted["files_before"], compacted["files_after"]) == (4, 1)
        assert compacted["rows_before"] == compacted["rows_after"] == len(rows_of(spark, table))
        assert compacted["checksum_before"] == compacted["checksum_after"] and compacted["dagster_run_id"] is None

        recent = run_cli_in_process(spark, ["history", "--since", "7d"], tmp_path, config)
        assert recent.returncode == 0, recent.stderr[-3000:]
        line, blank, heading, total = recent.stdout.strip().splitlines()
        assert f"{compacted['run_id']} compact {table} date=2024-01-01: committed" in line
        assert "files 4 -> 1" in line and "checksum equal" in line
        assert (blank, heading) == ("", "In all:")  # what the runs shown bought, per table and operation
        assert total.startswith(f"{table} compact: 1 unit(s), files 4 -> 1 (4.0x fewer), ")
        assert not list((tmp_path / "pending").glob("*.jsonl"))

        diff = run_cli_in_process(spark, ["diff", "--table", table, "--verify"], tmp_path, config)
        assert diff.returncode == 0, diff.stderr[-3000:]
        assert f"{table}: run {compacted['run_id']} (compact)" in diff.stdout
        assert "| date=2024-01-01 | unchanged " in diff.stdout and "| 4 -> 1 |" in diff.stdout
        assert "| equal | equal |" in diff.stdout  # checksum recorded equal, and re-counted equal
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS `{database}_h` CASCADE")


def _record(operation: str, partition: str, status: str, files: tuple[int, int], run: str = "r1") -> dict:
    figures = {"files_before": files[0], "files_after": files[1], "bytes_before": 100, "bytes_after": 90}
    return HistoryRecord(run, operation, "d.t", partition, status, "", "2026-01-01T00:00:00Z", 1.0, **figures).row()


@pytest.mark.pure
def test_the_totals_count_each_unit_once_per_operation_and_leave_out_what_changed_nothing():
    rows = [
        _record("compact", "p=1", "committed", (10, 1)),
        _record("compact", "p=1", "committed", (4, 1), "r2"),  # new files since, compacted again: 10 -> 1 in all
        _record("compact", "p=2", "committed", (6, 2)),
        _record("compact", "p=3", "failed", (6, 6)),
        _record("rollback", "p=2", "committed", (2, 6)),  # on its own line, never netted into compaction's
        _record("merge", "month=1", "merged", (24, 1)),
        _record("merge", "month=2", "rolled_back", (24, 0)),  # a merge undone changed nothing
        _record("recover", "p=4", "committed", (8, 1)),  # whatever kind of run it finished: not totaled
        _record("cleanup", "p=5", "dropped", (8, 0)),  # a backup's files, not the table's
    ]
    assert render_totals(rows).splitlines() == [
        "",
        "",
        "In all:",
        "d.t compact: 2 unit(s), files 16 -> 3 (5.3x fewer), 200 B -> 180 B",
        "d.t merge: 1 unit(s), files 24 -> 1 (24.0x fewer), 100 B -> 90 B",
        "d.t rollback: 1 unit(s), files 2 -> 6, 100 B -> 90 B",
    ]
    assert render_totals(rows[3:4]) == ""
