"""The compaction engine on real Spark, a real metastore and real files: data in equals data out."""

from __future__ import annotations

import os
import threading
import time

import pytest

from lakekeeper_dagster.engine.errors import OperationError
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.catalog import list_partitions, read_table
from lakekeeper_dagster.engine.ops.audit import verify_against_backup
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.options import CompactionOptions
from lakekeeper_dagster.engine.plan.thresholds import Batching, Thresholds
from lakekeeper_dagster.engine.protocol.journal import Journal
from lakekeeper_dagster.engine.rewrite.footers import read_footers
from lakekeeper_dagster_tests.tables import (
    DATES,
    OPTIONS,
    data_files,
    hidden_dirs,
    make_table,
    rows_of,
    write_files,
)

# The ORC case runs on the cluster only (locally, ORC partitioned tables compact in the recovery matrix).
ON_CLUSTER_ONLY = pytest.mark.cluster(only=True)


@pytest.mark.parametrize(
    "fmt", [pytest.param("parquet", marks=pytest.mark.cluster), pytest.param("orc", marks=ON_CLUSTER_ONLY)]
)
def test_partitioned_table_compacts_with_identical_content(spark, database, data_dir, fmt):
    table = make_table(spark, database, "ev", data_dir, fmt=fmt, partitions=DATES, files=6)
    spark.sql(f"INSERT INTO {table} PARTITION (date='2024-01-03') VALUES (999, 'one', 1)")  # a single file: OK
    (data_dir / "date=2024-01-01").chmod(0o750)
    location_before = read_table(spark, database, "ev").location
    before = rows_of(spark, table)
    cached = spark.table(table)
    assert cached.count() == len(before)

    results = compact_table(spark, database, "ev", OPTIONS)

    by_partition = {r.partition: r for r in results}
    assert by_partition["date=2024-01-03"].status == "skipped"
    for name in ("date=2024-01-01", "date=2024-01-02"):
        r = by_partition[name]
        assert (r.status, r.files_before, r.files_after, r.rows_before, r.rows_after) == ("compacted", 6, 1, 200, 200)
        assert r.checksum_matches and r.backup_table.startswith("__bkp_ev_")
        assert len(data_files(data_dir / name)) == 1
    assert oct((data_dir / "date=2024-01-01").stat().st_mode & 0o777) == "0o750"  # the original's permission
    assert rows_of(spark, table) == before
    assert cached.count() == len(before)  # same-session reader after the swap: no FileNotFoundException
    assert read_table(spark, database, "ev").location == location_before  # the metastore location never moves
    shown = sorted(r[0] for r in spark.sql(f"SHOW PARTITIONS {table}").collect())
    spark.sql(f"MSCK REPAIR TABLE {table}")
    assert sorted(r[0] for r in spark.sql(f"SHOW PARTITIONS {table}").collect()) == shown
    assert rows_of(spark, table) == before
    # Partition discovery from the files alone sees the same partitions and rows: no staging/old dir looks like one.
    discovered = spark.read.format(fmt).load(data_dir.as_uri())
    assert discovered.count() == len(before)
    assert sorted(r.date for r in discovered.select("date").distinct().collect()) == [
        "2024-01-01",
        "2024-01-02",
        "2024-01-03",
    ]
    assert hidden_dirs(data_dir) == [f".lk-old-{r.run_id}-date={d}" for d in ("2024-01-01", "2024-01-02")]
    # The backup is a real external table over the original files, found by its properties.
    backup = by_partition["date=2024-01-01"].backup_table
    props = read_table(spark, database, backup).table_properties
    assert props["lakekeeper.backup.source"] == table and props["external.table.purge"] == "false"
    assert spark.table(f"{database}.{backup}").count() == 400
    # A second run finds nothing to do: a partition at its target is never rewritten.
    assert {r.status for r in compact_table(spark, database, "ev", OPTIONS)} == {"skipped"}


