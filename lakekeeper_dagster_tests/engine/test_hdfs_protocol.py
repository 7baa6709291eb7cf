"""The protocol on a real HDFS (the session's minicluster): the swap, its crash recovery, rollback, cleanup and the
other operations on tables whose files live behind a NameNode, content checked row by row."""

from __future__ import annotations

import pytest

from lakekeeper_dagster.engine.hive.catalog import read_table
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster_tests.hdfs import data_files, dfs, hidden_dirs, jpath
from lakekeeper_dagster_tests.tables import DATES, OPTIONS, make_table, rows_of

pytestmark = pytest.mark.hdfs


def test_a_partitioned_table_on_hdfs_compacts_with_identical_content(spark, database, hdfs_dir):
    table = make_table(spark, database, "ev", hdfs_dir, partitions=DATES, files=6)
    first = f"{hdfs_dir}/date=2024-01-01"
    fs = dfs(spark, first)
    fs.setPermission(jpath(spark, first), spark.sparkContext._jvm.org.apache.hadoop.fs.permission.FsPermission("750"))
    before = rows_of(spark, table)

    results = compact_table(spark, database, "ev", OPTIONS)

    assert sorted((r.partition, r.status, r.files_before, r.files_after) for r in results) == [
        ("date=2024-01-01", "compacted", 6, 1),
        ("date=2024-01-02", "compacted", 6, 1),
    ]
    assert rows_of(spark, table) == before
    assert [len(data_files(spark, f"{hdfs_dir}/{spec}")) for spec in ("date=2024-01-01", "date=2024-01-02")] == [1, 1]
    assert str(fs.getFileStatus(jpath(spark, first)).getPermission().toOctal()) == "750"
    assert read_table(spark, database, "ev").location == hdfs_dir
    run = results[0].run_id
    assert hidden_dirs(spark, hdfs_dir) == [f".lk-old-{run}-date=2024-01-01", f".lk-old-{run}-date=2024-01-02"]
    assert spark.table(f"{database}.{results[0].backup_table}").count() == 400
