"""Merging fine partitions into coarse ones on real tables: flat and nested time columns, the union view exact
before, during and after a run, the dry run, bad input, and kills at each journal step followed by `recover`."""

from __future__ import annotations

import json
import re
import shutil
import signal
import sys
import threading
from datetime import datetime
from pathlib import Path

import pytest

from lakekeeper_dagster.engine.errors import ConfigError, OperationError
from lakekeeper_dagster.engine.hive.catalog import list_partitions, read_table
from lakekeeper_dagster.engine.hive.model import Column, TableInfo
from lakekeeper_dagster.engine.ops.merge import merge_table
from lakekeeper_dagster.engine.plan.merge import merge_layout
from lakekeeper_dagster.engine.plan.merge_view import UnionView
from lakekeeper_dagster.engine.plan.partition_time import PartitionClock
from lakekeeper_dagster.engine.policies import TablePolicies
from lakekeeper_dagster.engine.protocol.recovery import recover
from lakekeeper_dagster.engine.rewrite.footers import read_footers
from lakekeeper_dagster_tests.tables import (
    Pause,
    data_files,
    hidden_dirs,
    make_table,
    rows_of,
    run_cli,
    write_files,
)
from spark_resources.py4j import session_conf

NOW = datetime(2024, 6, 1)
FLAT = [{"dt": d} for d in ("2019041316", "2019041317", "2019041400", "2024053123", "latest")]
NESTED = [
    {"year": y, "month": m, "day": d, "hour": h}
    for y, m, d, h in [("2019", "04", "16", "19"), ("2019", "04", "17", "00"), ("2019", "05", "01", "00")]
    + [("2024", "05", "31", "23")]
]
FLAT_MERGE = {"into": "%Y%m%d", "older_than": "90d", "view": "flat_all", "settle_seconds": 0.5}
FLAT_POLICY = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge=FLAT_MERGE)
NESTED_POLICY = TablePolicies(
    partition_time={"year": "%Y", "month": "%m", "day": "%d", "hour": "%H"},
    merge={"into": ["year", "month"], "older_than": "60d", "view": "nested_all", "settle_seconds": 0.5},
)


def view_rows(spark, view: str) -> list[tuple]:
    return sorted(tuple(r) for r in spark.table(view).collect())


def view_figures(spark, view: str) -> tuple:
    """Rows and a content checksum computed by the test itself (not the engine's fingerprint)."""
    row = spark.sql(f"SELECT count(*), sum(hash(*)) FROM {view}").collect()[0]
    return int(row[0]), int(row[1] or 0)


def partitions(spark, database: str, name: str) -> list[str]:
    return [u.partition for u in list_partitions(spark, read_table(spark, database, name))]


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))


def merge_paused_at(point: str, act, spark, database: str, name: str, policy, monkeypatch, directory: Path):
    """Merge `name` (skipping the trash) with a pause at `point`, `act` run at that moment; the run goes on once
    `act` returns. Its outcome."""
    pause = Pause(point, directory)
    done = []
    with monkeypatch.context() as patched:
        patched.setattr(sys, "stderr", pause)
        patched.setenv("LAKEKEEPER_FAULT", pause.fault)
        run = threading.Thread(
            target=lambda: done.append(merge_table(spark, database, name, policy, skip_trash=True, now=NOW))
        )
        run.start()
        try:
            while not pause.reached.wait(0.2) and run.is_alive():
                pass
            assert pause.reached.is_set(), f"the merge ended before pausing at {point}"
            act()
        finally:
            pause.release()
            run.join(300)
    (outcome,) = done
    return outcome


class Reader(threading.Thread):
    """Polls the view while a merge runs: every answer (or error) is kept."""

    def __init__(self, spark, view: str):
        super().__init__(daemon=True)
        self.spark, self.view, self.seen, self.stop = spark, view, [], threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.seen.append(view_figures(self.spark, self.view))
            except Exception as error:  # a query failing mid-merge is a finding, not a crash of the thread
                self.seen.append(repr(error))
            self.stop.wait(0.2)  # leave the 2 cores to the merge between polls


def merged_while_read(spark, database: str, table: str, view: str, policy: TablePolicies, rows: list[tuple]):
    """Run the merge with a reader polling the view; the view's figures are the source's every time."""
    expected = view_figures(spark, view)
    assert view_rows(spark, view) == rows
    reader = Reader(spark, view)
    reader.start()
    try:
        done = merge_table(spark, database, table, policy, skip_trash=True, now=NOW)
    finally:
        reader.stop.set()
        reader.join(60)
    assert len(reader.seen) >= 3 and set(reader.seen) == {expected}, [s for s in reader.seen if s != expected][:3]
    assert view_rows(spark, view) == rows and view_figures(spark, view) == expected
    return done


