"""One observation run, a group of tables at a time: read their units, list the directories that may have changed
(one Spark job a group, none when nothing may have), record what changed and each table's summary, keep the
figures (`surface/observations.py`, `surface/changes.py`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field

import dagster as dg

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.errors import CatalogError
from lakekeeper_dagster.engine.faults import fail_point
from lakekeeper_dagster.engine.fs.dirtimes import directory_times
from lakekeeper_dagster.engine.fs.listing import Listing, list_directories
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.ops.analyze import mark_suspended, plan_listed
from lakekeeper_dagster.engine.protocol.suspension import read_failures, suspended_units
from lakekeeper_dagster.engine.statuses import PlanStatus
from lakekeeper_dagster.surface.changes import (
    TableRead,
    entry_extra,
    keep_full_read,
    read_units,
    to_list,
    trusted_time,
)
from lakekeeper_dagster.surface.failures import engine_failures
from lakekeeper_dagster.surface.metadata import BACKLOG
from lakekeeper_dagster.surface.observations import (
    COMPARED,
    keep_observed_snapshot,
    observation_metadata,
    overlapping_runs,
    read_observed_snapshot,
    summary_metadata,
    unit_figures,
)
from lakekeeper_dagster.surface.partitions import sync_partitions
from lakekeeper_dagster.surface.tables import current_table
from lakekeeper_dagster.surface.translator import HiveTableTranslator


@dataclass
class GroupRead:
    """A group of tables read: their units (`reads`, the tables still there), kept snapshots, why the others were
    skipped, their directories' times and when those were read, and the seconds it took."""

    snapshots: dict[str, dict]
    reads: list[TableRead] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    times: dict[str, int] = field(default_factory=dict)
    read_at: float = 0.0
    seconds: float = 0.0