def test_older_files_missing_new_columns_come_out_null(spark, database, data_dir):
    location = data_dir.as_uri()
    spark.range(0, 50, numPartitions=3).selectExpr("id").write.mode("append").parquet(location)
    spark.range(50, 100, numPartitions=3).selectExpr("id", "concat('x', cast(id AS string)) AS extra").write.mode(
        "append"
    ).parquet(location)
    spark.sql(f"CREATE EXTERNAL TABLE {database}.evo (id BIGINT, extra STRING) STORED AS PARQUET LOCATION '{location}'")
    before = rows_of(spark, f"{database}.evo")
    (result,) = compact_table(spark, database, "evo", OPTIONS)
    assert result.status == "compacted" and result.files_after == 1
    after = rows_of(spark, f"{database}.evo")
    assert after == before
    assert [r for r in after if r[0] < 50] == [(i, None) for i in range(50)]
    assert [r for r in after if r[0] >= 50] == [(i, f"x{i}") for i in range(50, 100)]


@pytest.mark.parametrize(
    ("fmt", "properties", "codec", "expected"),
    [("parquet", {"parquet.compression": "GZIP"}, "snappy", "gzip"), ("orc", None, "zlib", "zlib")],
)
@pytest.mark.cluster
def test_codec_is_preserved(spark, database, data_dir, fmt, properties, codec, expected):
    table = make_table(spark, database, "c", data_dir, fmt=fmt, files=4, properties=properties, codec=codec)
    before = rows_of(spark, table)
    (result,) = compact_table(spark, database, "c", OPTIONS)
    assert result.status == "compacted"
    (output,) = Storage(spark).list_data_files(data_dir.as_uri())
    info = read_table(spark, database, "c")
    assert read_footers(spark, info.file_format, [output.path], "c")[0].codec == expected
    assert rows_of(spark, table) == before


