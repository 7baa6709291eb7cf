"""Rollback and cleanup on real tables: exact restore, appends kept, backups found by properties, not prefixes."""

from __future__ import annotations

import os
import shutil

import pytest

from lakekeeper_dagster.engine.errors import ConfigError, OperationError
from lakekeeper_dagster.engine.hive.backup import find_backups
from lakekeeper_dagster.engine.ops.cleanup import cleanup_backups, parse_duration
from lakekeeper_dagster.engine.ops.compaction import CompactionOptions, compact_table
from lakekeeper_dagster.engine.ops.rollback import rollback_table
from lakekeeper_dagster_tests.tables import DATES, OPTIONS, data_files, hidden_dirs, make_table, rows_of, write_files


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


def test_rollback_refuses_what_it_cannot_carry_and_carries_late_data(spark, database, data_dir):
    """A hidden file or a subdirectory in the partition at rollback time is refused (named, nothing changed); once
    they are gone, a late data file is carried, and only the compaction's output is retired."""
    table = make_table(spark, database, "rf", data_dir, partitions=DATES[:1], files=3)
    originals, before = names(data_dir / "date=2024-01-01"), rows_of(spark, table)
    compact_table(spark, database, "rf", OPTIONS)
    partition = data_dir / "date=2024-01-01"
    compacted, old = names(partition), hidden_dirs(data_dir)
    hidden = partition / ".operator-notes"
    hidden.write_text("mine")
    with pytest.raises(OperationError, match=r"hidden files this rollback would not carry back \(.operator-notes\)"):
        rollback_table(spark, database, "rf")
    hidden.unlink()
    nested = partition / "HIVE_UNION_SUBDIR_1"
    nested.mkdir()
    (nested / "000000_0").write_text("nested data")
    with pytest.raises(OperationError, match="holds subdirectories \\(HIVE_UNION_SUBDIR_1\\)"):
        rollback_table(spark, database, "rf")
    assert (nested / "000000_0").read_text() == "nested data"
    assert names(partition) == compacted and hidden_dirs(data_dir) == old and find_backups(spark, database, table)
    (nested / "000000_0").unlink()
    nested.rmdir()
    assert rows_of(spark, table) == before
    spark.sql(f"INSERT INTO {table} PARTITION (date='2024-01-01') VALUES (900, 'late', 1)")
    (line,) = rollback_table(spark, database, "rf")
    assert "1 file(s) appended since the compaction kept" in line and "left in place" not in line
    assert set(originals) < set(names(partition)) and len(names(partition)) == len(originals) + 1
    assert rows_of(spark, table) == sorted([*before, (900, "late", 1, "2024-01-01")])
    assert hidden_dirs(data_dir) == [] and find_backups(spark, database, table) == []


def test_rollback_moves_the_compacted_copy_to_a_configured_trash(spark, database, data_dir, trash):
    table = make_table(spark, database, "tr", data_dir, files=3)
    originals, before = names(data_dir), rows_of(spark, table)
    compact_table(spark, database, "tr", OPTIONS)
    compacted = names(data_dir)
    rollback_table(spark, database, "tr")
    trashed = trash / str(data_dir.parent).lstrip("/")
    assert [p.name for p in trashed.glob(".lk-rolledback-*/*") if not p.name.startswith(".")] == compacted
    assert names(data_dir) == originals and rows_of(spark, table) == before
    assert not list(data_dir.parent.glob(".lk-*"))  # the trash is in the test's home, beside data_dir


def test_rollback_refuses_a_partition_moved_in_the_metastore(spark, database, data_dir):
    table = make_table(spark, database, "mv", data_dir, partitions=DATES[:1], files=3)
    compact_table(spark, database, "mv", OPTIONS)
    partition, elsewhere = data_dir / "date=2024-01-01", data_dir.parent / "elsewhere"
    elsewhere.mkdir()
    compacted, old = names(partition), hidden_dirs(data_dir)
    spark.sql(f"ALTER TABLE {table} PARTITION (date='2024-01-01') SET LOCATION '{elsewhere.as_uri()}'")
    with pytest.raises(OperationError, match=f"partition date=2024-01-01 of {table} now points at .*elsewhere, not at"):
        rollback_table(spark, database, "mv")
    assert names(partition) == compacted and hidden_dirs(data_dir) == old and find_backups(spark, database, table)


