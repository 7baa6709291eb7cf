"""Which units to compact and into how many files: pure Python, printable as a dry-run report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from lakekeeper_dagster.engine.fs.dirstats import DirStats
from lakekeeper_dagster.engine.fs.storage import DataFile
from lakekeeper_dagster.engine.plan.thresholds import Thresholds, human_bytes, target_file_count
from lakekeeper_dagster.engine.statuses import PlanStatus


@dataclass(frozen=True)
class UnitPlan:
    """The decision for one unit (a partition, or a whole unpartitioned table).

    Only its small files are rewritten (into `write_files` files); its large files are left as they are.
    `target_files` is what the unit holds once compacted: the files written plus the large files kept.
    """

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
    small_files: int = 0
    small_bytes: int = 0
    large_files: int = 0
    write_files: int = 0
    rewrite: tuple[str, ...] | None = None  # the names of the files rewritten when not the small ones (recompression)

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


def rewritten_files(files: list[DataFile], plan: UnitPlan, thresholds: Thresholds) -> list[DataFile]:
    """The files of a unit a compaction rewrites: its small ones (the large ones are left alone, carried by the
    swap), or those a recompression names (`plan.rewrite`)."""
    if plan.rewrite is not None:
        return [f for f in files if f.name in set(plan.rewrite)]
    return list(files) if plan.large_files == 0 else [f for f in files if thresholds.is_small(f.size)]


def recompressed(plan: UnitPlan, reason: str, files: list[DataFile], others: set[str], thresholds: Thresholds):
    """`plan` turned into the rewrite, to change their codec, of the unit's files at the paths `others` and of its
    small files; its large files already in the codec are left alone (one late file in another codec does not make
    a large partition rewritten whole)."""
    rewrite = [f for f in files if f.path in others or thresholds.is_small(f.size)]
    size = sum(f.size for f in rewrite)
    write = target_file_count(size, thresholds.block_size_bytes)
    kept = len(files) - len(rewrite)
    return replace(
        plan,
        status=PlanStatus.NEEDS_COMPACTION,
        reason=reason,
        small_files=len(rewrite),
        small_bytes=size,
        large_files=kept,
        write_files=write,
        target_files=write + kept,
        rewrite=tuple(f.name for f in rewrite),
    )


def _decision(stats: DirStats, thresholds: Thresholds, write: int, force: bool) -> tuple[PlanStatus, str]:
    """The size rule on a unit's small files (see `Thresholds`)."""
    small, large = stats.small_count, stats.file_count - stats.small_count
    limit = human_bytes(thresholds.min_file_bytes)
    kept = f"; {large} large file(s) (>= {limit}) left as they are" if large else ""
    typical = stats.small_median_bytes if thresholds.statistic == "median" else stats.small_bytes / max(1, small)
    if stats.file_count == 0:
        return PlanStatus.OK, "no data files"
    if small < thresholds.min_input_files:
        return PlanStatus.OK, (
            f"{small} small file(s) (< {limit}), fewer than min_input_files {thresholds.min_input_files}{kept}"
        )
    if write >= small:
        return PlanStatus.OK, (
            f"cannot get better: its {small} small file(s) ({human_bytes(stats.small_bytes)}) would be rewritten "
            f"into {write}{kept}"
        )
    summary = f"{small} small file(s) ({human_bytes(stats.small_bytes)}), {thresholds.statistic} {human_bytes(typical)}"
    if typical < thresholds.small_file_bytes:
        return PlanStatus.NEEDS_COMPACTION, (
            f"{summary} < threshold {human_bytes(thresholds.small_file_bytes)}; rewritten into {write}{kept}"
        )
    if force:
        return PlanStatus.NEEDS_COMPACTION, f"forced: {summary}; rewritten into {write}{kept}"
    return PlanStatus.OK, f"{summary} >= threshold {human_bytes(thresholds.small_file_bytes)}{kept}"


def plan_unit(
    partition: str | None,
    location: str,
    stats: DirStats,
    thresholds: Thresholds,
    subdirectories: bool = False,
    force: bool = False,
) -> UnitPlan:
    """Decide whether one partition (or unpartitioned table) needs compaction, and into how many files.

    The one rule of planning, the dry-run report, the observations and sensors, and the run: only the small files
    (`stats.small_*`, below `thresholds.min_file_bytes`) count and are rewritten, when there are at least
    `min_input_files` of them, their typical size is below the threshold (unless `force`) and rewriting them
    reduces their number (ceil(small bytes / block size) < small files).
    """
    write = target_file_count(stats.small_bytes, thresholds.block_size_bytes)
    large = stats.file_count - stats.small_count
    if subdirectories:
        status, reason = (
            PlanStatus.SKIPPED,
            "holds subdirectories with data files; it is not compacted (look at them first)",
        )
    else:
        status, reason = _decision(stats, thresholds, write, force)
    compacts = status == PlanStatus.NEEDS_COMPACTION
    return UnitPlan(
        partition=partition,
        location=location,
        file_count=stats.file_count,
        total_bytes=stats.total_bytes,
        average_bytes=stats.average_bytes,
        median_bytes=stats.median_bytes,
        threshold_bytes=thresholds.small_file_bytes,
        target_files=write + large if compacts else stats.file_count,
        status=status,
        reason=reason,
        small_files=stats.small_count,
        small_bytes=stats.small_bytes,
        large_files=large,
        write_files=write if compacts else 0,
    )


def plan_table(database: str, table: str, file_format: str, units: list[UnitPlan]) -> TablePlan:
    """Roll per-unit decisions up to a table status; an empty table is skipped with that reason."""
    if not units or all(u.file_count == 0 for u in units):
        return TablePlan(database, table, PlanStatus.SKIPPED, "empty table (no data files)", file_format, units)
    status = PlanStatus.NEEDS_COMPACTION if any(u.needs_compaction for u in units) else PlanStatus.OK
    if status == PlanStatus.OK and any(u.status == PlanStatus.SUSPENDED for u in units):
        status = PlanStatus.SUSPENDED
    return TablePlan(database, table, status, "", file_format, units)


def skipped_table(database: str, table: str, reason: str, file_format: str | None = None) -> TablePlan:
    return TablePlan(database, table, PlanStatus.SKIPPED, reason, file_format)
