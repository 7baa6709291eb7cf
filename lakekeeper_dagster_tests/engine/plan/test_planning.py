"""Planning is pure Python: Lakekeeper's small-file rule, target counts and the dry-run report."""

from __future__ import annotations

import pytest

from lakekeeper_dagster.engine.fs.dirstats import DirStats
from lakekeeper_dagster.engine.fs.storage import DataFile
from lakekeeper_dagster.engine.plan.report import render_report
from lakekeeper_dagster.engine.plan.thresholds import Batching, Thresholds, batches, target_file_count
from lakekeeper_dagster.engine.plan.units import plan_table, plan_unit
from lakekeeper_dagster.engine.statuses import PlanStatus

pytestmark = pytest.mark.pure

NEEDS_COMPACTION, OK, SKIPPED = PlanStatus.NEEDS_COMPACTION, PlanStatus.OK, PlanStatus.SKIPPED

MB = 1024 * 1024
T = Thresholds(block_size_bytes=128 * MB, ratio=10.0)


def sizes(files: list[int], thresholds: Thresholds = T) -> DirStats:
    """The statistics of a directory holding files of these sizes."""
    listed = [DataFile(f"file:/x/f{i}", size, 0) for i, size in enumerate(files)]
    return DirStats.of("file:/x", listed, thresholds.min_file_bytes)


