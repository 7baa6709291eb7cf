"""Directories HDFS will not let a swap rename away, on a real HDFS (the session's minicluster): a partition that is
the root of an encryption zone, or a snapshottable one, is refused before any work with nothing changed; a snapshot
of the table's directory keeps the original files through the swap and the backup's cleanup."""

from __future__ import annotations

import pytest

from lakekeeper_dagster.engine.errors import OperationError
from lakekeeper_dagster.engine.ops.cleanup import cleanup_backups
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.rollback import rollback_table
from lakekeeper_dagster_tests.hdfs import EZ_KEY, data_files, dfs, hidden_dirs, jpath
from lakekeeper_dagster_tests.tables import DATES, OPTIONS, make_table, rows_of

pytestmark = pytest.mark.hdfs

FIRST, SECOND = (f"date={spec['date']}" for spec in DATES)


def test_a_snapshot_of_the_table_directory_keeps_the_originals_through_the_swap_and_the_cleanup(
    spark, database, hdfs_dir
):
    table = make_table(spark, database, "ev", hdfs_dir, partitions=DATES, files=3)
    fs, root = dfs(spark, hdfs_dir), jpath(spark, hdfs_dir)
    fs.allowSnapshot(root)
    fs.createSnapshot(root, "before")
    originals = {spec: data_files(spark, f"{hdfs_dir}/{spec}") for spec in (FIRST, SECOND)}
    before = rows_of(spark, table)

    results = compact_table(spark, database, "ev", OPTIONS)

    assert [(r.status, r.files_after) for r in results] == [("compacted", 1)] * 2
    assert rows_of(spark, table) == before
    snapshot = f"{hdfs_dir}/.snapshot/before"

    def in_snapshot() -> list[tuple]:
        read = spark.read.parquet
        return sorted(tuple(r) + (s[5:],) for s in (FIRST, SECOND) for r in read(f"{snapshot}/{s}").collect())

    assert in_snapshot() == before
    assert {spec: data_files(spark, f"{snapshot}/{spec}") for spec in originals} == originals

    [line] = cleanup_backups(spark, table=table)

    assert "kept" not in line, line
    assert hidden_dirs(spark, hdfs_dir) == []
    assert spark.sql(f"SHOW TABLES IN {database} LIKE '__bkp*'").count() == 0
    assert rows_of(spark, table) == before
    assert in_snapshot() == before


def test_a_snapshottable_partition_directory_is_refused_before_any_work(spark, database, hdfs_dir):
    table = make_table(spark, database, "ev", hdfs_dir, partitions=DATES, files=3)
    first, second = f"{hdfs_dir}/{FIRST}", f"{hdfs_dir}/{SECOND}"
    fs = dfs(spark, hdfs_dir)
    fs.allowSnapshot(jpath(spark, first))
    fs.createSnapshot(jpath(spark, first), "daily")
    originals = data_files(spark, first)
    before = rows_of(spark, table)

    results = {r.partition: r for r in compact_table(spark, database, "ev", OPTIONS)}

    assert results[SECOND].status == "compacted"
    refused = results[FIRST]
    assert refused.status == "failed"
    assert f"its directory {first} is snapshottable (HDFS snapshots), with 1 snapshot(s) (e.g. daily)" in refused.reason
    assert "Nothing was changed; exclude it from compaction" in refused.reason
    assert data_files(spark, first) == originals
    assert rows_of(spark, table) == before
    run = results[SECOND].run_id
    assert hidden_dirs(spark, hdfs_dir) == [f".lk-old-{run}-{SECOND}"]
    backup = f"{database}.{results[SECOND].backup_table}"  # nothing of the refused partition in it
    assert [r.partition for r in spark.sql(f"SHOW PARTITIONS {backup}").collect()] == [SECOND]

    # a rollback into a directory made snapshottable since is refused before its swap, too
    fs.allowSnapshot(jpath(spark, second))
    compacted = data_files(spark, second)
    with pytest.raises(OperationError, match=f"its directory {second} is snapshottable \\(HDFS snapshots\\); a swap"):
        rollback_table(spark, database, "ev")
    assert data_files(spark, second) == compacted
    assert rows_of(spark, table) == before


def test_an_encryption_zone_root_partition_is_refused_and_the_others_compact(spark, database, hdfs_dir):
    jvm = spark.sparkContext._jvm
    zone = f"{hdfs_dir}/{FIRST}"
    fs = dfs(spark, zone)
    fs.mkdirs(jpath(spark, zone))
    admin = jvm.org.apache.hadoop.hdfs.client.HdfsAdmin(fs.getUri(), spark.sparkContext._jsc.hadoopConfiguration())
    flags = jvm.java.util.EnumSet.of(jvm.org.apache.hadoop.hdfs.client.CreateEncryptionZoneFlag.NO_TRASH)
    admin.createEncryptionZone(jpath(spark, zone), EZ_KEY, flags)
    table = make_table(spark, database, "ev", hdfs_dir, partitions=DATES, files=3)  # its files written in the zone
    assert str(fs.getEZForPath(jpath(spark, zone)).getKeyName()) == EZ_KEY
    originals = data_files(spark, zone)
    before = rows_of(spark, table)

    results = {r.partition: r for r in compact_table(spark, database, "ev", OPTIONS)}

    assert results[SECOND].status == "compacted"
    refused = results[FIRST]
    assert refused.status == "failed"
    assert f"its directory {zone} is the root of an HDFS encryption zone" in refused.reason
    assert "Nothing was changed; exclude it from compaction" in refused.reason
    assert data_files(spark, zone) == originals
    assert rows_of(spark, table) == before
    assert hidden_dirs(spark, hdfs_dir) == [f".lk-old-{results[SECOND].run_id}-{SECOND}"]
    backup = f"{database}.{results[SECOND].backup_table}"  # nothing of the refused partition in it
    assert [r.partition for r in spark.sql(f"SHOW PARTITIONS {backup}").collect()] == [SECOND]
