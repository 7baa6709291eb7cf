"""A batch's partitions written in ONE Spark job (`batching.write_mode: one_job`, the default): each partition
ends at its target file count with its content, its sort order, its own fingerprint and its own encodings."""

from __future__ import annotations

import dataclasses

import pytest

from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.plan.thresholds import Batching, Thresholds, WriteMode
from lakekeeper_dagster.engine.rewrite.footers import read_footers
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster_tests.engine.rewrite.test_job_labels import _jobs
from lakekeeper_dagster_tests.engine.rewrite.test_verification import careless_cluster
from lakekeeper_dagster_tests.tables import OPTIONS, data_files, hidden_dirs, make_table, rows_of

PARTS = [{"date": f"2024-01-0{d}"} for d in (1, 2, 3)]
ONE_JOB = dataclasses.replace(OPTIONS, batching=Batching(write_mode=WriteMode.ONE_JOB))
PER_UNIT = dataclasses.replace(OPTIONS, batching=Batching(write_mode=WriteMode.PER_UNIT))


def _writes(spark, before: int) -> set[str]:
    """The labels of the write jobs started since job `before` (a query's shuffle stage is a job of its own)."""
    return {text for job, text in _jobs(spark).items() if job > before and text and ": write " in text}


def _rows_where(spark, table: str, condition: str) -> list[tuple]:
    spark.catalog.refreshTable(table)
    return sorted(tuple(r) for r in spark.table(table).where(condition).collect())


@pytest.mark.cluster
@pytest.mark.parametrize("sort_columns", [(), ("v",)])
def test_a_batch_is_written_in_one_job_each_partition_at_its_target_count_sorted_and_intact(
    spark, database, data_dir, sort_columns
):
    table = make_table(spark, database, "ev", data_dir, partitions=PARTS, files=5, rows=300)
    before = rows_of(spark, table)
    size = max(sum(p.stat().st_size for p in data_files(data_dir / f"date={d['date']}")) for d in PARTS)
    # a block of a third of the biggest partition: 3 files each
    options = dataclasses.replace(ONE_JOB, thresholds=Thresholds(size // 3 + 1, 1.0), sort_columns=sort_columns)
    first = max(_jobs(spark), default=-1)

    results = compact_table(spark, database, "ev", options)

    assert [(r.status, r.target_files) for r in results] == [(UnitStatus.COMPACTED, 3)] * 3, [r.reason for r in results]
    if sort_columns:  # each alone, to be sorted by range across its files
        expected = {f"lakekeeper compact {table} partition date={d['date']}: write 3 file(s)" for d in PARTS}
    else:  # one job for the three partitions
        expected = {f"lakekeeper compact {table}: write 3 partitions, 9 file(s), in one job"}
    assert _writes(spark, first) == expected
    assert rows_of(spark, table) == before
    assert [d for d in hidden_dirs(data_dir) if not d.startswith(".lk-old-")] == []  # only the backup's originals
    for result, spec in zip(results, PARTS, strict=True):
        files = data_files(data_dir / f"date={spec['date']}")
        assert len(files) == 3 == result.files_after
        assert result.row_count_preserved and result.checksum_matches
        ranges = []
        for file in files:
            values = [r.v for r in spark.read.parquet(str(file)).collect()]
            assert values
            ranges.append((values[0], values[-1]))
            assert not sort_columns or values == sorted(values), file
        if sort_columns:  # no two files' ranges overlap
            ranges.sort()
            assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:], strict=False)), ranges


def test_a_staged_file_lost_in_one_job_fails_that_partition_only(spark, database, data_dir, monkeypatch):
    table = make_table(spark, database, "ev", data_dir, partitions=PARTS, files=4)
    before = rows_of(spark, table)
    victim = sorted(str(p) for p in data_files(data_dir / "date=2024-01-02"))
    monkeypatch.setenv("LAKEKEEPER_FAULT", "drop-staged-file@date=2024-01-02")

    results = {r.partition: r for r in compact_table(spark, database, "ev", ONE_JOB)}

    failed = results.pop("date=2024-01-02")
    assert failed.status == UnitStatus.FAILED
    assert "verification failed: input 200 rows" in failed.reason and "output 0 rows" in failed.reason
    assert sorted(str(p) for p in data_files(data_dir / "date=2024-01-02")) == victim
    assert [(r.status, r.files_after, r.checksum_matches) for r in results.values()] == [
        (UnitStatus.COMPACTED, 1, True)
    ] * 2
    assert rows_of(spark, table) == before
    assert [d for d in hidden_dirs(data_dir) if not d.startswith(".lk-old-")] == []  # only the backup's originals


