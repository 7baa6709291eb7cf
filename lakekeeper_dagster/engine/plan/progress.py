"""What an operation reports while it works: typed progress events, one line each when people read them.

Every long operation takes a `progress` callback (default `no_progress`) and calls it once per event: a compaction
its plan, each batch as it starts, each unit written, verified, swapped and committed (or skipped, or failed, with
the reason), and what it waits for (writers still writing into the table); rollback, recovery and cleanup each unit
or backup they finish. The surface turns events into log lines (Dagster) or a progress bar (the CLI on a terminal).
Reporting never changes what an operation does: `serialized` calls the callback from one thread at a time (a batch's
units are written by several) and a callback that raises is logged and ignored.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from lakekeeper_dagster.engine.plan.thresholds import human_bytes
from lakekeeper_dagster.engine.statuses import ProgressStep

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProgressEvent:
    """One step of one unit (its partition; None: the whole table) or of the run (`unit` None), with its figures."""

    step: ProgressStep
    table: str
    unit: str | None = None
    partitioned: bool = True
    batch: int = 0  # 1-based, of `batches`
    batches: int = 0
    units: int = 0
    files_before: int | None = None
    files_after: int | None = None
    bytes_before: int | None = None
    bytes_after: int | None = None
    rows_before: int | None = None
    rows_after: int | None = None
    checksum_matches: bool | None = None
    seconds: float | None = None
    detail: str = ""  # why skipped or failed, what is waited for, what was recovered, restored or cleaned

    @property
    def subject(self) -> str:
        """Who the line is about: the partition, else the table."""
        return self.unit or self.table

    def _units(self) -> str:
        noun = "partition" if self.partitioned else "table"
        return f"{self.units} {noun}{'' if self.units == 1 else 's'}"

    def describe(self) -> str:
        """One concise line: `date=2024-01-01: written 200 -> 1 files, 15.3 MB -> 14.9 MB in 4.2 s`."""
        step = self.step
        if step == ProgressStep.PLANNED:
            batches = f"{self.batches} batch{'' if self.batches == 1 else 'es'}"
            return (
                f"{self.table}: {self._units()} to compact, {self.files_before} files, "
                f"{human_bytes(self.bytes_before or 0)}, in {batches}"
            )
        if step == ProgressStep.BATCH:
            return (
                f"{self.table}: batch {self.batch}/{self.batches} started: {self._units()}, "
                f"{human_bytes(self.bytes_before or 0)}"
            )
        if step == ProgressStep.WRITTEN:
            return (
                f"{self.subject}: written {self.files_before} -> {self.files_after} files, "
                f"{human_bytes(self.bytes_before or 0)} -> {human_bytes(self.bytes_after or 0)} in {self.seconds:.1f} s"
            ) + (f" ({self.detail})" if self.detail else "")
        if step == ProgressStep.VERIFIED:
            checksum = "checksum match" if self.checksum_matches else "checksum MISMATCH"
            return f"{self.subject}: verified rows {self.rows_before} -> {self.rows_after}, {checksum}"
        if step == ProgressStep.COMMITTED:
            return (
                f"{self.subject}: committed files {self.files_before} -> {self.files_after}, "
                f"{human_bytes(self.bytes_before or 0)} -> {human_bytes(self.bytes_after or 0)}, "
                f"rows {self.rows_before} -> {self.rows_after}"
            )
        if step == ProgressStep.WAITING:
            return f"{self.subject}: waiting for {self.detail}"
        if step in (ProgressStep.RECOVERED, ProgressStep.RESTORED, ProgressStep.CLEANED):
            return f"{step}: {self.detail}"
        return f"{self.subject}: {step}" + (f": {self.detail}" if self.detail else "")

    def __str__(self) -> str:
        return self.describe()


Progress = Callable[[ProgressEvent], None]


def no_progress(event: ProgressEvent) -> None:
    """The default: report nothing."""


def serialized(progress: Progress) -> Progress:
    """`progress`, called by one thread at a time; an exception it raises is logged, never passed to the operation."""
    if progress is no_progress:
        return progress
    lock = threading.Lock()

    def report(event: ProgressEvent) -> None:
        with lock:
            try:
                progress(event)
            except Exception:
                log.warning("reporting progress failed (the operation goes on): %s", event, exc_info=True)

    return report
