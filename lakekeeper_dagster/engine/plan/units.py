"""Which units to compact and into how many files: pure Python, printable as a dry-run report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from lakekeeper_dagster.engine.plan.thresholds import Thresholds, human_bytes, target_file_count
from lakekeeper_dagster.engine.statuses import PlanStatus


@dataclass(frozen=True)
class UnitPlan:
    """The decision for one unit (a partition, or a whole unpartitioned table)."""

    partition: str | None
    location: str
    file_count: int
    total_bytes: int
    average_bytes: float
    median_bytes: float
    threshold_bytes: float
    target_files: int
    status: PlanStatus
    reason: str

    @property
    def needs_compaction(self) -> bool:
        return self.status == PlanStatus.NEEDS_COMPACTION


@dataclass
class TablePlan:
    database: str
    table: str
    status: PlanStatus
    reason: str = ""
    file_format: str | None = None
    partitions: list[UnitPlan] = field(default_factory=list)

    @property
    def qualified_name(self) -> str:
        return f"{self.database}.{self.table}"

    @property
    def to_compact(self) -> list[UnitPlan]:
        return [p for p in self.partitions if p.needs_compaction]

    @property
    def file_count(self) -> int:
        return sum(p.file_count for p in self.partitions)

    @property
    def total_bytes(self) -> int:
        return sum(p.total_bytes for p in self.partitions)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["file_count"] = self.file_count
        data["total_bytes"] = self.total_bytes
        return data


def plan_unit(
    partition: str | None,
    location: str,
    file_count: int,
    total_bytes: int,
    median_bytes: float,
    thresholds: Thresholds,
    subdirectories: bool = False,
) -> UnitPlan:
    """Decide whether one partition (or unpartitioned table) needs compaction and its target file count."""
    average = total_bytes / file_count if file_count else 0.0
    target = target_file_count(total_bytes, thresholds.block_size_bytes)
    typical = median_bytes if thresholds.statistic == "median" else average
    if subdirectories:
        status, reason = (
            PlanStatus.SKIPPED,
            "holds subdirectories with data files; it is not compacted (look at them first)",
        )
    elif file_count == 0:
        status, reason = PlanStatus.OK, "no data files"
    elif file_count == 1:
        status, reason = PlanStatus.OK, "single file"
    elif file_count <= target:
        status, reason = PlanStatus.OK, f"already at target ({file_count} files <= {target})"
    elif typical >= thresholds.small_file_bytes:
        status, reason = (
            PlanStatus.OK,
            (
                f"{thresholds.statistic} file size {human_bytes(typical)} >= threshold "
                f"{human_bytes(thresholds.small_file_bytes)}"
            ),
        )
    else:
        status, reason = (
            PlanStatus.NEEDS_COMPACTION,
            (
                f"{file_count} files, {thresholds.statistic} {human_bytes(typical)} < threshold "
                f"{human_bytes(thresholds.small_file_bytes)}; target {target}"
            ),
        )
    return UnitPlan(
        partition=partition,
        location=location,
        file_count=file_count,
        total_bytes=total_bytes,
        average_bytes=average,
        median_bytes=median_bytes,
        threshold_bytes=thresholds.small_file_bytes,
        target_files=target,
        status=status,
        reason=reason,
    )


def plan_table(database: str, table: str, file_format: str, units: list[UnitPlan]) -> TablePlan:
    """Roll per-unit decisions up to a table status; an empty table is skipped with that reason."""
    if not units or all(u.file_count == 0 for u in units):
        return TablePlan(database, table, PlanStatus.SKIPPED, "empty table (no data files)", file_format, units)
    status = PlanStatus.NEEDS_COMPACTION if any(u.needs_compaction for u in units) else PlanStatus.OK
    return TablePlan(database, table, status, "", file_format, units)


def skipped_table(database: str, table: str, reason: str, file_format: str | None = None) -> TablePlan:
    return TablePlan(database, table, PlanStatus.SKIPPED, reason, file_format)