def test_the_merged_copy_keeps_the_files_encodings_and_codec(spark, database, data_dir):
    """The copy is written as compaction writes, not with Hive's defaults: the planned files'
    timestamp type and decimal layout, and their codec; the merged rows are the source's."""
    root = data_dir / "enc"
    spark.sql(
        f"CREATE EXTERNAL TABLE `{database}`.enc (id BIGINT, ts TIMESTAMP, d DECIMAL(10, 2)) "
        f"PARTITIONED BY (dt STRING) STORED AS PARQUET LOCATION '{root.as_uri()}'"
    )
    settings = {
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS",
        "spark.sql.parquet.writeLegacyFormat": "false",
    }
    with session_conf(spark, settings):
        for index, spec in enumerate(FLAT[:3]):
            df = spark.range(index * 10, index * 10 + 10, numPartitions=2)
            df = df.selectExpr("id", "timestamp'2019-04-13 10:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) AS ts")
            df.selectExpr("id", "ts", "cast(id / 4 AS decimal(10, 2)) AS d").write.option(
                "compression", "zstd"
            ).parquet(f"{root.as_uri()}/dt={spec['dt']}")
            spark.sql(f"ALTER TABLE `{database}`.enc ADD PARTITION (dt='{spec['dt']}')")
    rows = sorted(tuple(r) for r in spark.table(f"{database}.enc").collect())
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge={**FLAT_MERGE, "view": "enc_all"})

    done = merge_table(spark, database, "enc", policy, skip_trash=True, now=NOW)

    assert not done.failed and done.merged == ["dt=20190413", "dt=20190414"], done.lines
    merged = [f for f in (data_dir / "enc__merged").rglob("*.parquet") if not f.name.startswith(".")]
    footers = read_footers(spark, "parquet", [str(f) for f in merged], "merged")
    assert {(f.timestamp_type, f.decimal_legacy, f.codecs) for f in footers} == {("TIMESTAMP_MILLIS", False, ("ZSTD",))}
    assert sorted(tuple(r) for r in spark.table(f"{database}.enc_all").collect()) == rows


def test_flat_hours_merge_into_days_with_the_view_exact_throughout(spark, database, data_dir):
    root = data_dir / "flat"
    table = make_table(spark, database, "flat", root, partitions=FLAT, files=2, rows=10)
    rows = sorted(tuple(r) for r in spark.table(table).collect())
    before = (partitions(spark, database, "flat"), files_under(data_dir))
    dry = merge_table(spark, database, "flat", FLAT_POLICY, dry_run=True, now=NOW)
    assert (partitions(spark, database, "flat"), files_under(data_dir)) == before
    assert not spark.catalog.tableExists(f"{database}.flat__merged")
    text = "\n".join(dry.lines)
    assert "3 of 5 partition(s) in 2 period(s)" in text and "would merge" in text
    assert "MERGE dt=20190413 <- 2 partition(s), 4 files" in text and "MERGE dt=20190414 <- 1 partition(s)" in text
    assert "UNTIMED dt=latest" in text and "2024" not in text.split("\n", 1)[1]

    # a run with nothing old enough creates the merged table and the view: the source's rows
    merge_table(spark, database, "flat", FLAT_POLICY, "365000d", skip_trash=True, now=NOW)  # nothing old enough
    done = merged_while_read(spark, database, "flat", f"{database}.flat_all", FLAT_POLICY, rows)
    assert done.merged == ["dt=20190413", "dt=20190414"] and done.partitions == 3 and done.rows == 30
    assert done.files == 6 and done.bytes > 0
    assert partitions(spark, database, "flat") == ["dt=2024053123", "dt=latest"]
    assert partitions(spark, database, "flat__merged") == ["dt=20190413", "dt=20190414"]
    assert sorted(p.name for p in root.iterdir()) == ["dt=2024053123", "dt=latest"]
    merged = sorted(tuple(r) for r in spark.table(f"{database}.flat__merged").collect())  # id, v, n, dt__fine, dt
    assert [r[:4] for r in merged] == [r for r in rows if r[3].startswith("2019")]  # the hours kept
    assert all(r[4] == r[3][:8] for r in merged)
    assert [c.name for c in spark.table(f"{database}.flat_all").schema] == ["id", "v", "n", "dt"]
    assert hidden_dirs(data_dir) == [] and not any((data_dir / ".lakekeeper-flat" / "journal").iterdir())
    assert "merged table of" in (read_table(spark, database, "flat__merged").unmanaged_reason() or "")
    again = merge_table(spark, database, "flat", FLAT_POLICY, skip_trash=True, now=NOW)
    assert again.merged == [] and view_rows(spark, f"{database}.flat_all") == rows


def test_nested_hours_merge_into_months_with_the_view_exact_throughout(spark, database, data_dir):
    root = data_dir / "nested"
    table = make_table(spark, database, "nested", root, partitions=NESTED, files=2, rows=10)
    rows = sorted(tuple(r) for r in spark.table(table).collect())
    merge_table(spark, database, "nested", NESTED_POLICY, "365000d", skip_trash=True, now=NOW)  # creates the view
    done = merged_while_read(spark, database, "nested", f"{database}.nested_all", NESTED_POLICY, rows)
    assert done.merged == ["year=2019/month=04", "year=2019/month=05"] and done.partitions == 3
    assert partitions(spark, database, "nested") == ["year=2024/month=05/day=31/hour=23"]
    assert partitions(spark, database, "nested__merged") == ["year=2019/month=04", "year=2019/month=05"]
    merged = spark.table(f"{database}.nested__merged")
    assert [c.name for c in merged.schema] == ["id", "v", "n", "day", "hour", "year", "month"]
    in_view_order = sorted((*r[:3], r[5], r[6], r[3], r[4]) for r in merged.collect())
    assert in_view_order == [r for r in rows if r[3] == "2019"]
    assert hidden_dirs(data_dir) == []


