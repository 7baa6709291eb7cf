"""The size statistics of a directory's data files: what planning decides on (pure Python)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from lakekeeper_dagster.engine.fs.storage import DataFile


@dataclass(frozen=True)
class DirStats:
    """Data files directly under a directory (hidden `_`/`.` files excluded), and those of them below a size limit
    (the small files, which a compaction rewrites)."""

    location: str
    file_count: int
    total_bytes: int
    median_bytes: float
    small_count: int = 0
    small_bytes: int = 0
    small_median_bytes: float = 0.0

    @property
    def average_bytes(self) -> float:
        return self.total_bytes / self.file_count if self.file_count else 0.0

    @classmethod
    def of(cls, location: str, files: list[DataFile], small_below: float) -> DirStats:
        """The statistics of `files`; a file is small when its size < `small_below`."""
        sizes = [f.size for f in files]
        small = [s for s in sizes if s < small_below]
        return cls(
            location,
            len(sizes),
            sum(sizes),
            _median(sizes),
            len(small),
            sum(small),
            _median(small),
        )


def _median(sizes: list[int]) -> float:
    return float(statistics.median(sizes)) if sizes else 0.0
