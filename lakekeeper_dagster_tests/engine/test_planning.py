"""Planning is pure Python: Lakekeeper's small-file rule, target counts and the dry-run report."""

from __future__ import annotations

import pytest

from lakekeeper_dagster.engine.plan.report import render_report
from lakekeeper_dagster.engine.plan.thresholds import Batching, Thresholds, batches, target_file_count
from lakekeeper_dagster.engine.plan.units import plan_table, plan_unit
from lakekeeper_dagster.engine.statuses import PlanStatus

NEEDS_COMPACTION, OK, SKIPPED = PlanStatus.NEEDS_COMPACTION, PlanStatus.OK, PlanStatus.SKIPPED

MB = 1024 * 1024
T = Thresholds(block_size_bytes=128 * MB, ratio=10.0)


def unit(files: int, total: int, median: float | None = None, thresholds: Thresholds = T):
    median = total / files if median is None and files else (median or 0.0)
    return plan_unit("p=1", "file:/x", files, total, median, thresholds)


def test_many_small_files_need_compaction_with_target_from_bytes():
    plan = unit(500, 300 * MB)
    assert plan.status == NEEDS_COMPACTION
    assert plan.target_files == 3
    assert plan.threshold_bytes == pytest.approx(12.8 * MB)


@pytest.mark.parametrize(
    ("files", "total", "reason"),
    [(0, 0, "no data files"), (1, 10, "single file"), (3, 300 * MB, "already at target")],
)
def test_units_that_are_never_rewritten(files, total, reason):
    plan = unit(files, total)
    assert plan.status == OK
    assert reason in plan.reason


def test_exactly_at_target_is_not_rewritten_even_if_files_are_small():
    # 2 files of 1 MB each against a 1 MB block: target = 2 files, so nothing to gain.
    plan = plan_unit("p", "l", 2, 2 * MB, MB, Thresholds(MB, 10.0))
    assert plan.target_files == 2
    assert plan.status == OK


def test_large_average_is_ok():
    assert unit(10, 10 * 100 * MB).status == OK


def test_skewed_sizes_average_vs_median():
    # One 2 GB file and 99 tiny ones: the average hides the small files, the median does not.
    total = 2048 * MB + 99 * 1024
    average_plan = unit(100, total, median=1024)
    median_plan = unit(100, total, median=1024, thresholds=Thresholds(128 * MB, 10.0, "median"))
    assert average_plan.status == OK
    assert median_plan.status == NEEDS_COMPACTION
    assert median_plan.target_files == 17


def test_target_file_count_is_at_least_one():
    assert target_file_count(0, MB) == 1
    assert target_file_count(MB + 1, MB) == 2


@pytest.mark.parametrize(("block", "ratio", "stat"), [(0, 10.0, "average"), (MB, 0, "average"), (MB, 1, "mode")])
def test_impossible_thresholds_are_rejected(block, ratio, stat):
    with pytest.raises(ValueError):
        Thresholds(block, ratio, stat)


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
    plan = plan_unit("p=1", "file:/x", 500, 300 * MB, 0.6 * MB, T, subdirectories=True)
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