def test_without_skip_trash_the_merged_fine_partitions_go_to_the_trash_byte_for_byte(spark, database, data_dir, trash):
    root = data_dir / "tr"
    make_table(spark, database, "tr", root, partitions=FLAT, files=2, rows=10)
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge={**FLAT_MERGE, "view": "tr_all"})
    merge_table(spark, database, "tr", policy, "365000d", now=NOW)  # creates the view, merges nothing
    view = f"{database}.tr_all"
    rows, figures = view_rows(spark, view), view_figures(spark, view)
    planned = ["dt=2019041316", "dt=2019041317", "dt=2019041400"]
    originals = {f"{p}/{f.name}": f.read_bytes() for p in planned for f in data_files(root / p)}
    assert len(originals) == 6

    done = merge_table(spark, database, "tr", policy, now=NOW)

    assert done.merged == ["dt=20190413", "dt=20190414"] and done.rows == 30
    assert all(f"{p}: dropped" in "\n".join(done.lines) for p in planned)
    moved = {p.name.split("-", 4)[-1]: p for p in (trash / str(root).lstrip("/")).iterdir()}  # .lk-held-<run>-<p>
    assert sorted(moved) == planned and all(p.name.startswith(".lk-held-") for p in moved.values())
    assert {f"{p}/{f.name}": f.read_bytes() for p in planned for f in data_files(moved[p])} == originals
    assert sorted(p.name for p in root.iterdir()) == ["dt=2024053123", "dt=latest"]
    assert partitions(spark, database, "tr") == ["dt=2024053123", "dt=latest"]
    assert view_rows(spark, view) == rows and view_figures(spark, view) == figures


def test_a_late_partition_of_a_merged_period_is_shown_once_and_left_alone(spark, database, data_dir):
    root = data_dir / "late"
    table = make_table(spark, database, "late", root, partitions=FLAT[:3], files=1, rows=5)
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge={**FLAT_MERGE, "view": "late_all"})
    merge_table(spark, database, "late", policy, skip_trash=True, now=NOW)
    spark.sql(f"INSERT INTO {table} PARTITION (dt='2019041318') VALUES (99, 'late', 1)")
    rows = view_rows(spark, f"{database}.late_all")
    assert (99, "late", 1, "2019041318") in rows and len(rows) == 16
    again = merge_table(spark, database, "late", policy, skip_trash=True, now=NOW)
    assert again.merged == [] and "KEEP dt=20190413 <- 1 partition(s)" in "\n".join(again.lines)
    assert "late: the merged table already holds this period" in "\n".join(again.lines)
    assert view_rows(spark, f"{database}.late_all") == rows and partitions(spark, database, "late") == ["dt=2019041318"]


def test_a_file_written_into_a_fine_partition_during_the_merge_stays_visible(spark, database, data_dir, monkeypatch):
    """A writer adds a file to a planned fine partition while its period is merged: only the planned files move
    away; the partition stays registered with the new file, shown once by the view."""
    root = data_dir / "wm"
    make_table(spark, database, "wm", root, partitions=FLAT[:3], files=1, rows=5)
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge={**FLAT_MERGE, "view": "wm_all"})
    merge_table(spark, database, "wm", policy, "365000d", skip_trash=True, now=NOW)  # creates the view
    rows = view_rows(spark, f"{database}.wm_all")

    def write() -> None:  # the period copied, registered and switched to: now write
        write_files(spark, f"file:{root}/dt=2019041316", 1000, 3, 1, "parquet")

    merge_paused_at("switched", write, spark, database, "wm", policy, monkeypatch, data_dir.parent)
    added = [(i, f"v{i}", i % 7, "2019041316") for i in range(1000, 1003)]
    assert view_rows(spark, f"{database}.wm_all") == sorted(rows + added)
    assert partitions(spark, database, "wm") == ["dt=2019041316"] and len(data_files(root / "dt=2019041316")) == 1
    assert partitions(spark, database, "wm__merged") == ["dt=20190413", "dt=20190414"]


