"""Retention's plan: which partitions of a table are old enough to drop, and which are kept although old. Pure Python.

Older partitions (their whole period ended by the cutoff, `PartitionClock.select_older`) are dropped, except: when
every timed partition is older, those of the newest period (never dropped, however many share it); a partition whose
location is not strictly inside the table's location, is missing, is shared with a partition that is kept (one
location the same as, inside or around the other's: moving its directory away would take a kept partition's files), or
holds another table's data (`taken`: found in the catalog by the caller).
Untimed partitions are reported. A plan dropping more than `max_fraction` of all the table's partitions is refused
unless forced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from lakekeeper_dagster.engine.plan.partition_time import PartitionClock
from lakekeeper_dagster.engine.plan.thresholds import human_bytes


@dataclass(frozen=True)
class RetentionCandidate:
    """One partition of the table as the plan sees it: spec, Hive name, qualified location, and for the older
    ones the data files and bytes found there (None: the location is missing, or it was not listed)."""

    partition: str
    spec: dict[str, str | None]
    location: str
    files: int | None = None
    bytes: int | None = None


@dataclass(frozen=True)
class RetentionItem:
    """An older partition: dropped, or kept with the reason."""

    candidate: RetentionCandidate
    time: datetime
    reason: str | None = None  # why it is kept although older; None: dropped


@dataclass(frozen=True)
class RetentionPlan:
    table: str
    cutoff: datetime
    total: int  # every partition of the table
    drop: tuple[RetentionItem, ...]
    kept: tuple[RetentionItem, ...]
    untimed: tuple[str, ...]
    refusal: str | None  # the max-fraction guard; None when the run may go

    @property
    def files(self) -> int:
        return sum(item.candidate.files or 0 for item in self.drop)

    @property
    def bytes(self) -> int:
        return sum(item.candidate.bytes or 0 for item in self.drop)

    def lines(self, dry_run: bool) -> list[str]:
        """The dry-run listing: one line per partition older than the cutoff, then the untimed ones and totals."""
        verb = "would drop" if dry_run else "to drop"
        lines = [
            f"{self.table}: {len(self.drop)} of {self.total} partition(s) older than {self.cutoff:%Y-%m-%d %H:%M} "
            f"UTC {verb} ({self.files} files, {human_bytes(self.bytes)})"
        ]
        for item in self.drop:
            lines.append(f"  DROP {item_line(item)}")
        for item in self.kept:
            lines.append(f"  KEEP {item_line(item)}: {item.reason}")
        for name in self.untimed:
            lines.append(f"  UNTIMED {name}: its values do not parse with the partition time; left alone")
        if self.refusal:
            lines.append(f"  REFUSED: {self.refusal}")
        return lines


def item_line(item: RetentionItem) -> str:
    """`partition  time  files  bytes`."""
    c = item.candidate
    figures = "missing" if c.files is None else f"{c.files} files, {human_bytes(c.bytes or 0)}"
    return f"{c.partition}  {item.time:%Y-%m-%d %H:%M}  {figures}"


def inside(location: str, directory: str) -> bool:
    """Whether `location` is `directory` or lies below it."""
    location, directory = location.rstrip("/"), directory.rstrip("/")
    return location == directory or location.startswith(directory + "/")


def shares_location(a: str, b: str) -> bool:
    """Whether two (qualified) locations are the same, or one lies inside the other: moving one away moves files
    the other reads."""
    return inside(a, b) or inside(b, a)


def plan_retention(
    table: str,
    table_location: str,
    partitions: Sequence[RetentionCandidate],
    clock: PartitionClock,
    cutoff: datetime,
    max_fraction: float,
    force: bool = False,
    taken: Mapping[str, str] | None = None,
) -> RetentionPlan:
    """Which of `partitions` (all of the table's; the older ones listed) to drop at `cutoff`, and the guard;
    `taken` names the partitions whose directory holds another table's data, with why."""
    selection = clock.select_older(partitions, cutoff, spec_of=lambda p: p.spec)
    older = sorted(selection.older, key=lambda c: (clock.start(c.spec), c.partition))
    newest = None if selection.newer or not older else clock.start(older[-1].spec)
    reasons: dict[str, str] = {}
    for c in older:
        if clock.start(c.spec) == newest:
            reasons[c.partition] = "the newest period's partitions are never dropped"
        elif not inside(c.location, table_location) or c.location.rstrip("/") == table_location.rstrip("/"):
            reasons[c.partition] = f"its location {c.location} is not inside the table's location {table_location}"
        elif c.files is None:
            reasons[c.partition] = f"its location {c.location} is missing"
        elif c.partition in (taken or {}):
            reasons[c.partition] = f"another table's data would go with it: {(taken or {})[c.partition]}"
    changed = True
    while changed:  # a partition kept for sharing keeps the ones sharing with it in turn
        dropped = {c.partition for c in older} - set(reasons)
        kept_locations = [p.location for p in partitions if p.partition not in dropped]
        changed = False
        for c in older:
            if c.partition in dropped:
                shared = [k for k in kept_locations if shares_location(k, c.location)]
                if shared:
                    reasons[c.partition] = f"its location is shared with a partition that is kept ({shared[0]})"
                    changed = True
    drop = [RetentionItem(c, clock.start(c.spec)) for c in older if c.partition not in reasons]
    kept = [RetentionItem(c, clock.start(c.spec), reasons[c.partition]) for c in older if c.partition in reasons]
    refusal = None
    if partitions and len(drop) > max_fraction * len(partitions) and not force:
        refusal = (
            f"{table}: dropping {len(drop)} of its {len(partitions)} partitions is more than "
            f"table_overrides.{table}.retention.max_fraction ({max_fraction:g}); check the age, or pass --force "
            "(force: true in Dagster). Nothing was changed"
        )
    untimed = tuple(c.partition for c in selection.untimed)
    return RetentionPlan(table, cutoff, len(partitions), tuple(drop), tuple(kept), untimed, refusal)