class ObservationRun:
    """What one run of the observation job has done so far (its figures for the closing log line)."""

    def __init__(
        self,
        context: dg.OpExecutionContext,
        session,
        settings: LakekeeperConfig,
        translator: HiveTableTranslator,
        thresholds: str,
    ) -> None:
        self.context, self.session, self.settings, self.translator = context, session, settings, translator
        self.fingerprint = thresholds  # the planning thresholds' fingerprint, kept with each full read
        self.storage = Storage(session)
        self.thresholds = settings.thresholds()
        self.overlapped: list[str] = []
        self.seconds = {"read": 0.0, "sync": 0.0, "list": 0.0}
        self.units = self.tables = self.listed = self.full = 0

    def read_ahead(self, pool: Executor, group: list[TableInfo], due: set[str]) -> Future[GroupRead]:
        """Start reading `group` in `pool` (beside the listing of the group before): their kept snapshots now, then
        in the pool their units from the metastore and their directories' times."""
        instance = self.context.instance
        snapshots = {
            info.qualified_name: read_observed_snapshot(instance, self.translator.asset_key(info)) for info in group
        }
        return pool.submit(self._read, group, snapshots, due)

    def _read(self, group: list[TableInfo], snapshots: dict[str, dict], due: set[str]) -> GroupRead:
        """The group's tables as the metastore has them now (a table gone or changed is left out, with why), their
        units, and the modification times of their directories (read after the units, before any listing)."""
        started = time.monotonic()
        found = GroupRead(snapshots=snapshots)
        for info in group:
            try:
                now = current_table(self.session, info)
                snapshot = snapshots[info.qualified_name]
                found.reads.append(read_units(self.session, now, snapshot, info.qualified_name in due or not snapshot))
            except CatalogError as error:  # it does not stop the others
                found.skipped.append(f"{info.qualified_name} skipped: {error}")
        found.read_at = time.time()
        found.times = directory_times(self.session, [u.location for read in found.reads for u in read.units])
        found.seconds = time.monotonic() - started
        return found

    def _sync(self, reads: list[TableRead]) -> None:
        """The tables' dynamic partitions made their Hive partitions."""
        started = time.monotonic()
        for read in reads:
            info = read.info
            if info.is_partitioned:
                hive = [unit.partition for unit in read.units]
                added, removed = sync_partitions(self.context.instance, self.translator.partitions_def_name(info), hive)
                if added or removed:
                    self.context.log.info(
                        f"{info.qualified_name}: {len(added)} partition(s) added, {len(removed)} removed"
                    )
        self.seconds["sync"] += time.monotonic() - started

    def observe(self, found: GroupRead) -> Iterator[dg.AssetObservation]:
        """Observe a group of tables read by `read_ahead`: what changed, then each table's summary."""
        for message in found.skipped:
            self.context.log.warning(message)
        self.seconds["read"] += found.seconds
        reads, snapshots, times, read_at = found.reads, found.snapshots, found.times, found.read_at
        self._sync(reads)
        started = time.monotonic()
        suspend_after = self.settings.suspend_after_failures
        with engine_failures():
            suspended = {
                r.info.qualified_name: suspended_units(read_failures(self.storage, r.info.location), suspend_after)
                for r in reads
            }
            listed = {
                r.info.qualified_name: to_list(
                    r, snapshots[r.info.qualified_name], times, set(suspended[r.info.qualified_name])
                )
                for r in reads
            }
            locations = [u.location for units in listed.values() for u in units]
            listing = Listing()
            if locations:
                what = f"observe {len(reads)} table(s)"
                listing = list_directories(self.session, locations, what, self.thresholds.min_file_bytes)
        self.seconds["list"] += time.monotonic() - started
        for read in reads:
            yield from self._record(
                read, snapshots[read.info.qualified_name], listed, listing, times, suspended, read_at
            )

    def _record(self, read: TableRead, before: dict, listed: dict, listing: Listing, times, suspended, read_at):
        info, instance = read.info, self.context.instance
        name = info.qualified_name
        key = self.translator.asset_key(info)
        chosen = listed[name]
        plans = mark_suspended(info, plan_listed(chosen, listing, self.thresholds), suspended[name])
        by_unit = {p.partition or "": p for p in plans}
        relisted = {u.partition or "" for u in chosen}
        now, changed, at = {}, 0, time.time()
        for unit in read.units:
            unit_key = unit.partition or ""
            if unit_key not in relisted:
                now[unit_key] = before[unit_key]  # its directory did not change: its figures did not
                continue
            plan = by_unit.get(unit_key)
            if plan is None:  # its directory is missing
                continue
            kept = before.get(unit_key)
            trusted = trusted_time(unit.location, times.get(unit.location), read_at, unit.location in listing.nested)
            is_suspended = plan.status == PlanStatus.SUSPENDED
            figures = unit_figures(plan, kept, at)
            now[unit_key] = figures + entry_extra(info, unit, plan.small_bytes, trusted, is_suspended)
            # first sight of a table: only the units needing compaction (the summary counts every one)
            if (kept or [])[:COMPARED] != figures[:COMPARED] and (before or plan.needs_compaction):
                changed += 1
                yield dg.AssetObservation(asset_key=key, partition=plan.partition, metadata=observation_metadata(plan))
        waiting = [
            (u.partition, suspended[name][u.partition or ""].describe(u.partition, name))
            for u in read.units
            if (u.partition or "") in suspended[name] and (u.partition or "") in now
        ]
        summary = summary_metadata(now, waiting, at)
        yield dg.AssetObservation(asset_key=key, metadata=summary)
        fail_point("observations_recorded")
        self.overlapped = self.overlapped or overlapping_runs(instance, self.context.run_id)
        if not self.overlapped:
            if now != before or read.full:  # unchanged: the kept snapshot and backlog are already these
                keep_observed_snapshot(instance, key, now)
            if read.full:
                keep_full_read(instance, key, read_at, self.fingerprint)
        self.units += len(read.units)
        self.tables += 1
        self.listed += len(chosen)
        self.full += read.full
        missing = [u.partition or u.location for u in chosen if u.location in listing.missing]
        self.context.log.info(
            f"{name}: {len(read.units)} unit(s), {len(chosen)} listed"
            f"{' (read in full)' if read.full else ''}, {changed} changed and recorded, "
            f"{summary[BACKLOG]} need compaction, {summary['files']} data files"
            + (f"; location missing for {len(missing)}: {', '.join(missing[:5])}" if missing else "")
        )
