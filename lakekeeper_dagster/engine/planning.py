"""Which partitions to compact and into how many files: pure Python, printable as a dry-run report."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

NEEDS_COMPACTION = "NEEDS COMPACTION"
OK = "OK"
SKIPPED = "SKIPPED"


@dataclass(frozen=True)
class Thresholds:
    """Lakekeeper's rule: compact when the typical file is smaller than block_size / ratio."""

    block_size_bytes: int
    ratio: float
    statistic: str = "average"

    def __post_init__(self) -> None:
        if self.block_size_bytes <= 0:
            raise ValueError(f"block_size_bytes must be > 0, got {self.block_size_bytes}")
        if self.ratio <= 0:
            raise ValueError(f"compaction_ratio_threshold must be > 0, got {self.ratio}")
        if self.statistic not in ("average", "median"):
            raise ValueError(f"size_statistic must be 'average' or 'median', got {self.statistic!r}")

    @property
    def small_file_bytes(self) -> float:
        return self.block_size_bytes / self.ratio


@dataclass(frozen=True)
class PartitionPlan:
    """The decision for one unit (a partition, or a whole unpartitioned table)."""

    partition: str | None
    location: str
    file_count: int
    total_bytes: int
    average_bytes: float
    median_bytes: float
    threshold_bytes: float
    target_files: int
    status: str
    reason: str

    @property
    def needs_compaction(self) -> bool:
        return self.status == NEEDS_COMPACTION


@dataclass
class TablePlan:
    database: str
    table: str
    status: str
    reason: str = ""
    file_format: str | None = None
    partitions: list[PartitionPlan] = field(default_factory=list)

    @property
    def qualified_name(self) -> str:
        return f"{self.database}.{self.table}"

    @property
    def to_compact(self) -> list[PartitionPlan]:
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


def target_file_count(total_bytes: int, block_size_bytes: int) -> int:
    """ceil(bytes / block size), at least 1."""
    return max(1, math.ceil(total_bytes / block_size_bytes))


def plan_unit(
    partition: str | None,
    location: str,
    file_count: int,
    total_bytes: int,
    median_bytes: float,
    thresholds: Thresholds,
    subdirectories: bool = False,
) -> PartitionPlan:
    """Decide whether one partition (or unpartitioned table) needs compaction and its target file count."""
    average = total_bytes / file_count if file_count else 0.0
    target = target_file_count(total_bytes, thresholds.block_size_bytes)
    typical = median_bytes if thresholds.statistic == "median" else average
    if subdirectories:
        status, reason = SKIPPED, "holds subdirectories with data files; it is not compacted (look at them first)"
    elif file_count == 0:
        status, reason = OK, "no data files"
    elif file_count == 1:
        status, reason = OK, "single file"
    elif file_count <= target:
        status, reason = OK, f"already at target ({file_count} files <= {target})"
    elif typical >= thresholds.small_file_bytes:
        status, reason = (
            OK,
            (
                f"{thresholds.statistic} file size {human_bytes(typical)} >= threshold "
                f"{human_bytes(thresholds.small_file_bytes)}"
            ),
        )
    else:
        status, reason = (
            NEEDS_COMPACTION,
            (
                f"{file_count} files, {thresholds.statistic} {human_bytes(typical)} < threshold "
                f"{human_bytes(thresholds.small_file_bytes)}; target {target}"
            ),
        )
    return PartitionPlan(
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


@dataclass(frozen=True)
class Batching:
    """How units are grouped: a batch's units are written concurrently, verified in one Spark job, registered in the
    backup and committed with one metastore call each; its staged copies are what needs free space at once."""

    max_units: int = 100
    max_bytes: int = 8 * 1024**3
    concurrent_jobs: int = 4

    def __post_init__(self) -> None:
        for name in ("max_units", "max_bytes", "concurrent_jobs"):
            if getattr(self, name) < 1:
                raise ValueError(f"batching.{name} must be >= 1, got {getattr(self, name)}")


def batches(sizes: list[int], batching: Batching) -> list[list[int]]:
    """Consecutive groups of unit indexes, each at most `max_units` long and `max_bytes` big (a unit bigger than
    `max_bytes` goes alone)."""
    groups: list[list[int]] = []
    current: list[int] = []
    total = 0
    for index, size in enumerate(sizes):
        if current and (len(current) >= batching.max_units or total + size > batching.max_bytes):
            groups.append(current)
            current, total = [], 0
        current.append(index)
        total += size
    if current:
        groups.append(current)
    return groups


def plan_table(database: str, table: str, file_format: str, units: list[PartitionPlan]) -> TablePlan:
    """Roll per-unit decisions up to a table status; an empty table is skipped with that reason."""
    if not units or all(u.file_count == 0 for u in units):
        return TablePlan(database, table, SKIPPED, "empty table (no data files)", file_format, units)
    status = NEEDS_COMPACTION if any(u.needs_compaction for u in units) else OK
    return TablePlan(database, table, status, "", file_format, units)


def skipped_table(database: str, table: str, reason: str, file_format: str | None = None) -> TablePlan:
    return TablePlan(database, table, SKIPPED, reason, file_format)


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KB' (binary units, as Lakekeeper's report)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


def render_report(plans: list[TablePlan]) -> str:
    """The human dry-run report: per table and partition, status, files, size, average, threshold, target."""
    lines: list[str] = []
    for plan in plans:
        lines.append(f"Table: {plan.qualified_name}")
        if plan.status == SKIPPED:
            lines.append(f"  Status   : SKIPPED: {plan.reason}")
            lines.append("")
            continue
        lines.append(f"  Status   : {plan.status}")
        lines.append(f"  Format   : {plan.file_format}")
        lines.append(f"  Files    : {plan.file_count}")
        lines.append(f"  Size     : {human_bytes(plan.total_bytes)}")
        for unit in plan.partitions:
            label = unit.partition or "(whole table)"
            lines.append(
                f"    {label:<40} {unit.status:<17} files={unit.file_count:<6} size={human_bytes(unit.total_bytes):<9}"
                f" avg={human_bytes(unit.average_bytes):<9} threshold={human_bytes(unit.threshold_bytes):<9}"
                f" target={unit.target_files}"
            )
        lines.append("")
    return "\n".join(lines)
