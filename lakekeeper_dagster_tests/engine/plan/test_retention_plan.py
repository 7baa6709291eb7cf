"""Retention's plan, pure Python: the newest timed partition stays, locations missing, outside or shared are kept
with their reason, untimed partitions are reported, and the max-fraction guard counts every partition."""

from __future__ import annotations

from datetime import datetime

import pytest

from lakekeeper_dagster.engine.plan.partition_time import PartitionClock
from lakekeeper_dagster.engine.plan.retention import RetentionCandidate, plan_retention

pytestmark = pytest.mark.pure

ROOT = "file:/data/t"
CLOCK = PartitionClock.of({"dt": "%Y%m%d"}, "db.t")
CUTOFF = datetime(2024, 1, 1)


def part(value: str, location: str | None = None, files: int | None = 1) -> RetentionCandidate:
    return RetentionCandidate(f"dt={value}", {"dt": value}, location or f"{ROOT}/dt={value}", files, 10 * (files or 0))


def plan(partitions, max_fraction: float = 1.0, force: bool = False):
    return plan_retention("db.t", ROOT, partitions, CLOCK, CUTOFF, max_fraction, force)


def names(items) -> list[str]:
    return [item.candidate.partition for item in items]


def test_the_newest_timed_partition_stays_when_every_one_is_older():
    found = plan([part("20230101"), part("20230102"), part("bad")])
    assert names(found.drop) == ["dt=20230101"] and found.untimed == ("dt=bad",)
    assert [(i.candidate.partition, i.reason) for i in found.kept] == [
        ("dt=20230102", "the newest period's partitions are never dropped")
    ]
    assert (found.files, found.bytes) == (1, 10)


def test_missing_outside_and_shared_locations_are_kept_with_their_reason():
    found = plan(
        [
            part("20230101", files=None),  # missing
            part("20230102", location="file:/elsewhere/x"),
            part("20230104", location=f"{ROOT}/dt=20240105/sub"),  # inside a kept (newer) partition's directory
            part("20230105", location=f"{ROOT}/shared"),
            part("20230106", location=f"{ROOT}/shared/inner"),  # inside that shared directory
            part("20240105"),
            part("20240106", location=f"{ROOT}/shared"),  # newer, same directory as 20230105
            part("20230107"),
        ]
    )
    reasons = {i.candidate.partition: i.reason for i in found.kept}
    assert "is missing" in reasons["dt=20230101"]
    assert "not inside the table's location" in reasons["dt=20230102"]
    assert all("shared with a partition that is kept" in reasons[f"dt=2023010{n}"] for n in (4, 5, 6))
    assert names(found.drop) == ["dt=20230107"] and found.refusal is None


def test_a_partition_at_the_tables_own_directory_keeps_the_ones_below_it():
    """Its directory holds every other partition's: moving one of them away could take files it reads."""
    found = plan([part("20230101"), part("20230102", location=ROOT), part("20240105")])
    reasons = {i.candidate.partition: i.reason for i in found.kept}
    assert "not inside the table's location" in reasons["dt=20230102"]
    assert reasons["dt=20230101"] == f"its location is shared with a partition that is kept ({ROOT})"
    assert found.drop == ()


def test_the_guard_counts_every_partition_and_force_lifts_it():
    partitions = [part("20230101"), part("20230102"), part("20240105"), part("bad")]
    assert plan(partitions, max_fraction=0.5).refusal is None  # 2 of 4
    refused = plan(partitions, max_fraction=0.4)
    assert "dropping 2 of its 4 partitions is more than table_overrides.db.t.retention.max_fraction (0.4)" in (
        refused.refusal or ""
    )
    assert "REFUSED: db.t: dropping 2" in "\n".join(refused.lines(dry_run=True))
    assert plan(partitions, max_fraction=0.4, force=True).refusal is None


def test_every_partition_of_the_newest_period_stays():
    """Two partitions of the newest hour (region=eu and region=us): both kept, not only the last one by name."""
    clock = PartitionClock.of({"dt": "%Y%m%d%H"}, "db.t")
    parts = [
        RetentionCandidate(f"dt={dt}/region={r}", {"dt": dt, "region": r}, f"{ROOT}/dt={dt}/region={r}", 1, 10)
        for dt in ("2023010100", "2023010101")
        for r in ("eu", "us")
    ]
    found = plan_retention("db.t", ROOT, parts, clock, CUTOFF, 1.0)
    assert names(found.drop) == ["dt=2023010100/region=eu", "dt=2023010100/region=us"]
    assert names(found.kept) == ["dt=2023010101/region=eu", "dt=2023010101/region=us"]