def test_sorted_into_several_files_counts_each_row_once(spark, database, data_dir):
    """Several target files sorted by a column (a range shuffle, its input sampled by a job of its own): each file
    sorted, the input's fingerprint equal to the output's (`test_executor_loss` re-runs the shuffle's map tasks)."""
    table = make_table(spark, database, "m", data_dir, partitions=DATES[:1], files=5, rows=300)
    before = rows_of(spark, table)
    size = sum(p.stat().st_size for p in data_files(data_dir / "date=2024-01-01"))
    options = CompactionOptions(Thresholds(size // 3 + 1, 1.0), sort_columns=("v",))
    (result,) = compact_table(spark, database, "m", options)
    assert (result.status, result.target_files) == ("compacted", 3), result.reason
    assert result.row_count_preserved and result.checksum_matches
    assert rows_of(spark, table) == before
    files = data_files(data_dir / "date=2024-01-01")
    assert len(files) == 3
    for file in files:
        values = [r.v for r in spark.read.parquet(str(file)).collect()]
        assert values and values == sorted(values), file


def test_sort_columns_including_a_partition_column(spark, database, data_dir):
    table = make_table(spark, database, "s", data_dir, partitions=DATES[:1], files=5)
    options = CompactionOptions(OPTIONS.thresholds, sort_columns=("date", "n", "id"))
    (result,) = compact_table(spark, database, "s", options)
    assert result.status == "compacted"
    (file,) = data_files(data_dir / "date=2024-01-01")
    in_file = [(r.n, r.id) for r in spark.read.parquet(f"file://{file}").collect()]
    assert in_file == sorted(in_file) and len(in_file) == 200
    with pytest.raises(OperationError, match="sort column.*nope"):
        compact_table(spark, database, "s", CompactionOptions(OPTIONS.thresholds, sort_columns=("nope",)))
    assert len(rows_of(spark, table)) == 200


def test_empty_and_single_file_tables_are_left_alone(spark, database, data_dir):
    spark.sql(f"CREATE EXTERNAL TABLE {database}.e (id BIGINT) STORED AS PARQUET LOCATION '{data_dir.as_uri()}/e'")
    spark.sql(f"CREATE EXTERNAL TABLE {database}.one (id BIGINT) STORED AS PARQUET LOCATION '{data_dir.as_uri()}/o'")
    write_files(spark, f"{data_dir.as_uri()}/o", 1, 2, 1, "parquet")
    (data_dir / "e").mkdir(exist_ok=True)
    empty = compact_table(spark, database, "e", OPTIONS)
    single = compact_table(spark, database, "one", OPTIONS)
    assert [(r.status, r.reason) for r in empty] == [("skipped", "no data files")]
    assert [(r.status, r.reason) for r in single] == [
        ("skipped", "1 small file(s) (< 96.0 MB), fewer than min_input_files 2")
    ]
    assert rows_of(spark, f"{database}.one") == [(1,), (2,)]
    assert hidden_dirs(data_dir) == []


def test_escaped_values_and_custom_locations(spark, database, data_dir, tmp_path):
    specs = [{"k": "a/b=c:d"}, {"k": "it's é"}]
    table = make_table(spark, database, "esc", data_dir, partitions=specs, files=3, rows=30)
    custom = tmp_path / "elsewhere" / "custom"
    spark.sql(f"ALTER TABLE {table} ADD PARTITION (k='far') LOCATION '{custom.as_uri()}'")
    write_files(spark, custom.as_uri(), 1000, 30, 4, "parquet")
    before = rows_of(spark, table)
    results = compact_table(spark, database, "esc", OPTIONS)
    assert sorted((r.partition, r.status, r.files_after) for r in results) == [
        ("k=a%2Fb%3Dc%3Ad", "compacted", 1),
        ("k=far", "compacted", 1),
        ("k=it%27s é", "compacted", 1),
    ]
    assert rows_of(spark, table) == before
    assert len(data_files(custom)) == 1
    assert hidden_dirs(custom.parent) == [f".lk-old-{results[0].run_id}-custom"]

    # The audit re-reads every live partition and its originals (escaped directory names, a custom location) and
    # credits each file to its own partition: all match; a row added to one partition shows in that one only.
    def audit() -> dict:
        compared = verify_against_backup(spark, database, "esc")
        return {c.partition: (c.live_rows, c.backup_rows, c.matches) for c in compared}

    assert audit() == {name: (30, 30, True) for name in ("k=a%2Fb%3Dc%3Ad", "k=far", "k=it%27s é")}
    spark.sql(f"INSERT INTO {table} PARTITION (k='it\\'s é') VALUES (5000, 'late', 1)")
    after = audit()
    assert after["k=it%27s é"] == (31, 30, False)
    assert after["k=far"] == after["k=a%2Fb%3Dc%3Ad"] == (30, 30, True)


def test_files_appended_during_compaction_are_kept_exactly_once(spark, database, data_dir, tmp_path):
    """A writer keeps moving finished files into the partition (as Hive and Spark commits do) while it compacts."""
    table = make_table(spark, database, "app", data_dir, partitions=DATES[:1], files=8, rows=400)
    partition_dir = data_dir / "date=2024-01-01"
    batches = []
    for batch in range(30):
        scratch = tmp_path / f"batch{batch}"
        write_files(spark, f"file://{scratch}", 10_000 + batch * 5, 5, 1, "parquet")
        batches.append((data_files(scratch)[0], list(range(10_000 + batch * 5, 10_000 + batch * 5 + 5))))
    stop = threading.Event()
    appended: list[int] = []

    def appender() -> None:
        for file, ids in batches:
            if stop.is_set():
                return
            partition_dir.mkdir(exist_ok=True)  # like a commit, which creates the partition directory if needed
            os.rename(file, partition_dir / f"appended-{file.name}")
            appended.extend(ids)
            time.sleep(0.02)

    thread = threading.Thread(target=appender)
    thread.start()
    try:
        (result,) = compact_table(spark, database, "app", OPTIONS)
    finally:
        stop.set()
        thread.join()
    assert result.status == "compacted", result.reason
    ids = [r[0] for r in rows_of(spark, table)]
    assert sorted(ids) == sorted(list(range(400)) + appended)  # nothing lost, nothing duplicated
    assert appended


def test_verification_mismatch_changes_nothing(spark, database, data_dir, monkeypatch):
    table = make_table(spark, database, "bad", data_dir, partitions=DATES[:1], files=4)
    before_files = data_files(data_dir / "date=2024-01-01")
    before = rows_of(spark, table)
    monkeypatch.setenv("LAKEKEEPER_FAULT", "drop-staged-file")
    (result,) = compact_table(spark, database, "bad", OPTIONS)
    assert result.status == "failed"
    assert "verification failed: input 200 rows" in result.reason and "output 0 rows" in result.reason
    assert data_files(data_dir / "date=2024-01-01") == before_files
    assert rows_of(spark, table) == before
    assert hidden_dirs(data_dir) == []
    assert [t.tableName for t in spark.sql(f"SHOW TABLES IN {database}").collect()] == ["bad"]


def test_corrupt_file_fails_the_partition_and_leaves_it_untouched(spark, database, data_dir):
    table = make_table(spark, database, "cor", data_dir, partitions=DATES, files=3)
    (data_dir / "date=2024-01-02" / "part-corrupt.parquet").write_bytes(b"PAR1 this is not parquet")
    before_files = data_files(data_dir / "date=2024-01-02")
    results = {r.partition: r for r in compact_table(spark, database, "cor", OPTIONS)}
    assert results["date=2024-01-01"].status == "compacted"
    failed = results["date=2024-01-02"]
    assert failed.status == "failed" and "could not read or write" in failed.reason
    assert data_files(data_dir / "date=2024-01-02") == before_files
    spark.sql(f"ALTER TABLE {table} DROP PARTITION (date='2024-01-02')")
    assert len(rows_of(spark, table)) == 200


def test_refusals_change_nothing(spark, database, data_dir, tmp_path):
    spark.sql(f"CREATE VIEW {database}.vw AS SELECT 1 AS x")
    spark.sql(f"CREATE TABLE {database}.managed (id INT) STORED AS PARQUET")
    make_table(spark, database, "gone", tmp_path / "gone", files=3)
    make_table(spark, database, "p", data_dir, partitions=DATES[:1], files=3)
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.txt (id INT) STORED AS TEXTFILE LOCATION '{data_dir.as_uri()}/t' "
        "TBLPROPERTIES ('skip.header.line.count'='1')"
    )
    cases = [
        ("txt", None, "cannot be compacted: skip.header.line.count=1"),
        ("vw", None, "cannot be compacted: view"),
        ("managed", None, "cannot be compacted: managed table"),
        ("missing", None, "does not exist"),
        ("p", ["date=2030-01-01"], "partition 'date=2030-01-01' does not exist"),
    ]
    for table, partitions, message in cases:
        with pytest.raises(Exception, match=message):
            compact_table(spark, database, table, OPTIONS, partitions)
    import shutil

    shutil.rmtree(tmp_path / "gone")
    with pytest.raises(OperationError, match="is not reachable"):
        compact_table(spark, database, "gone", OPTIONS)
    assert len(data_files(data_dir / "date=2024-01-01")) == 3
    assert sorted(t.tableName for t in spark.sql(f"SHOW TABLES IN {database}").collect()) == [
        "gone",
        "managed",
        "p",
        "txt",
        "vw",
    ]


def test_leftover_without_journal_is_reported_and_refused(spark, database, data_dir):
    make_table(spark, database, "left", data_dir, partitions=DATES[:1], files=3)
    stray = data_dir / ".lk-old-19990101T000000-abcdef-date=2024-01-01"
    stray.mkdir()
    (stray / "part-0.parquet").write_bytes(b"data")
    with pytest.raises(OperationError, match="no journal records.*lk-old-19990101"):
        compact_table(spark, database, "left", OPTIONS)
    assert len(data_files(data_dir / "date=2024-01-01")) == 3 and stray.exists()


def test_statistics_refreshed_when_asked(spark, database, data_dir):
    table = make_table(spark, database, "st", data_dir, partitions=DATES[:1], files=4)
    options = CompactionOptions(OPTIONS.thresholds, analyze_stats=True)
    (result,) = compact_table(spark, database, "st", options)
    stats = spark.sql(f"DESCRIBE TABLE EXTENDED {table} PARTITION (date='2024-01-01')").collect()
    statistics = next(r.data_type for r in stats if r.col_name == "Partition Statistics")
    assert statistics.startswith(f"{result.bytes_after} bytes")


def test_decimals_are_written_as_hive_readers_expect(spark, database, data_dir):
    location = data_dir.as_uri()
    spark.conf.set("spark.sql.parquet.writeLegacyFormat", "true")  # Hive's layout in, Hive's layout out
    spark.range(0, 60, numPartitions=4).selectExpr("id", "cast(id / 7 AS decimal(10,2)) AS price").write.mode(
        "append"
    ).parquet(location)
    spark.conf.unset("spark.sql.parquet.writeLegacyFormat")
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.dec (id BIGINT, price DECIMAL(10,2)) STORED AS PARQUET LOCATION '{location}'"
    )
    before = rows_of(spark, f"{database}.dec")
    (result,) = compact_table(spark, database, "dec", OPTIONS)
    assert result.status == "compacted"
    (file,) = Storage(spark).list_data_files(location)
    jvm = spark._jvm
    reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(
        jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(
            jvm.org.apache.hadoop.fs.Path(file.path), spark._jsc.hadoopConfiguration()
        )
    )
    try:
        price = reader.getFooter().getFileMetaData().getSchema().getType("price")
        assert str(price.asPrimitiveType().getPrimitiveTypeName().name()) == "FIXED_LEN_BYTE_ARRAY"
    finally:
        reader.close()
    assert rows_of(spark, f"{database}.dec") == before
    assert spark.conf.get("spark.sql.parquet.writeLegacyFormat") == "false"  # the session's own value is back


