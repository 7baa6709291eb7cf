"""Merging fine partitions into coarse ones: the layout of the merged table and which periods to merge. Pure Python.

The merged table (default `<table>__merged`) is partitioned by the coarse columns and keeps the fine values as data
columns: for nested columns (`year/month/day/hour` into `[year, month]`) the dropped ones (`day`, `hour`); for one
flat column (`dt` '%Y%m%d%H' into '%Y%m%d') its partition column `dt` holds the coarse value and the data column
`dt__fine` the original, which the view maps back. A period (one coarse partition) is merged when it ended by the
cutoff, with every fine partition of it the metastore lists; a period already in the merged table (its late fine
partitions), one with a missing or shared location or holding another table's data, and the untimed partitions are
reported and left alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from lakekeeper_dagster.engine.errors import ConfigError
from lakekeeper_dagster.engine.hive.model import TableInfo, partition_name, split_table_name, validated_name
from lakekeeper_dagster.engine.plan.partition_time import STEP_ORDER, PartitionClock
from lakekeeper_dagster.engine.plan.retention import inside, shares_location
from lakekeeper_dagster.engine.plan.thresholds import human_bytes

FINE_SUFFIX = "__fine"  # the merged table's data column keeping a flat time column's original value
MERGED_SUFFIX = "__merged"


def merge_names(database: str, table: str, view: str | None, merged: str | None) -> tuple[tuple[str, str], ...]:
    """(database, name) of the merged table (`merge.table`, default `<table>__merged`) and of the view (`merge.view`,
    required): NAME (in the source's database) or DB.NAME; a ConfigError names the key."""
    key = f"table_overrides.{database}.{table}.merge"
    if view is None:
        raise ConfigError(
            f"{database}.{table}: set {key}.view to the name of the union view readers query; nothing was changed"
        )
    named = []
    for value, setting in ((merged or f"{table}{MERGED_SUFFIX}", f"{key}.table"), (view, f"{key}.view")):
        named.append(split_table_name(value, setting) if "." in value else (database, validated_name(value, setting)))
    return tuple(named)


@dataclass(frozen=True)
class MergeLayout:
    """How the source's columns map to the merged table's: its partition columns with their formats, the data
    columns keeping the fine values (merged column, source column), and the view's columns (the source's)."""

    view_columns: tuple[str, ...]  # the source's data columns, then its partition columns
    data_columns: tuple[str, ...]
    coarse: tuple[tuple[str, str], ...]  # (partition column of the merged table, format)
    kept: tuple[tuple[str, str], ...]  # (data column of the merged table, source partition column)
    flat: bool

    @property
    def coarse_clock(self) -> PartitionClock:
        return PartitionClock.of(dict(self.coarse), "merged table")

    def coarse_spec(self, clock: PartitionClock, spec: dict[str, str | None]) -> dict[str, str] | None:
        """The merged partition a timed fine partition goes to, or None when it is untimed."""
        start = clock.start(spec)  # type: ignore[arg-type]
        if start is None:
            return None
        if self.flat:
            return {self.coarse[0][0]: start.strftime(self.coarse[0][1])}
        return {column: str(spec[column]) for column, _ in self.coarse}

    def merged_columns(self) -> list[tuple[str, str]]:
        """The merged table's data columns beyond the source's data columns (all STRING), in order."""
        return [(name, "STRING") for name, _ in self.kept]


def _string_columns(info: TableInfo, names: Sequence[str], key: str) -> None:
    types = {c.name.lower(): c.type.lower() for c in info.columns}
    bad = [f"{n} ({types.get(n.lower())})" for n in names if types.get(n.lower()) != "string"]
    if bad:
        raise ConfigError(
            f"{key}: the time columns must be STRING partition columns; {', '.join(bad)} are not; nothing was changed"
        )


def merge_layout(info: TableInfo, clock: PartitionClock, into: list[str] | str | None) -> MergeLayout:
    """The layout of the merged table of `info` for `merge.into`; a ConfigError names the key when it does not fit."""
    name = info.qualified_name
    key = f"table_overrides.{name}.merge.into"
    partitions = list(info.partition_columns)
    if [c.lower() for c in partitions] != [c.lower() for c in clock.column_names]:
        raise ConfigError(
            f"table_overrides.{name}.partition_time must name every partition column of {name} in order "
            f"({', '.join(partitions)}) to merge it (got {', '.join(clock.column_names)}); nothing was changed"
        )
    _string_columns(info, partitions, f"table_overrides.{name}.partition_time")
    data = tuple(c.name for c in info.data_columns)
    formats = dict(clock.columns)
    if isinstance(into, str):
        if len(partitions) != 1:
            raise ConfigError(
                f"{key}: a format ({into!r}) merges a table with one time column; {name} has "
                f"{', '.join(partitions)}: give the columns to keep, e.g. [{partitions[0]}]; nothing was changed"
            )
        column = partitions[0]
        coarse: tuple[tuple[str, str], ...] = ((column, into),)
        kept: tuple[tuple[str, str], ...] = ((column + FINE_SUFFIX, column),)
        if kept[0][0].lower() in {c.lower() for c in data}:
            raise ConfigError(f"{key}: {name} already has a column {kept[0][0]}, which would keep {column}'s values")
        layout = MergeLayout((*data, column), data, coarse, kept, True)
    elif isinstance(into, list) and into:
        if [c.lower() for c in into] != [c.lower() for c in partitions[: len(into)]] or len(into) >= len(partitions):
            raise ConfigError(
                f"{key}: {into} must be the first partition columns of {name} ({', '.join(partitions)}), not all "
                "of them; nothing was changed"
            )
        coarse = tuple((c, formats[c]) for c in partitions[: len(into)])
        kept = tuple((c, c) for c in partitions[len(into) :])
        layout = MergeLayout((*data, *partitions), data, coarse, kept, False)
    else:
        raise ConfigError(
            f"{name} has no coarse partitioning to merge into: set {key} to the partition columns to keep (e.g. "
            "[year, month]) or, for one time column, a coarser format (e.g. '%Y%m'); nothing was changed"
        )
    try:
        coarse_step = layout.coarse_clock.step
    except ConfigError as error:
        raise ConfigError(f"{key}: {error}") from None
    if STEP_ORDER.index(coarse_step) <= STEP_ORDER.index(clock.step):
        raise ConfigError(
            f"{key}: {into!r} fixes the {coarse_step}, no coarser than the partitions' {clock.step}; "
            "nothing was changed"
        )
    return layout


@dataclass(frozen=True)
class FineCandidate:
    """A partition of the source as the plan sees it: Hive name, spec, qualified location, its data files
    (name -> [size, modification time]; None when the location is missing) and bytes."""

    partition: str
    spec: dict[str, str | None]
    location: str
    files: dict[str, list[int]] | None
    identity: list | None = None


@dataclass(frozen=True)
class MergePeriod:
    """One coarse partition with its fine partitions: merged, or left alone with the reason."""

    partition: str
    spec: dict[str, str]
    fine: tuple[FineCandidate, ...]
    reason: str | None = None

    @property
    def files(self) -> int:
        return sum(len(f.files or {}) for f in self.fine)

    @property
    def bytes(self) -> int:
        return sum(size for f in self.fine for size, _ in (f.files or {}).values())

    def line(self) -> str:
        return f"{self.partition} <- {len(self.fine)} partition(s), {self.files} files, {human_bytes(self.bytes)}"


@dataclass(frozen=True)
class MergePlan:
    table: str
    merged: str
    view: str
    cutoff: datetime
    total: int
    periods: tuple[MergePeriod, ...]  # to merge
    kept: tuple[MergePeriod, ...]  # older, left alone with the reason
    untimed: tuple[str, ...]

    def lines(self, dry_run: bool) -> list[str]:
        verb = "would merge" if dry_run else "to merge"
        fine = sum(len(p.fine) for p in self.periods)
        lines = [
            f"{self.table}: {fine} of {self.total} partition(s) in {len(self.periods)} period(s) older than "
            f"{self.cutoff:%Y-%m-%d %H:%M} UTC {verb} into {self.merged} (view {self.view})"
        ]
        lines += [f"  MERGE {p.line()}" for p in self.periods]
        lines += [f"  KEEP {p.line()}: {p.reason}" for p in self.kept]
        lines += [f"  UNTIMED {n}: its values do not parse with the partition time; left alone" for n in self.untimed]
        return lines


def plan_merge(
    table: str,
    table_location: str,
    merged: str,
    view: str,
    layout: MergeLayout,
    clock: PartitionClock,
    candidates: Sequence[FineCandidate],
    merged_partitions: set[str],
    cutoff: datetime,
    fits: Callable[[MergePeriod], bool],
    taken: Mapping[str, str] | None = None,
) -> MergePlan:
    """Which periods of `candidates` (every partition of the source) to merge at `cutoff`; `merged_partitions`
    names the merged table's partitions, `fits` tells whether a period's view text fits the metastore, `taken` the
    fine partitions whose directory holds another table's data, with why."""
    coarse_clock = layout.coarse_clock
    by_period: dict[str, tuple[dict[str, str], list[FineCandidate]]] = {}
    untimed = []
    for c in candidates:
        spec = layout.coarse_spec(clock, c.spec)
        if spec is None:
            untimed.append(c.partition)
            continue
        by_period.setdefault(partition_name(dict(spec)), (spec, []))[1].append(c)
    periods, kept = [], []
    for name, (spec, fine) in sorted(by_period.items(), key=lambda kv: (coarse_clock.start(kv[1][0]), kv[0])):
        end = coarse_clock.end(spec)
        if end is None or end > cutoff:
            continue
        others = [c.location for c in candidates if c not in fine]
        reason = None
        if name in merged_partitions:
            reason = "late: the merged table already holds this period; merge or drop these partitions by hand"
        elif outside := [
            f for f in fine if not inside(f.location, table_location) or f.location.rstrip("/") == table_location
        ]:
            reason = f"the location {outside[0].location} of {outside[0].partition} is not inside the table's"
        elif missing := [f.partition for f in fine if f.files is None]:
            reason = f"the location of {missing[0]} is missing"
        elif shared := [f.partition for f in fine if any(shares_location(f.location, o) for o in others)] or [
            f.partition for f in fine for g in fine if f is not g and shares_location(f.location, g.location)
        ]:
            reason = f"the location of {shared[0]} is shared with another partition"
        elif held := [f.partition for f in fine if f.partition in (taken or {})]:
            reason = f"another table's data would go with {held[0]}: {(taken or {})[held[0]]}"
        period = MergePeriod(name, spec, tuple(fine), reason)
        if reason is None and not fits(period):
            reason = "its fine partitions are too many for the view's text in the metastore; merge a finer period"
        (kept if reason else periods).append(MergePeriod(name, spec, tuple(fine), reason))
    return MergePlan(table, merged, view, cutoff, len(candidates), tuple(periods), tuple(kept), tuple(untimed))