def test_an_input_deleted_after_the_write_fails_that_partition_alone(spark, database, data_dir, monkeypatch):
    table = make_table(spark, database, "ev", data_dir, partitions=PARTS, files=3)
    others = [d["date"] for d in PARTS if d["date"] != "2024-01-02"]
    expected = _rows_where(spark, table, f"date IN ('{others[0]}', '{others[1]}')")
    victim = sorted(data_files(data_dir / "date=2024-01-02"))
    monkeypatch.setenv("LAKEKEEPER_FAULT", "drop-input-after-write@date=2024-01-02")  # a writer's delete

    results = {r.partition: r for r in compact_table(spark, database, "ev", ONE_JOB)}

    failed = results.pop("date=2024-01-02")
    assert failed.status == UnitStatus.FAILED and failed.raced, failed.reason
    assert "verification could not read its files back" in failed.reason
    assert sorted(data_files(data_dir / "date=2024-01-02")) == victim[1:]  # the writer's delete only
    assert [(r.status, r.files_after, r.checksum_matches) for r in results.values()] == [
        (UnitStatus.COMPACTED, 1, True)
    ] * 2
    assert _rows_where(spark, table, f"date IN ('{others[0]}', '{others[1]}')") == expected
    assert [d for d in hidden_dirs(data_dir) if not d.startswith(".lk-old-")] == []


def test_a_partition_spark_cannot_read_fails_alone_and_its_job_mates_are_written_each_alone(spark, database, data_dir):
    table = make_table(spark, database, "ev", data_dir, partitions=PARTS, files=4)
    bad = data_dir / "date=2024-01-02"
    victim = data_files(bad)[0]
    with victim.open("r+b") as file:  # the first page header destroyed, the footer intact: only Spark's read fails
        file.seek(4)
        file.write(b"\xff" * 60)
    victim.with_name(f".{victim.name}.crc").unlink(missing_ok=True)
    originals = {p.name: p.read_bytes() for p in data_files(bad)}
    good = [d["date"] for d in PARTS if d["date"] != "2024-01-02"]
    expected = _rows_where(spark, table, f"date IN ('{good[0]}', '{good[1]}')")  # pruned: never the bad file
    first = max(_jobs(spark), default=-1)

    results = {r.partition: r for r in compact_table(spark, database, "ev", ONE_JOB)}

    failed = results.pop("date=2024-01-02")
    assert failed.status == UnitStatus.FAILED and victim.name in failed.reason, failed.reason
    assert {p.name: p.read_bytes() for p in data_files(bad)} == originals
    assert [(r.status, r.files_after, r.checksum_matches) for r in results.values()] == [
        (UnitStatus.COMPACTED, 1, True)
    ] * 2
    assert _rows_where(spark, table, f"date IN ('{good[0]}', '{good[1]}')") == expected
    writes = _writes(spark, first)
    assert f"lakekeeper compact {table}: write 3 partitions, 3 file(s), in one job" in writes  # tried together first
    assert f"lakekeeper compact {table} partition date={good[0]}: write 1 file(s)" in writes  # then each alone
    assert [d for d in hidden_dirs(data_dir) if not d.startswith(".lk-old-")] == []


def test_partitions_with_different_timestamp_encodings_each_keep_theirs(spark, database, data_dir):
    spark.sql(
        f"CREATE EXTERNAL TABLE `{database}`.ts (id BIGINT, ts TIMESTAMP) PARTITIONED BY (p STRING) "
        f"STORED AS PARQUET LOCATION '{data_dir.as_uri()}'"
    )
    kinds = {"a": "INT96", "b": "TIMESTAMP_MICROS", "c": "INT96"}
    for part, kind in kinds.items():
        with careless_cluster(spark, {"spark.sql.parquet.outputTimestampType": kind}):
            df = spark.range(0, 40, numPartitions=4).selectExpr(
                "id", "timestamp'2024-05-01 10:00:00' + make_interval(0, 0, 0, 0, cast(id AS int)) AS ts"
            )
            df.write.mode("append").parquet(f"{data_dir.as_uri()}/p={part}")
        spark.sql(f"ALTER TABLE `{database}`.ts ADD PARTITION (p='{part}')")
    table = f"{database}.ts"
    before = rows_of(spark, table)
    first = max(_jobs(spark), default=-1)

    results = compact_table(spark, database, "ts", ONE_JOB)

    assert [r.status for r in results] == [UnitStatus.COMPACTED] * 3, [r.reason for r in results]
    assert rows_of(spark, table) == before
    writes = _writes(spark, first)
    assert f"lakekeeper compact {table}: write 2 partitions, 2 file(s), in one job" in writes  # a and c together
    assert f"lakekeeper compact {table} partition p=b: write 1 file(s)" in writes
    for part, kind in kinds.items():
        (output,) = data_files(data_dir / f"p={part}")
        (footer,) = read_footers(spark, "parquet", [str(output)], part)
        assert (footer.timestamp_type, footer.rows) == (kind, 40)


def test_per_unit_writes_each_partition_in_its_own_job(spark, database, data_dir):
    table = make_table(spark, database, "ev", data_dir, partitions=PARTS[:2], files=3)
    before = rows_of(spark, table)
    first = max(_jobs(spark), default=-1)
    results = compact_table(spark, database, "ev", PER_UNIT)

    assert [r.status for r in results] == [UnitStatus.COMPACTED] * 2
    assert rows_of(spark, table) == before
    assert _writes(spark, first) == {
        f"lakekeeper compact {table} partition date={d['date']}: write 1 file(s)" for d in PARTS[:2]
    }
