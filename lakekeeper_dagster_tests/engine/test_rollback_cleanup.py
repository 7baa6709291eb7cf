"""Rollback and cleanup on real tables: exact restore, appends kept, backups found by properties, not prefixes."""

from __future__ import annotations

import pytest

from lakekeeper_dagster.engine.errors import ConfigError, OperationError
from lakekeeper_dagster.engine.hive.backup import find_backups
from lakekeeper_dagster.engine.ops.cleanup import cleanup_backups, parse_duration
from lakekeeper_dagster.engine.ops.compaction import CompactionOptions, compact_table
from lakekeeper_dagster.engine.ops.rollback import rollback_table
from lakekeeper_dagster_tests.tables import DATES, OPTIONS, data_files, hidden_dirs, make_table, rows_of


def names(directory) -> list[str]:
    return [p.name for p in data_files(directory)]


def test_prefix_colliding_tables_are_never_confused(spark, database, data_dir):
    ev2 = make_table(spark, database, "ev2", data_dir / "ev2", partitions=DATES[:1], files=3)
    archive = make_table(spark, database, "ev2_archive", data_dir / "ev2_archive", partitions=DATES[:1], files=3)
    originals = {t: names(data_dir / t / "date=2024-01-01") for t in ("ev2", "ev2_archive")}
    before = {t: rows_of(spark, t) for t in (ev2, archive)}
    compact_table(spark, database, "ev2", OPTIONS)
    compact_table(spark, database, "ev2_archive", OPTIONS)
    assert [b.source for b in find_backups(spark, database, ev2)] == [ev2]

    assert len(rollback_table(spark, database, "ev2")) == 1
    assert names(data_dir / "ev2" / "date=2024-01-01") == originals["ev2"]
    assert len(data_files(data_dir / "ev2_archive" / "date=2024-01-01")) == 1  # untouched
    assert [b.source for b in find_backups(spark, database)] == [archive]

    compact_table(spark, database, "ev2", OPTIONS)
    lines = cleanup_backups(spark, table=ev2)
    assert len(lines) == 1 and "backup of " + ev2 + ")" in lines[0]
    assert [b.source for b in find_backups(spark, database)] == [archive]
    assert not [d for d in hidden_dirs(data_dir / "ev2")]
    assert hidden_dirs(data_dir / "ev2_archive")  # its originals are still kept
    assert rollback_table(spark, database, "ev2_archive")
    assert names(data_dir / "ev2_archive" / "date=2024-01-01") == originals["ev2_archive"]
    assert {t: rows_of(spark, t) for t in (ev2, archive)} == before


def test_rollback_keeps_rows_appended_after_the_compaction(spark, database, data_dir):
    table = make_table(spark, database, "ap", data_dir, partitions=DATES, files=3)
    before = rows_of(spark, table)
    compact_table(spark, database, "ap", OPTIONS)
    spark.sql(f"INSERT INTO {table} PARTITION (date='2024-01-02') VALUES (777, 'after', 0)")
    lines = rollback_table(spark, database, "ap", partition="date=2024-01-02")
    assert lines == [
        f"{table} date=2024-01-02: restored from {find_backups(spark, database, table)[0].name}, "
        "1 file(s) appended since the compaction kept"
    ]
    assert rows_of(spark, table) == sorted([*before, (777, "after", 0, "2024-01-02")])
    assert len(data_files(data_dir / "date=2024-01-01")) == 1  # the other partition stays compacted
    assert len(data_files(data_dir / "date=2024-01-02")) == 4
    rollback_table(spark, database, "ap")  # the rest of the backup; then it is dropped
    assert find_backups(spark, database, table) == [] and hidden_dirs(data_dir) == []
    with pytest.raises(OperationError, match="no backup to roll back"):
        rollback_table(spark, database, "ap")


def test_rollback_of_an_older_backup_refuses_after_a_newer_compaction(spark, database, data_dir):
    table = make_table(spark, database, "rc", data_dir, partitions=DATES[:1], files=3)
    compact_table(spark, database, "rc", OPTIONS)
    first = find_backups(spark, database, table)[0].name
    spark.sql(f"INSERT INTO {table} PARTITION (date='2024-01-01') VALUES (1, 'x', 1)")
    compact_table(spark, database, "rc", CompactionOptions(OPTIONS.thresholds, force=True))
    live = names(data_dir / "date=2024-01-01")
    with pytest.raises(OperationError, match="no longer holds the files compaction run"):
        rollback_table(spark, database, "rc", backup=first)
    assert names(data_dir / "date=2024-01-01") == live
    assert len(find_backups(spark, database, table)) == 2
    with pytest.raises(OperationError, match="is not a backup of"):
        rollback_table(spark, database, "rc", backup="nope")


def test_cleanup_older_than_and_dry_run(spark, database, data_dir):
    table = make_table(spark, database, "old", data_dir, files=3)
    compact_table(spark, database, "old", OPTIONS)
    (backup,) = find_backups(spark, database, table)
    assert cleanup_backups(spark, database=database, older_than_seconds=parse_duration("7d")) == []
    (line,) = cleanup_backups(spark, database=database, dry_run=True)
    assert line.startswith(f"would drop {database}.{backup.name}") and ".lk-old-" in line
    assert find_backups(spark, database, table) and hidden_dirs(data_dir.parent)
    (line,) = cleanup_backups(spark, database=database, older_than_seconds=0, skip_trash=True)
    assert "deleted" in line
    assert find_backups(spark, database, table) == [] and not hidden_dirs(data_dir.parent)
    assert len(rows_of(spark, table)) == 200
    with pytest.raises(ConfigError, match="not a duration"):
        parse_duration("seven days")
