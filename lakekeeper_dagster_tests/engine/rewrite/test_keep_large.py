"""Large files are left alone: only a partition's small files are rewritten, the large ones are carried by the swap
(journaled, crash-recoverable) and brought back by rollback; the plan, the report and the run agree."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from lakekeeper_dagster.engine.errors import OperationError
from lakekeeper_dagster.engine.hive.backup import find_backups
from lakekeeper_dagster.engine.ops.analyze import analyze_tables
from lakekeeper_dagster.engine.ops.audit import verify_against_backup
from lakekeeper_dagster.engine.ops.cleanup import cleanup_backups
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.options import CompactionOptions
from lakekeeper_dagster.engine.ops.rollback import rollback_table
from lakekeeper_dagster.engine.plan.thresholds import Thresholds
from lakekeeper_dagster.engine.protocol.recovery import recover
from lakekeeper_dagster.engine.statuses import PlanStatus
from lakekeeper_dagster_tests.tables import DATES, MB, data_files, hidden_dirs, make_table, rows_of, run_cli

THRESHOLDS = Thresholds(MB, 10.0)  # block 1 MB: a file of at least 768 KB is large
OPTIONS = CompactionOptions(THRESHOLDS)
P1, P2 = (f"date={d['date']}" for d in DATES)


def add_large_file(spark, directory: Path, first_id: int) -> Path:
    """Append one file of at least 768 KB (40,000 rows of random text) to `directory`; return it."""
    before = set(data_files(directory))
    df = spark.range(first_id, first_id + 40_000, numPartitions=1).selectExpr(
        "id", "concat(uuid(), uuid()) AS v", "cast(id % 7 AS int) AS n"
    )
    df.write.mode("append").parquet(f"file:{directory}")
    (large,) = set(data_files(directory)) - before
    assert large.stat().st_size >= THRESHOLDS.min_file_bytes
    return large


def mixed_table(spark, database: str, name: str, root: Path, large_files: int = 1) -> list[Path]:
    """`date=2024-01-01`: 3 small files + `large_files` large ones; `date=2024-01-02`: 1 small + 1 large (it cannot
    get better: one small file alone). Returns the large files of the first partition."""
    make_table(spark, database, name, root, partitions=DATES, files=3, rows=30)
    large = [add_large_file(spark, root / P1, 100_000 + i * 100_000) for i in range(large_files)]
    for extra in data_files(root / P2)[1:]:  # leave one small file
        extra.unlink()
        extra.with_name(f".{extra.name}.crc").unlink(missing_ok=True)
    add_large_file(spark, root / P2, 900_000)
    return large


def identity(path: Path) -> tuple:
    stat = path.stat()
    return path.name, stat.st_ino, stat.st_mtime_ns, stat.st_size


def rows_in(spark, paths: list[Path]) -> list[tuple]:
    return sorted(tuple(r) for r in spark.read.parquet(*[f"file:{p}" for p in paths]).collect())


def test_large_files_stay_untouched_through_the_swap_and_come_back_with_rollback(spark, database, data_dir):
    root = data_dir / "mix"
    (large,) = mixed_table(spark, database, "mix", root)
    table = f"{database}.mix"
    before, kept = rows_of(spark, table), identity(large)
    small = [p for p in data_files(root / P1) if p != large]
    originals = {p.name: p.read_bytes() for p in data_files(root / P1)}
    small_rows = rows_in(spark, small)

    (plan,) = analyze_tables(spark, [(database, "mix")], THRESHOLDS, 3)  # the dry-run report's plan
    planned = {u.partition: u for u in plan.partitions}
    assert planned[P1].status == PlanStatus.NEEDS_COMPACTION
    assert (planned[P1].small_files, planned[P1].large_files, planned[P1].target_files) == (3, 1, 2)
    assert "1 large file(s) (>= 768.0 KB) left as they are" in planned[P1].reason
    assert planned[P2].status == PlanStatus.OK and "fewer than min_input_files 2" in planned[P2].reason

    results = {r.partition: r for r in compact_table(spark, database, "mix", OPTIONS)}

    assert (results[P1].status, results[P1].reason) == ("compacted", planned[P1].reason)
    assert (results[P2].status, results[P2].reason) == ("skipped", planned[P2].reason)
    assert (results[P1].files_before, results[P1].files_after, results[P1].target_files) == (4, 2, 2)
    assert results[P1].rows_before == results[P1].rows_after == len(small_rows)  # the checks cover the rewritten
    assert rows_of(spark, table) == before
    after = data_files(root / P1)
    assert identity(large) == kept and large in after  # same name, inode, modification time: never rewritten
    (written,) = [p for p in after if p != large]
    assert rows_in(spark, [written]) == small_rows
    (old,) = root.glob(".lk-old-*")
    assert sorted(p.name for p in data_files(old)) == sorted(p.name for p in small)  # the backup: the rewritten
    (comparison,) = [c for c in verify_against_backup(spark, database, "mix") if c.partition == P1]
    assert comparison.matches and comparison.backup_rows == comparison.live_rows == 30 + 40_000  # small + kept

    elsewhere = data_dir.parent / "elsewhere-mix"  # moved: a restore by hand must keep the large file, named
    elsewhere.mkdir()
    spark.sql(f"ALTER TABLE {table} PARTITION (date='2024-01-01') SET LOCATION '{elsewhere.as_uri()}'")
    with pytest.raises(OperationError, match=f"together with the large file.*{large.name}; not in the backup table"):
        rollback_table(spark, database, "mix")
    spark.sql(f"ALTER TABLE {table} PARTITION (date='2024-01-01') SET LOCATION 'file:{root / P1}'")
    rollback_table(spark, database, "mix")

    restored = data_files(root / P1)
    assert {p.name: p.read_bytes() for p in restored} == originals
    assert identity(large) == kept  # brought back in place, the same file
    assert rows_of(spark, table) == before
    assert hidden_dirs(data_dir) == [] and find_backups(spark, database, table) == []


def test_cleanup_keeps_the_large_files_and_deletes_only_the_rewritten_originals(spark, database, data_dir):
    root = data_dir / "mixc"
    (large,) = mixed_table(spark, database, "mixc", root)
    kept, before = identity(large), rows_of(spark, f"{database}.mixc")
    compact_table(spark, database, "mixc", OPTIONS)

    cleanup_backups(spark, table=f"{database}.mixc", older_than_seconds=0, skip_trash=True)

    assert find_backups(spark, database, f"{database}.mixc") == []
    assert hidden_dirs(data_dir) == [] and identity(large) == kept
    assert rows_of(spark, f"{database}.mixc") == before


COMPACTION_KILLS = ["retired", "carrying_kept", "kept_carried"]


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "point"), [("compact", p) for p in COMPACTION_KILLS] + [("rollback", "carrying_kept")]
)
def test_a_mixed_partition_killed_at_each_step_of_its_carry_is_recovered(
    spark, metastore, database, data_dir, tmp_path, command, point
):
    root = data_dir / "mk"
    large = mixed_table(spark, database, "mk", root, large_files=2)  # two: a kill between them leaves one moved
    table, kept = f"{database}.mk", sorted(identity(p) for p in large)
    before, originals = rows_of(spark, table), sorted(p.name for p in data_files(root / P1))
    if command == "rollback":
        compact_table(spark, database, "mk", OPTIONS)
    args = [command, "--table", table] + (["--block-size", "1"] if command == "compact" else [])

    crashed = run_cli(args, tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": f"kill@{point}"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    recover(spark, [(database, "mk")])

    assert rows_of(spark, table) == before
    found = [p for p in root.rglob("*") if p.name in {k[0] for k in kept}]
    assert sorted(identity(p) for p in found) == kept and all(p.parent == root / P1 for p in found)  # once, live
    names = sorted(p.name for p in data_files(root / P1))
    if command == "compact":
        assert len(names) == 3 and set(k[0] for k in kept) < set(names)  # the small files swapped for one
        assert not [d for d in hidden_dirs(data_dir) if "staging" in d]
    else:
        assert names == originals and hidden_dirs(data_dir) == []


@pytest.mark.crash
@pytest.mark.slow
def test_undoing_a_swap_after_part_of_the_carry_loses_no_file(spark, metastore, database, data_dir, tmp_path):
    """Killed with one large file carried into the new data, then the partition written again before recovery: the
    swap is undone and every original, the carried one included, is back in the retired directory."""
    root = data_dir / "mu"
    large = mixed_table(spark, database, "mu", root, large_files=2)
    table, kept = f"{database}.mu", sorted(identity(p) for p in large)
    originals = {p.name: p.read_bytes() for p in data_files(root / P1)}
    args = ["compact", "--table", table, "--block-size", "1"]

    crashed = run_cli(args, tmp_path, metastore.uri, {"LAKEKEEPER_FAULT": "kill@carrying_kept"})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    (staging,) = root.glob(".lk-staging-*")
    assert len([p for p in data_files(staging) if p.name in originals]) == 1  # one large file carried, one not
    (root / P1).mkdir()  # a writer re-creates the partition meanwhile
    (root / P1 / "newer.parquet").write_bytes(next(iter(originals.values())))
    messages = recover(spark, [(database, "mu")])

    assert any("written again" in m for m in messages), messages
    (old,) = root.glob(".lk-old-*")
    assert {p.name: p.read_bytes() for p in data_files(old)} == originals  # nothing lost, nothing merged
    assert sorted(identity(p) for p in data_files(old) if p.name in {k[0] for k in kept}) == kept
    assert not list(root.glob(".lk-staging-*"))
    assert [p.name for p in data_files(root / P1)] == ["newer.parquet"]
