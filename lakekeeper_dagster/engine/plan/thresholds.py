"""The size rule and the batching of a run: pure Python."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum

from lakekeeper_dagster.engine.errors import ConfigError


@dataclass(frozen=True)
class Thresholds:
    """The size rule: a file is small below `min_file_ratio` x block size (large files are left alone); a unit's
    small files are compacted when there are at least `min_input_files` of them, their typical size is below
    block size / `ratio` (Lakekeeper's rule) and rewriting them reduces their number."""

    block_size_bytes: int
    ratio: float
    statistic: str = "average"
    min_file_ratio: float = 0.75
    min_input_files: int = 2

    def __post_init__(self) -> None:
        if self.block_size_bytes <= 0:
            raise ConfigError(f"block_size_bytes must be > 0, got {self.block_size_bytes}")
        if self.ratio <= 0:
            raise ConfigError(f"compaction_ratio_threshold must be > 0, got {self.ratio}")
        if self.statistic not in ("average", "median"):
            raise ConfigError(f"size_statistic must be 'average' or 'median', got {self.statistic!r}")
        if not 0 < self.min_file_ratio <= 1:
            raise ConfigError(f"min_file_size_ratio must be > 0 and <= 1, got {self.min_file_ratio}")
        if self.min_input_files < 2:
            raise ConfigError(
                f"min_input_files must be >= 2 (one file alone is never rewritten), got {self.min_input_files}"
            )

    @property
    def small_file_bytes(self) -> float:
        return self.block_size_bytes / self.ratio

    @property
    def min_file_bytes(self) -> float:
        """A file smaller than this is small (rewritten); a file of at least this size is large (left alone)."""
        return self.block_size_bytes * self.min_file_ratio

    def is_small(self, size: int) -> bool:
        return size < self.min_file_bytes


def target_file_count(total_bytes: int, block_size_bytes: int) -> int:
    """ceil(bytes / block size), at least 1."""
    return max(1, math.ceil(total_bytes / block_size_bytes))


class WriteMode(str, Enum):
    """How a batch's partitions are written: in one Spark job per set of write settings, or one job each."""

    ONE_JOB = "one_job"
    PER_UNIT = "per_unit"


@dataclass(frozen=True)
class Batching:
    """How units are grouped: a batch's units are written together (`write_mode`), verified in one Spark job,
    registered in the backup and committed with one metastore call each; its staged copies are what needs free
    space at once."""

    max_units: int = 100
    max_bytes: int = 8 * 1024**3
    concurrent_jobs: int = 4
    write_mode: WriteMode = WriteMode.ONE_JOB

    def __post_init__(self) -> None:
        object.__setattr__(self, "write_mode", WriteMode(self.write_mode))
        for name in ("max_units", "max_bytes", "concurrent_jobs"):
            if getattr(self, name) < 1:
                raise ConfigError(f"batching.{name} must be >= 1, got {getattr(self, name)}")


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


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KB' (binary units, as Lakekeeper's report)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1024 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"
