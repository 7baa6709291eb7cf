"""The file-count sensor's cursor: one JSON object kept by Dagster between ticks.

Keys: `<db.table>` -> the newest observation storage id read; `min_files:<db.table>` -> the min_files it was read
with; `retried:<run id>` -> the end of a failed run whose units were requested again; `pending:<db.table>` -> the
units skipped while in flight or backing off, each [unit, storage id, files, files removed, bytes, recorded at] (a
cursor written before the figures were kept holds [unit, storage id]: its units rank last); `requested` -> [[time,
bytes], ...], what the sensor's requests would rewrite, within the last hour (the byte budget); `next_table` -> the
table the next tick reads first, when this one stopped at its read budget (so every table is read in turn).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from lakekeeper_dagster.engine.plan.requests import Observed

PENDING = "pending:"
REQUESTED = "requested"
NEXT_TABLE = "next_table"
HOUR = 3600


@dataclass
class SensorCursor:
    """The cursor's parts: storage ids, marks and thresholds (`marks`), pending units, the hour's requests."""

    marks: dict[str, int] = field(default_factory=dict)
    pending: dict[str, dict[str | None, Observed]] = field(default_factory=dict)
    requested: list[tuple[float, int]] = field(default_factory=list)
    next_table: str | None = None

    def spent(self, now: float) -> int:
        """The bytes requested within the hour before `now`."""
        return sum(size for at, size in self.requested if at > now - HOUR)


def _observed(entry: list, min_files: int) -> Observed:
    unit, storage_id, *figures = entry
    files, removed, size, recorded_at = (figures + [0.0])[:4] if figures else (min_files, 0, 0, 0.0)
    return Observed(unit, storage_id, files, True, files_removed=removed, bytes_rewritten=size, recorded_at=recorded_at)


def read_cursor(text: str | None, min_files: dict[str, int]) -> SensorCursor:
    """The cursor Dagster kept (`min_files`: each table's, for pending units of an older cursor)."""
    stored = json.loads(text or "{}")
    cursor = SensorCursor()
    for key, value in stored.items():
        if key.startswith(PENDING):
            table = key[len(PENDING) :]
            cursor.pending[table] = {e[0]: _observed(e, min_files.get(table, 2)) for e in value}
        elif key == REQUESTED:
            cursor.requested = [(float(at), int(size)) for at, size in value]
        elif key == NEXT_TABLE:
            cursor.next_table = value
        else:
            cursor.marks[key] = int(value)
    return cursor


def write_cursor(
    marks: dict[str, int],
    pending: dict[str, dict],
    requested: list[tuple[float, int]],
    now: float,
    next_table: str | None = None,
) -> str:
    """The cursor to keep: `marks`, the pending units, the requests of the last hour, the table to read first."""
    kept: dict = dict(marks)
    if next_table:
        kept[NEXT_TABLE] = next_table
    for table, units in pending.items():
        if units:
            entries = [
                [u, o.storage_id, o.file_count, o.files_removed, o.bytes_rewritten, o.recorded_at]
                for u, o in units.items()
            ]
            kept[PENDING + table] = sorted(entries, key=str)
    recent = [[at, size] for at, size in requested if at > now - HOUR]
    if recent:
        kept[REQUESTED] = recent
    return json.dumps(kept, sort_keys=True)