def test_cleanup_keeps_a_backup_in_use_or_changed_and_drops_the_others(spark, database, data_dir):
    """An operator's restore by SET LOCATION onto a `.lk-old-*` directory, and a kept directory whose files
    changed: both backups are kept and reported; a third is cleaned."""
    restored = make_table(spark, database, "rs", data_dir / "rs", partitions=DATES[:1], files=3)
    changed = make_table(spark, database, "ch", data_dir / "ch", files=3)
    plain = make_table(spark, database, "pl", data_dir / "pl", files=3)
    for name in ("rs", "ch", "pl"):
        compact_table(spark, database, name, OPTIONS)
    (old_rs,) = (data_dir / "rs").glob(".lk-old-*")
    spark.sql(f"ALTER TABLE {restored} PARTITION (date='2024-01-01') SET LOCATION 'file:{old_rs}'")  # as_uri(): %3D
    (old_ch,) = data_dir.glob(".lk-old-*-ch")
    victim = data_files(old_ch)[0]
    victim.write_bytes(victim.read_bytes())  # rewritten in place: same name and size, new modification time
    os.utime(victim, (1, 1))
    lines = cleanup_backups(spark, database=database, older_than_seconds=0, skip_trash=True)
    by_source = {line.split("(backup of ")[1].split(")")[0]: line for line in lines}
    assert by_source[restored].startswith("kept") and f"is the location of {restored}" in by_source[restored]
    assert by_source[changed].startswith("kept") and "no longer holds the files" in by_source[changed]
    assert by_source[plain].startswith("dropped")
    assert [b.source for b in find_backups(spark, database)] and {b.source for b in find_backups(spark, database)} == {
        restored,
        changed,
    }
    assert old_rs.is_dir() and old_ch.is_dir() and victim.exists()
    assert len(data_files(old_rs)) == 3 and len(rows_of(spark, plain)) == 200


def test_rollback_refuses_a_late_file_named_like_an_original_and_a_journal_without_its_outputs(
    spark, database, data_dir
):
    """Hive reuses names (`000000_0`): a late file named like an original could not be carried back without
    overwriting it, and a journal missing its write record cannot tell the compaction's files from later ones."""
    root = data_dir / "nc"
    table = make_table(spark, database, "nc", root, partitions=DATES[:1], files=3)
    compact_table(spark, database, "nc", OPTIONS)
    partition = root / "date=2024-01-01"
    (old,) = root.glob(".lk-old-*")
    late = partition / names(old)[0]
    shutil.copy(data_files(old)[0], late)  # a writer reused an original's name
    before, listing = rows_of(spark, table), names(partition)
    with pytest.raises(OperationError, match=f"carry the names of original files .*{late.name}"):
        rollback_table(spark, database, "nc")
    assert rows_of(spark, table) == before and names(partition) == listing and len(names(old)) == 3

    late.unlink()
    journal = next((root.parent / ".lakekeeper-nc" / "journal").iterdir())
    written = next(p for p in sorted(journal.glob("*.json")) if '"written"' in p.read_text())
    written.write_text("{torn")  # damaged storage: the record of what the compaction wrote is gone
    with pytest.raises(OperationError, match="does not list the files it wrote"):
        rollback_table(spark, database, "nc")
    assert names(partition) == [n for n in listing if n != late.name] and len(names(old)) == 3


def test_rollback_refuses_an_output_rewritten_under_its_name(spark, database, data_dir):
    """A scrub job (or `hdfs dfs -put -f`) rewrote the compaction's output in place: rolling back would delete that
    data, so rollback refuses, naming the file, and nothing changes."""
    table = make_table(spark, database, "rw", data_dir, partitions=DATES[:1], files=3)
    compact_table(spark, database, "rw", OPTIONS)
    partition = data_dir / "date=2024-01-01"
    (output,) = data_files(partition)
    scrubbed = data_dir.parent / "scrubbed"
    write_files(spark, scrubbed.as_uri(), 5000, 7, 1, "parquet")
    shutil.copyfile(data_files(scrubbed)[0], output)
    (partition / f".{output.name}.crc").unlink()  # Hadoop's checksum of the old bytes (a writer outside Hadoop)
    rows, old = rows_of(spark, table), hidden_dirs(data_dir)
    assert [r[0] for r in rows] == list(range(5000, 5007))
    refused = f"{table} partition date=2024-01-01: file.s. compaction run .* wrote were rewritten under the same name"
    with pytest.raises(OperationError, match=refused):
        rollback_table(spark, database, "rw")
    assert names(partition) == [output.name] and rows_of(spark, table) == rows
    assert hidden_dirs(data_dir) == old and find_backups(spark, database, table)