def test_a_fine_partition_overwritten_after_the_switch_undoes_the_period(spark, database, data_dir, monkeypatch):
    """An `INSERT OVERWRITE` of a planned fine partition after the switch, before its files are
    moved away: the merged copy holds the partition's old rows, so finishing would show them again beside the new
    ones. The period is rolled back instead; the view shows exactly what the overwrite left, the next period merges."""
    root = data_dir / "wo"
    table = make_table(spark, database, "wo", root, partitions=FLAT[:3], files=1, rows=5)
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge={**FLAT_MERGE, "view": "wo_all"})
    merge_table(spark, database, "wo", policy, "365000d", skip_trash=True, now=NOW)  # creates the view
    rows = view_rows(spark, f"{database}.wo_all")

    def overwrite() -> None:  # switched: now overwrite
        spark.sql(f"INSERT OVERWRITE TABLE {table} PARTITION (dt='2019041316') VALUES (700, 'new', 0), (701, 'new', 1)")

    outcome = merge_paused_at("switched", overwrite, spark, database, "wo", policy, monkeypatch, data_dir.parent)

    assert outcome.merged == ["dt=20190414"] and "an overwrite" in outcome.failed["dt=20190413"], outcome.lines
    overwritten = [(700, "new", 0, "2019041316"), (701, "new", 1, "2019041316")]
    assert view_rows(spark, f"{database}.wo_all") == sorted([r for r in rows if r[3] != "2019041316"] + overwritten)
    assert partitions(spark, database, "wo__merged") == ["dt=20190414"]
    assert hidden_dirs(data_dir) == []


def test_a_file_written_while_a_fine_partition_is_cleared_stays_visible(spark, database, data_dir, monkeypatch):
    """A file lands in a planned fine partition after it was listed for clearing, before its
    planned files move away. Moved one by one, the directory removed only when empty: the file stays, registered,
    shown once (it went with the whole directory, for good with --skip-trash)."""
    root = data_dir / "wl"
    make_table(spark, database, "wl", root, partitions=FLAT[:3], files=1, rows=5)
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge={**FLAT_MERGE, "view": "wl_all"})
    merge_table(spark, database, "wl", policy, "365000d", skip_trash=True, now=NOW)  # creates the view
    rows = view_rows(spark, f"{database}.wl_all")

    def write() -> None:  # the first fine partition listed: now write into it
        write_files(spark, f"file:{root}/dt=2019041316", 1000, 3, 1, "parquet")

    merge_paused_at("clearing", write, spark, database, "wl", policy, monkeypatch, data_dir.parent)
    added = [(i, f"v{i}", i % 7, "2019041316") for i in range(1000, 1003)]
    assert view_rows(spark, f"{database}.wl_all") == sorted(rows + added)
    assert partitions(spark, database, "wl") == ["dt=2019041316"] and len(data_files(root / "dt=2019041316")) == 1
    assert partitions(spark, database, "wl__merged") == ["dt=20190413", "dt=20190414"]


@pytest.mark.parametrize("overwritten", ["the next", "both"])
def test_a_fine_partition_overwritten_after_another_was_taken_aside_undoes_the_period(
    spark, database, data_dir, monkeypatch, overwritten
):
    """An `INSERT OVERWRITE` of the second planned fine partition lands after the first
    one's files were taken aside. The period is rolled back: the view shows exactly what the overwrite left, never the
    merged copy's old rows beside it. The first gets its files back, byte for byte; overwritten too (`both`: an
    overwrite and an append cannot be told apart there), it keeps the overwrite's rows and its taken files wait
    aside, named, rather than show again."""
    root = data_dir / "wt"
    table = make_table(spark, database, "wt", root, partitions=FLAT[:3], files=2, rows=5)
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge={**FLAT_MERGE, "view": "wt_all"})
    merge_table(spark, database, "wt", policy, "365000d", skip_trash=True, now=NOW)  # creates the view
    rows = view_rows(spark, f"{database}.wt_all")
    first = {f.name: f.read_bytes() for f in data_files(root / "dt=2019041316")}
    hours = ["2019041317"] if overwritten == "the next" else ["2019041316", "2019041317"]

    def overwrite() -> None:  # dt=2019041316's files taken aside, dt=2019041317 not yet checked
        assert [p.name for p in root.glob(".lk-held-*")] and not data_files(root / "dt=2019041316")
        for hour in hours:
            spark.sql(f"INSERT OVERWRITE TABLE {table} PARTITION (dt='{hour}') VALUES (700, 'new', 0)")

    outcome = merge_paused_at("held", overwrite, spark, database, "wt", policy, monkeypatch, data_dir.parent)

    assert outcome.merged == ["dt=20190414"] and "dt=2019041317's file" in outcome.failed["dt=20190413"], outcome
    expected = sorted([r for r in rows if r[3] not in hours] + [(700, "new", 0, hour) for hour in hours])
    assert view_rows(spark, f"{database}.wt_all") == expected
    assert partitions(spark, database, "wt") == ["dt=2019041316", "dt=2019041317"]
    assert partitions(spark, database, "wt__merged") == ["dt=20190414"]
    if overwritten == "the next":
        assert {f.name: f.read_bytes() for f in data_files(root / "dt=2019041316")} == first
        assert hidden_dirs(data_dir) == []
    else:
        (aside,) = root.glob(".lk-held-*-dt=2019041316")
        assert {f.name: f.read_bytes() for f in data_files(aside)} == first
        assert f"left aside, compare them with the partitions: file:{aside} (" in outcome.failed["dt=20190413"]


