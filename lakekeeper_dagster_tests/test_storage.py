"""Storage through the Hadoop FileSystem API of the Spark JVM, on real files."""

from __future__ import annotations

import pytest

from lakekeeper_dagster.engine.analyze import analyze_tables, thresholds_from
from lakekeeper_dagster.engine.config import parse_config
from lakekeeper_dagster.engine.storage import Storage, StorageError


@pytest.fixture
def storage(spark) -> Storage:
    return Storage(spark)


def test_dir_stats_count_data_files_only(storage, data_dir):
    (data_dir / "a.parquet").write_bytes(b"x" * 100)
    (data_dir / "b.parquet").write_bytes(b"x" * 300)
    (data_dir / "c.parquet").write_bytes(b"x" * 200)
    (data_dir / "_SUCCESS").write_bytes(b"")
    (data_dir / ".a.parquet.crc").write_bytes(b"crc")
    (data_dir / "sub").mkdir()
    (data_dir / "sub" / "nested.parquet").write_bytes(b"x" * 999)
    stats = storage.dir_stats(data_dir.as_uri())
    assert (stats.file_count, stats.total_bytes, stats.median_bytes) == (3, 600, 200.0)
    assert stats.average_bytes == 200.0
    names = [f.path.rsplit("/", 1)[-1] for f in storage.list_data_files(data_dir.as_uri())]
    assert names == ["a.parquet", "b.parquet", "c.parquet"]


def test_missing_location_is_a_storage_error(storage, tmp_path):
    with pytest.raises(StorageError, match="does not exist"):
        storage.dir_stats((tmp_path / "nope").as_uri())


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


def test_text_files_and_exclusive_create(storage, tmp_path):
    target = (tmp_path / "j" / "journal.json").as_uri()
    storage.write_text(target, '{"step": "é"}\n')
    assert storage.read_text(target) == '{"step": "é"}'
    lock = (tmp_path / "lock").as_uri()
    assert storage.create_exclusive(lock, "me") is True
    assert storage.create_exclusive(lock, "you") is False
    assert storage.read_text(lock) == "me"


def test_permissions_are_copied(storage, tmp_path):
    src, dst = tmp_path / "a", tmp_path / "b"
    src.mkdir()
    dst.mkdir()
    src.chmod(0o750)
    storage.copy_permission(src.as_uri(), dst.as_uri())
    assert storage.permission(dst.as_uri()) == "750"


def test_analyze_counts_real_table_files(spark, database, data_dir):
    spark.range(0, 1000, numPartitions=7).selectExpr("id", "cast(id % 3 as string) AS k").write.mode(
        "overwrite"
    ).partitionBy("k").parquet(data_dir.as_uri())
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.t (id BIGINT) PARTITIONED BY (k STRING) STORED AS PARQUET "
        f"LOCATION '{data_dir.as_uri()}'"
    )
    spark.sql(f"MSCK REPAIR TABLE {database}.t")
    (plan,) = analyze_tables(spark, [(database, "t")], thresholds_from(parse_config({}, "test")))
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
        spark, [(database, "v"), (database, "missing"), (database, "e")], thresholds_from(parse_config({}, "t"))
    )
    assert [p.status for p in plans] == ["SKIPPED", "SKIPPED", "NEEDS COMPACTION"]
    assert "view" in plans[0].reason and "does not exist" in plans[1].reason
    assert plans[2].partitions[0].file_count == 2
