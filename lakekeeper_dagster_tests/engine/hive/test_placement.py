"""Where the data may live: shared and nested locations, filesystems without atomic rename or apart from the journal,
and writers the partition-level swap guards cannot see (staging at the table root, in-progress files)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from lakekeeper_dagster.engine.errors import OperationError
from lakekeeper_dagster.engine.hive.backup import set_locations
from lakekeeper_dagster.engine.hive.model import TableInfo, Unit
from lakekeeper_dagster.engine.hive.placement import ACCEPT_SETTING, Placed, filesystem_refusal, sharing_refusal
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.protocol import writers
from lakekeeper_dagster.engine.settings import EngineSettings
from lakekeeper_dagster_tests.tables import DATES, OPTIONS, data_files, hidden_dirs, make_table, rows_of, write_files

WEEK = 7 * 24 * 3600


def _info(location: str) -> TableInfo:
    return TableInfo("db", "t", "EXTERNAL", "hive", None, None, None, location, (), ("date",))


def test_filesystem_rules_without_spark():
    info = _info("hdfs://nn:8020/w/t")
    unit = Unit({"date": "1"}, "hdfs://nn:8020/w/t/date=1")
    assert filesystem_refusal(info, [unit]) is None
    s3 = filesystem_refusal(_info("s3a://bucket/w/t"), [])
    assert "'s3a'" in s3 and ACCEPT_SETTING in s3 and "db.t" in s3
    assert filesystem_refusal(_info("s3a://bucket/w/t"), [], accepted=["S3A"]) is None
    for scheme in ("s3", "s3n", "abfs", "abfss", "wasb", "wasbs", "gs", "oss", "cos"):
        assert f"'{scheme}'" in filesystem_refusal(_info(f"{scheme}://b/w/t"), [])
    elsewhere = filesystem_refusal(info, [Unit({"date": "2"}, "hdfs://other:8020/w/t/date=2")])
    assert "db.t partition date=2" in elsewhere and "another filesystem" in elsewhere
    assert "hdfs://other:8020" in elsewhere


def test_sharing_rules_without_spark():
    info = _info("file:/w/t")
    units = [Unit({"date": "1"}, "file:/w/t/date=1")]
    assert sharing_refusal(info, units, [Placed("db.u", None, "file:/w/u"), Placed("db.v", None, "file:/w/t2")]) is None
    assert "db.u" in sharing_refusal(info, units, [Placed("db.u", None, "file:/w/t/")])
    assert "db.u partition x=1" in sharing_refusal(info, units, [Placed("db.u", "x=1", "file:/w/t/date=1")])
    nested = sharing_refusal(info, units, [Placed("db.u", None, "file:/w/t/date=1/n")])
    assert "db.u lives inside db.t partition date=1" in nested
    outer = sharing_refusal(info, units, [Placed("db.o", "y=2", "file:/w")])
    assert "lives inside db.o partition y=2" in outer
    assert sharing_refusal(info, units, [Placed("db.o", None, "file:/w")]) is None  # a table root above: not a unit


def _unchanged(spark, table: str, directories: list[Path], before: list, counts: list[int]) -> None:
    """Same rows, same number of data files in each directory, no lakekeeper directory left beside them."""
    assert rows_of(spark, table) == before
    assert [len(data_files(d)) for d in directories] == counts
    assert all(not hidden_dirs(d.parent) for d in directories)


def test_a_second_table_over_the_same_location_is_refused(spark, database, data_dir):
    table = make_table(spark, database, "ev", data_dir, partitions=DATES, files=3, rows=20)
    spark.sql(
        f"CREATE EXTERNAL TABLE `{database}`.`wide` (id BIGINT, v STRING, n INT, extra STRING) "
        f"PARTITIONED BY (`date` STRING) STORED AS PARQUET LOCATION '{data_dir.as_uri()}'"
    )
    before = rows_of(spark, table)
    partitions = [data_dir / f"date={d['date']}" for d in DATES]

    with pytest.raises(OperationError) as refused:
        compact_table(spark, database, "ev", OPTIONS)
    assert f"{database}.wide" in str(refused.value) and "shares its location" in str(refused.value)
    with pytest.raises(OperationError) as refused:
        compact_table(spark, database, "wide", OPTIONS)
    assert f"{database}.ev" in str(refused.value)
    _unchanged(spark, table, partitions, before, [3, 3])
    assert not (data_dir.parent / f".lakekeeper-{data_dir.name}").exists()  # no lease, no journal


def test_a_partition_shared_with_another_table_is_refused(spark, database, data_dir, tmp_path):
    """Another table's partition at one of this table's partitions; that table is rooted above this one (a table
    whose root is unrelated to this one's is not listed partition by partition: see `other_tables`)."""
    table = make_table(spark, database, "ev", data_dir, partitions=DATES, files=3, rows=20)
    other = make_table(spark, database, "other", tmp_path, partitions=[{"date": "x"}], files=1, rows=5)
    spark.sql(f"ALTER TABLE {other} PARTITION (`date`='x') SET LOCATION '{data_dir.as_uri()}/date=2024-01-02'")
    before = rows_of(spark, table)
    assert len(rows_of(spark, other)) == 20  # it reads that partition now

    with pytest.raises(OperationError) as refused:
        compact_table(spark, database, "ev", OPTIONS)
    assert f"{other} partition date=x" in str(refused.value) and "date=2024-01-02" in str(refused.value)
    _unchanged(spark, table, [data_dir / f"date={d['date']}" for d in DATES], before, [3, 3])


def test_a_table_inside_another_tables_partition_is_refused_from_either_side(spark, database, data_dir):
    table = make_table(spark, database, "ev", data_dir, partitions=DATES, files=3, rows=20)
    nested = f"file:{data_dir}/date=2024-01-01/nested"  # not Path.as_uri(): it would write `=` as a literal %3D
    inner = f"{database}.inner"
    spark.sql(f"CREATE EXTERNAL TABLE {inner} (id BIGINT, v STRING, n INT) STORED AS PARQUET LOCATION '{nested}'")
    write_files(spark, nested, 0, 10, 3, "parquet")
    before, inner_before = rows_of(spark, table), rows_of(spark, inner)

    with pytest.raises(OperationError) as refused:
        compact_table(spark, database, "ev", OPTIONS)
    assert f"{inner} lives inside {table} partition date=2024-01-01" in str(refused.value)
    with pytest.raises(OperationError) as refused:
        compact_table(spark, database, "inner", OPTIONS)
    assert f"{inner} lives inside {table} partition date=2024-01-01" in str(refused.value)
    assert rows_of(spark, inner) == inner_before and len(data_files(data_dir / "date=2024-01-01" / "nested")) == 3
    _unchanged(spark, table, [data_dir / "date=2024-01-02"], before, [3])


def test_a_partition_on_another_filesystem_than_the_journal_is_refused(spark, database, data_dir):
    table = make_table(spark, database, "ev", data_dir, partitions=DATES, files=3, rows=20)
    before = rows_of(spark, table)
    moved = data_dir / "date=2024-01-02"
    set_locations(spark, database, "ev", [({"date": "2024-01-02"}, "hdfs://elsewhere:8020/data/date=2024-01-02")])

    with pytest.raises(OperationError) as refused:
        compact_table(spark, database, "ev", OPTIONS)
    message = str(refused.value)
    assert f"{table} partition date=2024-01-02" in message and "another filesystem" in message
    assert "hdfs://elsewhere:8020" in message and "journal" in message
    set_locations(spark, database, "ev", [({"date": "2024-01-02"}, f"file:{moved}")])
    _unchanged(spark, table, [data_dir / f"date={d['date']}" for d in DATES], before, [3, 3])


def test_filesystem_without_atomic_rename_is_refused_unless_accepted(spark, database, data_dir):
    """The metastore stores an s3a location for a partition (set through the external catalog, as backups are);
    this JVM has no S3A filesystem, so with the setting the run goes no further than the next rule."""
    table = make_table(spark, database, "ev", data_dir, partitions=DATES, files=3, rows=20)
    before = rows_of(spark, table)
    set_locations(spark, database, "ev", [({"date": "2024-01-02"}, "s3a://bucket/warehouse/ev/date=2024-01-02")])

    with pytest.raises(OperationError) as refused:
        compact_table(spark, database, "ev", OPTIONS)
    message = str(refused.value)
    assert f"{table} partition date=2024-01-02" in message and "'s3a'" in message and ACCEPT_SETTING in message
    accepted = EngineSettings(non_atomic_rename_schemes_accepted=["s3a"]).compaction_options(database, "ev", owner="t")
    with pytest.raises(OperationError) as later:  # past that refusal: the partition is not on the journal's filesystem
        compact_table(spark, database, "ev", accepted)
    assert ACCEPT_SETTING not in str(later.value) and "another filesystem" in str(later.value)
    set_locations(spark, database, "ev", [({"date": "2024-01-02"}, f"file:{data_dir}/date=2024-01-02")])
    _unchanged(spark, table, [data_dir / f"date={d['date']}" for d in DATES], before, [3, 3])


def _age(paths: list[Path], age_seconds: float) -> None:
    when = time.time() - age_seconds
    for path in paths:
        os.utime(path, (when, when))


@pytest.mark.parametrize(
    "staging", [".spark-staging-4f1c2a", ".hive-staging_hive_2024-01-03_10-00-00_123_1-1", "_impala_insert_staging"]
)
def test_a_live_writer_staging_at_the_table_root_is_waited_for(spark, database, data_dir, monkeypatch, staging):
    table = make_table(spark, database, "ev", data_dir, partitions=DATES, files=3, rows=20)
    before = rows_of(spark, table)
    trace = data_dir / staging / "date=2024-01-03" / "part-00000.parquet"
    trace.parent.mkdir(parents=True)
    trace.write_bytes(b"being written")  # changed just now: a live writer
    monkeypatch.setattr(writers, "WRITER_WAIT_SECONDS", 1.0)

    results = compact_table(spark, database, "ev", OPTIONS)

    assert [r.status for r in results] == ["failed", "failed"]
    assert all("a write into the table is in progress" in r.reason and staging in r.reason for r in results)
    _unchanged(spark, table, [data_dir / f"date={d['date']}" for d in DATES], before, [3, 3])
    assert trace.read_bytes() == b"being written"


def test_a_stale_staging_leftover_at_the_table_root_is_named_and_left_alone(spark, database, data_dir, caplog):
    table = make_table(spark, database, "ev", data_dir, partitions=DATES, files=3, rows=20)
    before = rows_of(spark, table)
    staging = data_dir / ".spark-staging-0ld"
    trace = staging / "date=2024-01-03" / "part-00000.parquet"
    trace.parent.mkdir(parents=True)
    trace.write_bytes(b"left behind")
    _age([trace, trace.parent, staging], WEEK)

    with caplog.at_level(logging.WARNING, logger=writers.__name__):
        results = compact_table(spark, database, "ev", OPTIONS)

    assert [r.status for r in results] == ["compacted", "compacted"]
    assert rows_of(spark, table) == before
    warnings = [r.getMessage() for r in caplog.records if r.name == writers.__name__]
    assert warnings and all("stale leftover" in w and str(staging.name) in w and "168.0 h ago" in w for w in warnings)
    assert "Remove it" in warnings[0]
    assert trace.read_bytes() == b"left behind"  # never touched


@pytest.mark.parametrize("age, expected", [(0, "a write into the table is in progress"), (WEEK, "168.0 h ago")])
def test_an_in_progress_file_in_a_partition_fails_that_partition(spark, database, data_dir, monkeypatch, age, expected):
    table = make_table(spark, database, "ev", data_dir, partitions=DATES, files=3, rows=20)
    before = rows_of(spark, table)
    trace = data_dir / "date=2024-01-01" / ".part-0-0.inprogress.7d3e"
    trace.write_bytes(b"flink is writing")
    _age([trace], age)
    monkeypatch.setattr(writers, "WRITER_WAIT_SECONDS", 1.0)

    results = {r.partition: r for r in compact_table(spark, database, "ev", OPTIONS)}

    held = results["date=2024-01-01"]
    assert held.status == "failed" and expected in held.reason and ".part-0-0.inprogress.7d3e" in held.reason
    assert results["date=2024-01-02"].status == "compacted"
    assert rows_of(spark, table) == before
    assert len(data_files(data_dir / "date=2024-01-01")) == 3 and trace.read_bytes() == b"flink is writing"