def test_a_fine_partition_changed_after_the_copy_undoes_the_period_before_the_switch(
    spark, database, data_dir, monkeypatch
):
    """A writer adds a file to a planned fine partition after the copy, before the switch: the period is rolled back
    (the switch would hide the new rows); the view shows every row once throughout, the next period still merges."""
    root = data_dir / "wc"
    make_table(spark, database, "wc", root, partitions=FLAT[:3], files=1, rows=5)
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge={**FLAT_MERGE, "view": "wc_all"})
    merge_table(spark, database, "wc", policy, "365000d", skip_trash=True, now=NOW)  # creates the view
    rows = view_rows(spark, f"{database}.wc_all")

    def write() -> None:  # pending: copied, not switched
        write_files(spark, f"file:{root}/dt=2019041316", 1000, 3, 1, "parquet")

    outcome = merge_paused_at("pending", write, spark, database, "wc", policy, monkeypatch, data_dir.parent)
    assert outcome.merged == ["dt=20190414"]
    assert any("dt=20190413: not merged: the files of dt=2019041316 changed" in line for line in outcome.lines)
    assert list(outcome.failed) == ["dt=20190413"] and outcome.failed["dt=20190413"].startswith("the files of")
    added = [(i, f"v{i}", i % 7, "2019041316") for i in range(1000, 1003)]
    assert view_rows(spark, f"{database}.wc_all") == sorted(rows + added)
    assert partitions(spark, database, "wc") == ["dt=2019041316", "dt=2019041317"]
    assert partitions(spark, database, "wc__merged") == ["dt=20190414"]
    assert len(data_files(root / "dt=2019041316")) == 2 and hidden_dirs(data_dir) == []


def test_an_unreadable_planned_file_fails_the_merge_whatever_the_session_skips(spark, database, data_dir):
    """The caller's session skips corrupt files (a common cluster default): the merge still reads every planned file,
    so one it cannot read stops it before the switch instead of being moved away uncopied."""
    root = data_dir / "wx"
    make_table(spark, database, "wx", root, partitions=FLAT[:2], files=1, rows=5)
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge={**FLAT_MERGE, "view": "wx_all"})
    merge_table(spark, database, "wx", policy, "365000d", skip_trash=True, now=NOW)  # creates the view
    (root / "dt=2019041316" / "part-99999.parquet").write_bytes(b"not parquet at all")
    before = files_under(root)
    spark.conf.set("spark.sql.files.ignoreCorruptFiles", "true")
    try:
        done = merge_table(spark, database, "wx", policy, skip_trash=True, now=NOW)
    finally:
        spark.conf.unset("spark.sql.files.ignoreCorruptFiles")
    assert done.merged == [] and "part-99999.parquet" in done.failed["dt=20190413"], done.lines
    assert files_under(root) == before and partitions(spark, database, "wx") == ["dt=2019041316", "dt=2019041317"]
    assert partitions(spark, database, "wx__merged") == []


BAD = [
    ({"merge": FLAT_MERGE}, "partition_time"),
    ({"merge": {**FLAT_MERGE, "into": None}}, "merge.into"),
    ({"merge": {**FLAT_MERGE, "into": "%Y%m%d%H"}}, "merge.into"),  # not coarser
    ({"merge": {**FLAT_MERGE, "into": ["dt"]}}, "merge.into"),  # every partition column
    ({"merge": {**FLAT_MERGE, "into": "%d"}}, "merge.into"),  # no year
    ({"merge": {**FLAT_MERGE, "view": None}}, "merge.view"),
    ({"merge": {**FLAT_MERGE, "view": "taken"}}, "merge.view"),  # a table, not our view
    ({"merge": {**FLAT_MERGE, "older_than": None}}, "merge.older_than"),
]


def test_bad_input_is_refused_naming_the_key_and_nothing_changes(spark, database, data_dir):
    table = make_table(spark, database, "bad", data_dir / "bad", partitions=FLAT[:3], files=1, rows=5)
    spark.sql(f"CREATE TABLE {database}.taken (x INT)")  # a table named like the view: never replaced
    before = (partitions(spark, database, "bad"), files_under(data_dir), spark.catalog.listTables(database))
    for settings, key in BAD:
        policy = TablePolicies(
            **({"partition_time": {"dt": "%Y%m%d%H"}} if key != "partition_time" else {}), **settings
        )
        with pytest.raises(ConfigError, match=f"table_overrides.{table}.{key}"):
            merge_table(spark, database, "bad", policy, skip_trash=True, now=NOW)
    assert (partitions(spark, database, "bad"), files_under(data_dir), spark.catalog.listTables(database)) == before