def unit(files: int, total: int, thresholds: Thresholds = T, force: bool = False):
    """A unit of `files` files of equal size."""
    stats = sizes([int(total // files)] * files if files else [], thresholds)
    return plan_unit("p=1", "file:/x", stats, thresholds, force=force)


def test_many_small_files_need_compaction_with_target_from_bytes():
    plan = unit(500, 300 * MB)
    assert plan.status == NEEDS_COMPACTION
    assert (plan.target_files, plan.write_files, plan.small_files, plan.large_files) == (3, 3, 500, 0)
    assert plan.threshold_bytes == pytest.approx(12.8 * MB)


@pytest.mark.parametrize(
    ("files", "total", "reason"),
    [
        (0, 0, "no data files"),
        (1, 10, "1 small file(s) (< 96.0 MB), fewer than min_input_files 2"),
        (3, 300 * MB, "0 small file(s) (< 96.0 MB), fewer than min_input_files 2; 3 large file(s)"),
        (2, 180 * MB, "cannot get better: its 2 small file(s) (180.0 MB) would be rewritten into 2"),
    ],
)
def test_units_that_are_never_rewritten(files, total, reason):
    plan = unit(files, total)
    assert plan.status == OK
    assert reason in plan.reason
    assert plan.target_files == files and plan.write_files == 0


def test_large_files_are_left_alone_and_only_the_small_ones_count():
    # One 120 MB file and three 1 MB ones: the three become one file, the large one stays: 2 files after.
    plan = plan_unit("p=1", "file:/x", sizes([120 * MB, MB, MB, MB]), T)
    assert plan.status == NEEDS_COMPACTION
    assert (plan.small_files, plan.small_bytes, plan.large_files) == (3, 3 * MB, 1)
    assert (plan.write_files, plan.target_files) == (1, 2)
    assert "3 small file(s) (3.0 MB)" in plan.reason and "1 large file(s) (>= 96.0 MB) left as they are" in plan.reason
    assert "target=2 small=3 (3.0 MB) large_kept=1" in render_report([plan_table("db", "t", "parquet", [plan])])
    # Under Lakekeeper's rule on every file (average 30.75 MB >= 12.8 MB) it was left with its small files.
    assert plan.average_bytes > T.small_file_bytes


def test_min_input_files_and_the_size_limit_are_settings():
    four = Thresholds(128 * MB, 10.0, min_input_files=4)
    plan = plan_unit("p", "l", sizes([120 * MB, MB, MB, MB], four), four)
    assert plan.status == OK and "3 small file(s) (< 96.0 MB), fewer than min_input_files 4" in plan.reason
    # With a limit of 0.95 x 128 MB the 120 MB file is small too: all four are rewritten (into 1, 123 MB).
    wide = Thresholds(128 * MB, 10.0, "median", min_file_ratio=0.95)
    plan = plan_unit("p", "l", sizes([120 * MB, MB, MB, MB], wide), wide)
    assert (plan.status, plan.small_files, plan.large_files, plan.write_files) == (NEEDS_COMPACTION, 4, 0, 1)


def test_exactly_at_target_is_not_rewritten_even_if_files_are_small():
    # Against a 1 MB block, 2 files of 0.5 MB are rewritten into 1; 2 of 0.7 MB would need 2: nothing to gain.
    small = Thresholds(MB, 1.0)
    assert unit(2, MB, small).status == NEEDS_COMPACTION
    plan = unit(2, 1.4 * MB, small, force=True)
    assert plan.status == OK and "cannot get better" in plan.reason


def test_large_average_is_ok_unless_forced():
    plan = unit(10, 10 * 30 * MB)
    assert plan.status == OK and "average 30.0 MB >= threshold 12.8 MB" in plan.reason
    forced = unit(10, 10 * 30 * MB, force=True)
    assert forced.status == NEEDS_COMPACTION and forced.reason.startswith("forced") and forced.write_files == 3


def test_skewed_sizes_average_vs_median_of_the_small_files():
    # 40 files of 60 MB and 59 tiny ones: the average of the small files hides the tiny ones, the median does not.
    stats = sizes([60 * MB] * 40 + [1024] * 59)
    assert plan_unit("p", "l", stats, T).status == OK
    median_plan = plan_unit("p", "l", stats, Thresholds(128 * MB, 10.0, "median"))
    assert median_plan.status == NEEDS_COMPACTION
    assert median_plan.write_files == 19


def test_target_file_count_is_at_least_one():
    assert target_file_count(0, MB) == 1
    assert target_file_count(MB + 1, MB) == 2


@pytest.mark.parametrize(
    ("block", "ratio", "stat", "keep", "inputs"),
    [(0, 10.0, "average", 0.75, 2), (MB, 0, "average", 0.75, 2), (MB, 1, "mode", 0.75, 2), (MB, 1, "average", 0, 2)]
    + [(MB, 1, "average", 1.5, 2), (MB, 1, "average", 0.75, 1)],
)
def test_impossible_thresholds_are_rejected(block, ratio, stat, keep, inputs):
    with pytest.raises(ValueError):
        Thresholds(block, ratio, stat, keep, inputs)


def test_table_status_and_report():
    empty = plan_table("db", "t", "parquet", [unit(0, 0)])
    assert empty.status == SKIPPED and "empty" in empty.reason
    mixed = plan_table("db", "t", "parquet", [unit(500, 300 * MB), unit(1, 10)])
    assert mixed.status == NEEDS_COMPACTION
    assert len(mixed.to_compact) == 1
    assert mixed.file_count == 501
    report = render_report([mixed, empty])
    assert "Table: db.t" in report
    assert "NEEDS COMPACTION" in report and "SKIPPED: empty table" in report
    assert mixed.to_dict()["file_count"] == 501


def test_a_unit_with_subdirectories_is_skipped_with_the_reason():
    plan = plan_unit("p=1", "file:/x", sizes([MB] * 500), T, subdirectories=True)
    assert plan.status == SKIPPED and not plan.needs_compaction
    assert "subdirectories" in plan.reason


def test_batches_cap_partitions_and_bytes_and_keep_order():
    batching = Batching(max_units=3, max_bytes=100)
    assert batches([10] * 7, batching) == [[0, 1, 2], [3, 4, 5], [6]]
    assert batches([60, 30, 20, 90, 5], batching) == [[0, 1], [2], [3, 4]]
    assert batches([500, 1], batching) == [[0], [1]]  # bigger than a batch: alone, never skipped
    assert batches([], batching) == []


@pytest.mark.parametrize("field", ["max_units", "max_bytes", "concurrent_jobs"])
def test_batching_must_be_positive(field):
    with pytest.raises(ValueError, match=f"batching.{field}"):
        Batching(**{field: 0})
