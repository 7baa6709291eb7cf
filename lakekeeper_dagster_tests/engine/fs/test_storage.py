"""Storage through the Hadoop FileSystem API of the Spark JVM, on real files."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from lakekeeper_dagster.engine.fs.dirstats import DirStats
from lakekeeper_dagster.engine.fs.listing import list_directories
from lakekeeper_dagster.engine.fs.storage import Storage, StorageError
from lakekeeper_dagster.engine.ops.analyze import analyze_tables
from lakekeeper_dagster.engine.settings import EngineSettings


@pytest.fixture
def storage(spark) -> Storage:
    return Storage(spark)


def test_listing_counts_data_files_directly_under_each_location(spark, storage, tmp_path):
    first = tmp_path / "date=2024-01-01%3A00"  # a Hive-escaped name, as written by Hive
    first.mkdir()
    (first / "a.parquet").write_bytes(b"x" * 100)
    (first / "b.parquet").write_bytes(b"x" * 300)
    (first / "c.parquet").write_bytes(b"x" * 200)
    (first / "_SUCCESS").write_bytes(b"")
    (first / ".a.parquet.crc").write_bytes(b"crc")
    globby = tmp_path / "ref=[a]{b}*"  # a custom location whose name Hadoop would expand as a glob
    globby.mkdir()
    (globby / "x.parquet").write_bytes(b"x" * 10)
    nested = tmp_path / "nested"
    (nested / "HIVE_UNION_SUBDIR_1").mkdir(parents=True)
    (nested / "HIVE_UNION_SUBDIR_1" / "d.parquet").write_bytes(b"x" * 999)
    (nested / "e.parquet").write_bytes(b"x" * 5)
    empty = tmp_path / "empty"
    empty.mkdir()
    missing = (tmp_path / "nope").as_uri()
    locations = [f"file:{first}", f"file:{globby}", f"file:{nested}", f"file://{empty}", missing]

    listing = list_directories(spark, locations, "test", small_below=250)

    stats = listing.stats[locations[0]]
    assert (stats.file_count, stats.total_bytes, stats.median_bytes, stats.average_bytes) == (3, 600, 200.0, 200.0)
    # the files below 250 bytes (the small ones), counted as a run counts its snapshot
    assert (stats.small_count, stats.small_bytes, stats.small_median_bytes) == (2, 300, 150.0)
    assert stats == DirStats.of(locations[0], storage.list_data_files(locations[0]), 250)
    assert listing.stats[locations[3]].small_count == 0
    assert (listing.stats[locations[1]].file_count, listing.stats[locations[1]].total_bytes) == (1, 10)
    assert (listing.stats[locations[2]].file_count, listing.stats[locations[2]].total_bytes) == (1, 5)
    assert listing.stats[locations[3]].file_count == 0
    assert listing.missing == {missing} and missing not in listing.stats
    assert listing.nested == {locations[2]}
    names = [f.path.rsplit("/", 1)[-1] for f in storage.list_data_files(locations[0])]
    assert names == ["a.parquet", "b.parquet", "c.parquet"]


def test_missing_location_is_a_storage_error(storage, tmp_path):
    with pytest.raises(StorageError, match="does not exist"):
        storage.list_data_files((tmp_path / "nope").as_uri())


def test_rename_strict_refuses_to_nest(storage, tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / "f").write_text("data")
    dst.mkdir()
    with pytest.raises(StorageError, match="target already exists"):
        storage.rename_strict(src.as_uri(), dst.as_uri())
    assert (src / "f").read_text() == "data" and not (dst / "src").exists()
    dst.rmdir()
    storage.rename_strict(src.as_uri(), dst.as_uri())
    assert (dst / "f").read_text() == "data" and not src.exists()


def test_a_local_rename_moves_the_checksum_and_refuses_a_missing_parent_or_source(storage, tmp_path):
    storage.write_text((tmp_path / "a").as_uri(), "data")  # beside it, the local filesystem's .a.crc

    storage.rename_strict((tmp_path / "a").as_uri(), (tmp_path / "b").as_uri())

    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.crc", "b"]
    assert storage.read_text((tmp_path / "b").as_uri()) == "data"
    with pytest.raises(StorageError, match="parent directory .* does not exist"):  # never made by the rename
        storage.rename_strict((tmp_path / "b").as_uri(), (tmp_path / "gone" / "c").as_uri())
    assert not (tmp_path / "gone").exists() and (tmp_path / "b").exists()
    with pytest.raises(StorageError, match="cannot rename .*nothing: it does not exist"):
        storage.rename_strict((tmp_path / "nothing").as_uri(), (tmp_path / "c").as_uri())


def test_replace_file_puts_a_file_in_place_of_another_in_one_rename(storage, tmp_path):
    """`failures.json` is replaced so: onto the old file, which HDFS's NameNode does atomically (a local filesystem
    deletes, then renames, inside the call); a source that is gone is a StorageError naming both."""
    old, new = (tmp_path / "counts.json").as_uri(), (tmp_path / "counts.json.tmp-1").as_uri()
    storage.write_text(old, "old")
    storage.write_text(new, "new")
    storage.replace_file(new, old)
    assert storage.read_text(old) == "new" and not storage.exists(new)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".crc")) == ["counts.json"]
    with pytest.raises(StorageError, match="counts.json.tmp-1 onto .*counts.json failed"):
        storage.replace_file(new, old)  # gone: a clear error, the file in place kept
    assert storage.read_text(old) == "new"


def test_text_files_and_exclusive_create(storage, tmp_path):
    target = (tmp_path / "j" / "journal.json").as_uri()
    storage.write_text(target, '{"step": "é"}\n')
    assert storage.read_text(target) == '{"step": "é"}\n'  # the text as written, whole
    lock = (tmp_path / "lock").as_uri()
    assert storage.create_exclusive(lock, "me") is True
    assert storage.create_exclusive(lock, "you") is False
    assert storage.read_text(lock) == "me"


def test_exclusive_create_has_one_winner_when_racing(storage, tmp_path):
    """Racing creators (threads, each its own JVM thread) of one file: exactly one wins, and the file is its own."""
    for round_ in range(20):
        target = (tmp_path / f"round-{round_}" / "lease").as_uri()  # its directory does not exist yet
        barrier = threading.Barrier(6)

        def create(me: str, target: str = target, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            return storage.create_exclusive(target, me)

        with ThreadPoolExecutor(6) as pool:
            won = list(pool.map(create, [f"racer-{i}" for i in range(6)]))
        assert won.count(True) == 1, won
        assert storage.read_text(target) == f"racer-{won.index(True)}"


def test_analyze_counts_real_table_files(spark, database, data_dir):
    spark.range(0, 1000, numPartitions=7).selectExpr("id", "cast(id % 3 as string) AS k").write.mode(
        "overwrite"
    ).partitionBy("k").parquet(data_dir.as_uri())
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.t (id BIGINT) PARTITIONED BY (k STRING) STORED AS PARQUET "
        f"LOCATION '{data_dir.as_uri()}'"
    )
    spark.sql(f"MSCK REPAIR TABLE {database}.t")
    (plan,) = analyze_tables(spark, [(database, "t")], EngineSettings().thresholds(), 3)
    assert plan.status == "NEEDS COMPACTION"
    assert [p.partition for p in plan.partitions] == ["k=0", "k=1", "k=2"]
    assert [p.file_count for p in plan.partitions] == [7, 7, 7]
    disk_bytes = sum(f.stat().st_size for f in data_dir.rglob("*.parquet"))
    assert plan.total_bytes == disk_bytes
    assert spark.table(f"{database}.t").count() == 1000


def test_analyze_reports_skips_and_goes_on(spark, database, data_dir):
    spark.sql(f"CREATE VIEW {database}.v AS SELECT 1 AS x")
    spark.sql(f"CREATE EXTERNAL TABLE {database}.e (id INT) STORED AS ORC LOCATION '{data_dir.as_uri()}'")
    spark.sql(f"INSERT INTO {database}.e VALUES (1)")
    spark.sql(f"INSERT INTO {database}.e VALUES (2)")
    plans = analyze_tables(
        spark, [(database, "v"), (database, "missing"), (database, "e")], EngineSettings().thresholds(), 3
    )
    assert [p.status for p in plans] == ["SKIPPED", "SKIPPED", "NEEDS COMPACTION"]
    assert "view" in plans[0].reason and "does not exist" in plans[1].reason
    assert plans[2].partitions[0].file_count == 2