def test_a_merged_table_whose_partitions_the_metastore_discovers_is_refused(spark, database, data_dir):
    """Hive's partition discovery on the merged table would drop a merged partition while its directory is moved
    away, as on a source: refused before any step, naming the merged table and the statement that sets it aside."""
    make_table(spark, database, "dis", data_dir / "dis", partitions=FLAT[:2], files=1, rows=5)
    merge_table(spark, database, "dis", FLAT_POLICY, skip_trash=True, now=NOW)
    (merged,) = [t.name for t in spark.catalog.listTables(database) if t.name not in ("dis", "flat_all")]
    spark.sql(f"ALTER TABLE {database}.{merged} SET TBLPROPERTIES ('discover.partitions'='true')")
    write_files(spark, f"file:{data_dir / 'dis' / 'dt=2019041400'}", 100, 5, 1, "parquet")
    spark.sql(f"ALTER TABLE {database}.dis ADD PARTITION (dt='2019041400')")
    before = (partitions(spark, database, "dis"), partitions(spark, database, merged), files_under(data_dir))

    with pytest.raises(OperationError, match=f"{database}.{merged}, the merged table of {database}.dis: the metastore"):
        merge_table(spark, database, "dis", FLAT_POLICY, skip_trash=True, now=NOW)

    assert (partitions(spark, database, "dis"), partitions(spark, database, merged), files_under(data_dir)) == before


def test_a_time_column_that_is_not_a_string_is_refused(spark, database, data_dir):
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.num (id BIGINT) PARTITIONED BY (dt INT) STORED AS PARQUET "
        f"LOCATION '{(data_dir / 'num').as_uri()}'"
    )
    spark.sql(f"INSERT INTO {database}.num PARTITION (dt=2019041316) VALUES (1)")
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge=FLAT_MERGE)
    with pytest.raises(ConfigError, match=rf"table_overrides.{database}.num.partition_time: .*STRING.*dt \(int\)"):
        merge_table(spark, database, "num", policy, skip_trash=True, now=NOW)
    assert partitions(spark, database, "num") == ["dt=2019041316"] and len(spark.catalog.listTables(database)) == 1


