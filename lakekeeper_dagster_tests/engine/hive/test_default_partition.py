"""`__HIVE_DEFAULT_PARTITION__` (a NULL or empty partition value) through compaction, backup, rollback and cleanup."""

from __future__ import annotations

from lakekeeper_dagster.engine.hive.backup import find_backups
from lakekeeper_dagster.engine.ops.cleanup import cleanup_backups
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.rollback import rollback_table
from lakekeeper_dagster_tests.tables import OPTIONS, data_files, hidden_dirs, make_table, rows_of


def test_the_default_partition_compacts_backs_up_rolls_back_and_cleans_up(spark, database, data_dir):
    table = make_table(spark, database, "dp", data_dir, partitions=[{"ref": "FR"}], files=2, rows=20)
    spark.sql("SET hive.exec.dynamic.partition.mode=nonstrict")
    for first in (100, 200, 300):  # three appends: three small files in the default partition
        spark.sql(
            f"INSERT INTO {table} PARTITION (ref) "
            f"SELECT id, 'null', 0, CAST(NULL AS STRING) FROM range({first}, {first + 5})"
        )
    default = data_dir / "ref=__HIVE_DEFAULT_PARTITION__"
    originals = [p.name for p in data_files(default)]
    before = rows_of(spark, table)
    assert len(originals) >= 3 and len([r for r in before if r[3] is None]) == 15

    results = compact_table(spark, database, "dp", OPTIONS)
    assert {r.partition: str(r.status) for r in results}["ref=__HIVE_DEFAULT_PARTITION__"] == "compacted"
    assert len(data_files(default)) == 1 and rows_of(spark, table) == before
    (backup,) = find_backups(spark, database, table)
    assert rows_of(spark, backup.qualified_name) == before  # the backup reads the original files

    lines = rollback_table(spark, database, "dp", partition="ref=__HIVE_DEFAULT_PARTITION__")
    assert lines == [f"{table} ref=__HIVE_DEFAULT_PARTITION__: restored from {backup.name}"]
    assert [p.name for p in data_files(default)] == originals and rows_of(spark, table) == before
    assert rows_of(spark, backup.qualified_name) == [r for r in before if r[3] == "FR"]  # its partition was dropped

    compact_table(spark, database, "dp", OPTIONS)
    assert len(data_files(default)) == 1 and rows_of(spark, table) == before
    cleaned = cleanup_backups(spark, table=table, older_than_seconds=0, skip_trash=True)
    assert len(cleaned) == 2 and all(line.startswith("dropped") for line in cleaned)
    assert find_backups(spark, database, table) == [] and hidden_dirs(data_dir) == []
    assert rows_of(spark, table) == before