def test_partition_with_subdirectories_is_refused_untouched(spark, database, data_dir):
    table = make_table(spark, database, "sub", data_dir, partitions=DATES[:1], files=3)
    nested = data_dir / "date=2024-01-01" / "HIVE_UNION_SUBDIR_1"
    write_files(spark, f"file://{nested}", 5000, 10, 1, "parquet")
    before = data_files(data_dir / "date=2024-01-01")
    (result,) = compact_table(spark, database, "sub", OPTIONS)
    assert result.status == "failed" and "holds subdirectories (HIVE_UNION_SUBDIR_1)" in result.reason
    assert data_files(data_dir / "date=2024-01-01") == before and data_files(nested)
    assert hidden_dirs(data_dir) == [] and len(rows_of(spark, table)) == 200


def test_a_neighbouring_tables_backup_is_not_a_leftover(spark, database, data_dir):
    make_table(spark, database, "t1", data_dir / "t1", files=3)
    make_table(spark, database, "t2", data_dir / "t2", files=3)
    assert compact_table(spark, database, "t1", OPTIONS)[0].status == "compacted"
    assert compact_table(spark, database, "t2", OPTIONS)[0].status == "compacted"  # t1's .lk-old sits beside it


@pytest.mark.cluster
def test_batches_compact_concurrently_and_a_failed_unit_spares_its_batch(spark, database, data_dir):
    dates = [{"date": f"2024-02-0{d}"} for d in range(1, 6)]
    table = make_table(spark, database, "bat", data_dir, partitions=dates, files=3)
    before = rows_of(spark, table)
    (data_dir / "date=2024-02-02" / "part-corrupt.parquet").write_bytes(b"PAR1 this is not parquet")
    options = CompactionOptions(OPTIONS.thresholds, batching=Batching(max_units=2, concurrent_jobs=2))

    results = {r.partition: r for r in compact_table(spark, database, "bat", options)}

    assert results["date=2024-02-02"].status == "failed"
    compacted = [d["date"] for d in dates if d["date"] != "2024-02-02"]
    for date in compacted:
        r = results[f"date={date}"]
        assert (r.status, r.files_after, r.rows_before, r.rows_after) == ("compacted", 1, 200, 200)
        assert len(data_files(data_dir / f"date={date}")) == 1
    assert len(data_files(data_dir / "date=2024-02-02")) == 4  # untouched, corrupt file included
    spark.sql(f"ALTER TABLE {table} DROP PARTITION (date='2024-02-02')")
    assert rows_of(spark, table) == [r for r in before if r[-1] != "2024-02-02"]
    # Three batches (2 + 2 + 1 units), each written, backed up and committed with one journal record.
    run_id = results["date=2024-02-01"].run_id
    directory = data_dir.parent / f".lakekeeper-{data_dir.name}" / "journal" / run_id
    journal = Journal.load(Storage(spark), directory.as_uri())
    assert [u.state for u in journal.units] == ["committed", "failed", "committed", "committed", "committed"]
    records = [p.name for p in directory.iterdir() if p.name.endswith(".json")]
    # plan, backup table, per batch (written, backed up, committed), a swap record per unit, the failure, done
    assert len(records) == 1 + 1 + 3 * 3 + 4 + 1 + 1
    # The backup holds the originals of exactly the compacted partitions, at their retired directories.
    backup = read_table(spark, database, results["date=2024-02-01"].backup_table)
    located = {p.partition: p.location for p in list_partitions(spark, backup)}
    assert {name: location.rsplit("/", 1)[1] for name, location in located.items()} == {
        f"date={d}": f".lk-old-{run_id}-date={d}" for d in compacted
    }
    assert len(rows_of(spark, backup.qualified_name)) == 4 * 200