def merge_killed_at(point: str, spark, metastore, database: str, data_dir: Path, tmp_path: Path, name: str):
    """A FLAT table `name` whose merge (the 2019 periods, `--skip-trash`, no pause) was killed at `point`: the table,
    its root, its rows before and its policy."""
    root = data_dir / name
    table = make_table(spark, database, name, root, partitions=FLAT, files=2, rows=10)
    rows = sorted(tuple(r) for r in spark.table(table).collect())
    policy = {"partition_time": {"dt": "%Y%m%d%H"}, "merge": {**FLAT_MERGE, "view": f"{name}_all", "settle_seconds": 0}}
    policy["merge"]["older_than"] = "1000d"  # the 2019 periods, now or at NOW
    args, config = ["merge", "--table", table, "--skip-trash"], {"table_overrides": {table: policy}}
    crashed = run_cli(args, tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": f"kill@{point}"}, config=config)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    return table, root, rows, policy


KILL_POINTS = ["written", "pending", "registered", "record_written:switched", "switched", "held", "dropped", "cleared"]


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("point", KILL_POINTS)
def test_a_merge_killed_at_each_journal_step_is_recovered(spark, metastore, database, data_dir, tmp_path, point):
    """The first period's merge is killed at `point`; `recover` rolls it back before the switch and forward from
    it: the view shows every row once, no hidden directory is left, and a new run merges what is left."""
    table, root, rows, policy = merge_killed_at(point, spark, metastore, database, data_dir, tmp_path, "km")
    messages = recover(spark, [(database, "km")])
    forward = point in ("switched", "held", "dropped", "cleared")
    assert ("rolled forward" if forward else "rolled back") in messages[0], messages
    assert view_rows(spark, f"{database}.km_all") == rows
    assert hidden_dirs(data_dir) == [] and not any((data_dir / ".lakekeeper-km" / "journal").iterdir())
    merged = ["dt=20190413"] if forward else []
    assert partitions(spark, database, "km__merged") == merged
    done = merge_table(spark, database, "km", TablePolicies(**policy), skip_trash=True, now=NOW)
    assert done.merged == [p for p in ["dt=20190413", "dt=20190414"] if p not in merged]
    assert view_rows(spark, f"{database}.km_all") == rows
    assert partitions(spark, database, "km") == ["dt=2024053123", "dt=latest"]


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize("point", ["switched", "held"])
def test_a_merge_killed_after_the_switch_then_overwritten_is_rolled_back(
    spark, metastore, database, data_dir, tmp_path, point
):
    """After a crash: killed once switched (or once the first fine partition's files were taken
    aside), a planned fine partition is overwritten before `recover`, which rolls the period back (the files taken
    given back) instead of showing the old rows again."""
    table, root, rows, policy = merge_killed_at(point, spark, metastore, database, data_dir, tmp_path, "ko")
    spark.sql(f"INSERT OVERWRITE TABLE {table} PARTITION (dt='2019041317') VALUES (800, 'new', 0)")

    first, _ = recover(spark, [(database, "ko")])  # the second period had not started: rolled back too

    assert "dt=20190413" in first and "an overwrite" in first and "rolled back" in first, first
    expected = sorted([r for r in rows if r[3] != "2019041317"] + [(800, "new", 0, "2019041317")])
    assert view_rows(spark, f"{database}.ko_all") == expected
    assert partitions(spark, database, "ko__merged") == []
    assert hidden_dirs(data_dir) == [] and not any((data_dir / ".lakekeeper-ko" / "journal").iterdir())


@pytest.mark.crash
@pytest.mark.slow
def test_a_merge_killed_as_it_undoes_a_period_is_undone_by_recover(spark, metastore, database, data_dir, tmp_path):
    """The run found a fine partition overwritten after another's files were taken aside, and
    journaled that it undoes the period (`undoing`); killed right there, before any file went back. `recover` gives
    the files back and rolls the period back, never taking them again: the view shows what the overwrite left."""
    root = data_dir / "ku"
    table = make_table(spark, database, "ku", root, partitions=FLAT, files=2, rows=10)
    rows = sorted(tuple(r) for r in spark.table(table).collect())
    first = {f.name: f.read_bytes() for f in data_files(root / "dt=2019041316")}
    policy = {"partition_time": {"dt": "%Y%m%d%H"}, "merge": {**FLAT_MERGE, "view": "ku_all", "settle_seconds": 0}}
    policy["merge"]["older_than"] = "1000d"
    release = tmp_path / "release"
    fault = {"LAKEKEEPER_FAULT": f"pause@held:{release};kill@undoing"}
    args = ["merge", "--table", table, "--skip-trash"]
    running = run_cli(args, tmp_path, metastore.uri, fault, wait=False, config={"table_overrides": {table: policy}})
    for line in running.stderr:
        if "pausing at held" in line:  # dt=2019041316's files taken aside: overwrite the next one
            spark.sql(f"INSERT OVERWRITE TABLE {table} PARTITION (dt='2019041317') VALUES (800, 'new', 0)")
            release.touch()
            break
    running.communicate(timeout=300)
    assert running.returncode == -signal.SIGKILL
    assert list(root.glob(".lk-held-*-dt=2019041316"))  # killed before giving back

    first_message, _ = recover(spark, [(database, "ku")])

    assert "dt=2019041317's file" in first_message and "rolled back" in first_message, first_message
    expected = sorted([r for r in rows if r[3] != "2019041317"] + [(800, "new", 0, "2019041317")])
    assert view_rows(spark, f"{database}.ku_all") == expected
    assert {f.name: f.read_bytes() for f in data_files(root / "dt=2019041316")} == first
    assert partitions(spark, database, "ku__merged") == [] and hidden_dirs(data_dir) == []


@pytest.mark.crash
@pytest.mark.slow
def test_a_journal_of_a_release_before_the_taking_aside_finishes_its_clearing_in_place(
    spark, metastore, database, data_dir, tmp_path
):
    """A merge of the previous release, killed while clearing, had moved the first fine partition's files away for
    good (`clearing` journaled, no `hold`): `recover` finishes that clearing file by file and rolls the period
    forward, every row shown once. Taken for an overwrite, the period would be rolled back and its copy deleted."""
    table, root, rows, policy = merge_killed_at("clearing", spark, metastore, database, data_dir, tmp_path, "kl")
    (plan,) = (data_dir / ".lakekeeper-kl" / "journal").glob("*/00000.json")
    record = json.loads(plan.read_text())
    for unit in record["plan"]["units"]:  # as the previous release journaled it, clearing begun
        del unit["details"]["hold"]
        unit["details"] |= {"recheck": True, "clearing": True}
    plan.write_text(json.dumps(record))
    (plan.parent / ".00000.json.crc").unlink(missing_ok=True)
    for file in data_files(root / "dt=2019041316"):  # what that release had already moved away (--skip-trash)
        file.unlink()
        (file.parent / f".{file.name}.crc").unlink()

    messages = recover(spark, [(database, "kl")])

    assert "dt=20190413" in messages[0] and "merged (rolled forward)" in messages[0], messages
    assert view_rows(spark, f"{database}.kl_all") == rows
    assert partitions(spark, database, "kl__merged") == ["dt=20190413"]
    assert partitions(spark, database, "kl") == ["dt=2019041400", "dt=2024053123", "dt=latest"]
    assert hidden_dirs(data_dir) == []


@pytest.mark.slow
@pytest.mark.crash
def test_recover_never_deletes_a_merged_partition_directory_this_run_did_not_write(
    spark, metastore, database, data_dir, tmp_path
):
    """Killed while pending; the copy is gone and another directory stands where the merged partition goes:
    recover undoes the period and leaves that directory, its file intact, saying so."""
    table, root, rows, policy = merge_killed_at("pending", spark, metastore, database, data_dir, tmp_path, "kf")
    (incoming,) = [p for p in (data_dir / "kf__merged").iterdir() if p.name.startswith(".lk-")]
    shutil.rmtree(incoming)
    foreign = data_dir / "kf__merged" / "dt=20190413" / "part-foreign.parquet"
    foreign.parent.mkdir()
    foreign.write_bytes(b"another writer's file")
    messages = recover(spark, [(database, "kf")])
    assert foreign.read_bytes() == b"another writer's file"
    assert "rolled back" in messages[0] and "left in place: it is not the copy this run wrote" in messages[0]
    assert view_rows(spark, f"{database}.kf_all") == rows and partitions(spark, database, "kf__merged") == []


def test_the_switched_view_hides_exactly_the_planned_fine_partitions_whatever_their_values(spark):
    """Review M7: the planned partitions are named as value tuples; a partition with a NULL value and a `/` in
    another (joined by concat_ws, which skips NULLs, it read as a planned one) stays visible, once."""
    clock = PartitionClock.of({"y": "%Y", "m": "%m", "h": "%d%H"}, "d.t")
    columns = (Column("id", "int"), Column("y", "string"), Column("m", "string"), Column("h", "string"))
    info = TableInfo("d", "t", "EXTERNAL", "hive", None, None, None, "file:/w/t", columns, ("y", "m", "h"))
    schema = "id INT, y STRING, m STRING, h STRING"
    source = [
        (1, "2024", "05", "0100"),
        (2, "2024", None, "05/0100"),
        (3, "2024", "05", "0101"),
        (4, "2023", "05", "0100"),
    ]
    view = UnionView("m7_source", "m7_merged", merge_layout(info, clock, ["y"]))
    text = view.switched({"y": "2024"}, [{"y": "2024", "m": "05", "h": "0100"}])

    try:
        spark.createDataFrame(source, schema).createOrReplaceTempView("m7_source")
        spark.createDataFrame([(1, "2024", "05", "0100")], schema).createOrReplaceTempView("m7_merged")
        assert sorted(row.id for row in spark.sql(text).collect()) == [1, 2, 3, 4]
    finally:  # the session's temporary views are listed in every database: another test's SHOW TABLES sees them
        spark.catalog.dropTempView("m7_source")
        spark.catalog.dropTempView("m7_merged")


def test_a_period_whose_fine_partition_holds_another_tables_data_is_left_alone(spark, database, data_dir):
    """Another table over a fine partition's directory: its period is kept with the reason (clearing it took that
    table's data), the next period merges."""
    root = data_dir / "om"
    table = make_table(spark, database, "om", root, partitions=FLAT[:3], files=1, rows=5)
    over = f"{database}.over"
    spark.sql(
        f"CREATE EXTERNAL TABLE {over} (id BIGINT, v STRING, n INT) STORED AS PARQUET "
        f"LOCATION 'file:{root}/dt=2019041317'"
    )
    theirs = rows_of(spark, over)
    policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge={**FLAT_MERGE, "view": "om_all"})
    done = merge_table(spark, database, "om", policy, skip_trash=True, now=NOW)
    assert done.merged == ["dt=20190414"] and done.failed == {}
    assert any(
        "dt=20190413" in line and f"another table's data would go with dt=2019041317: {over} uses" in line
        for line in done.lines
    )
    assert partitions(spark, database, "om") == ["dt=2019041316", "dt=2019041317"]
    assert rows_of(spark, over) == theirs and len(theirs) == 5
    assert len(view_rows(spark, f"{database}.om_all")) == 15 and len(rows_of(spark, table)) == 10


def test_two_sources_of_one_name_under_one_parent_never_share_a_merged_directory(spark, database, data_dir):
    """`a.ev` and `b.ev` under one parent directory: the first merge creates `<parent>/ev__merged`; the second is
    refused (dry run and run) instead of adopting it, and the first's merged data stays as it was."""
    other_db = f"{database}_b"
    spark.sql(f"CREATE DATABASE `{other_db}`")
    try:
        make_table(spark, database, "ev", data_dir / "ev_a", partitions=FLAT[:3], files=1, rows=5)
        second = make_table(spark, other_db, "ev", data_dir / "ev_b", partitions=FLAT[:3], files=1, rows=5)
        policy = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge={**FLAT_MERGE, "view": "ev_all"})
        assert merge_table(spark, database, "ev", policy, skip_trash=True, now=NOW).merged == [
            "dt=20190413",
            "dt=20190414",
        ]
        merged = sorted(str(p.relative_to(data_dir)) for p in (data_dir / "ev__merged").rglob("*"))
        view = view_rows(spark, f"{database}.ev_all")
        dry = merge_table(spark, other_db, "ev", policy, dry_run=True, skip_trash=True, now=NOW)
        refusal = f"{second}: the merged table {other_db}.ev__merged would be created at file:{data_dir}/ev__merged"
        assert any(line.startswith(f"  REFUSED: {refusal}") for line in dry.lines)
        with pytest.raises(OperationError, match=re.escape(f"{refusal}, which exists and is not empty")):
            merge_table(spark, other_db, "ev", policy, skip_trash=True, now=NOW)
        assert not spark.catalog.tableExists(f"{other_db}.ev__merged")
        assert partitions(spark, other_db, "ev") == [f"dt={p['dt']}" for p in FLAT[:3]]
        assert sorted(str(p.relative_to(data_dir)) for p in (data_dir / "ev__merged").rglob("*")) == merged
        assert view_rows(spark, f"{database}.ev_all") == view
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS `{other_db}` CASCADE")
