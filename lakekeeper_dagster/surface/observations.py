"""The observation job: a partition's file count and sizes recorded when they change, and one summary per table each
run (its partitions, files, small files, backlog and bytes, and its health: the share of small files, the bytes
waiting for compaction, the hours the oldest unit needing it has waited; numeric: the UI plots them over time).
The first sight of a table records only its units needing compaction (the sensor's candidates) and its summary, not
one event a partition: the others are recorded when they change.

What was recorded last is an *observed snapshot* per table in the instance's key-value store (`run_storage` cursor
values, the same table in SQLite and PostgreSQL instances, shared by every process of the deployment): partition ->
its figures [files, bytes, small files, needs compaction, since when it needs it], then what the next run needs to
know whether to list it again (`surface/changes.py`); beside it the table's backlog (how many of those need
compaction), all the sensor reads of it each tick (a snapshot is 17,520 entries a table at the estate). The snapshots
are read and written ten tables at a time (memory: twenty tables' snapshots and units, the next ten read meanwhile),
instead of the event log's newest observation of each partition (17,520 records a table to read and deserialize
each run at the estate).
It never hides a change from the event log (the first sight of a table keeps the figures of units it did not record,
which are recorded once they change):

- a table's is written only after every observation of that table was yielded (Dagster stores an event before the
  op resumes), so a run that fails or dies before it leaves that table's previous snapshot, and the next run
  records every partition that changed since then again (a duplicate observation at worst, never a missed one);
- a run that overlapped another run of this job stops writing from then on (which run's observation of a partition
  is the newest in the event log is then unknown); the next run compares with the older snapshot and records
  again. `observe_partitions_schedule` does not start a run while one of the job is queued or running, so a run
  longer than the cron does not make the next ones overlap it (only a run launched by hand can);
- a snapshot is ignored when the instance holds no event of the table's asset (wiped), so every partition is
  recorded again.

A partition that does not change is not observed again: `file_count_sensor` re-requests a failed compaction from the
failed run itself, not from a new observation. Registrations by `hive_partitions_sensor` are not in the snapshot
(a sensor's events are stored after it returns): the next run records those partitions once more.
An unpartitioned table is one unit like a partition: its observation (no partition) when its figures change, and
its summary (`partitions: 1`) every run.
"""

import json
from collections.abc import Sequence
from datetime import datetime, timezone

import dagster as dg

from lakekeeper_dagster.engine.faults import fail_point
from lakekeeper_dagster.engine.plan.units import UnitPlan
from lakekeeper_dagster.surface.metadata import (
    BACKLOG,
    BACKLOG_KEY,
    EXECUTING,
    FILE_COUNT,
    KIND,
    NEEDS_COMPACTION,
    OBSERVED_SNAPSHOT_KEY,
    OLDEST_BACKLOG,
    SUMMARY_KIND,
    SUSPENDED,
    SUSPENDED_UNITS,
)

OBSERVE_JOB = "observe_partitions_job"


def observation_metadata(plan: UnitPlan) -> dict:
    """Numeric figures (plotted by the UI over time) and the plan's decision for one unit."""
    return {
        FILE_COUNT: plan.file_count,
        "total_bytes": plan.total_bytes,
        "average_bytes": float(plan.average_bytes),
        "median_bytes": float(plan.median_bytes),
        "target_files": plan.target_files,
        "threshold_bytes": float(plan.threshold_bytes),
        "small_files": plan.small_files,
        "small_bytes": plan.small_bytes,
        "large_files": plan.large_files,
        NEEDS_COMPACTION: plan.needs_compaction,
        "status": str(plan.status),
        "reason": plan.reason,
    }


def summary_metadata(snapshot: dict[str, list], suspended: list[tuple[str | None, str]], now: float) -> dict:
    """A table's figures in one observation, from its units' kept entries (`snapshot`): its units, files, small
    files, units needing compaction, bytes, and its `suspended` units (each with why); its health: the share of small
    files, the small files' bytes of the units needing compaction, and how long the unit needing it longest has."""
    entries = list(snapshot.values())
    files, small = sum(e[0] for e in entries), sum(e[2] for e in entries)
    waiting = [e[SINCE] for e in entries if e[NEEDS]]
    return {
        "partitions": len(entries),
        "files": files,
        "small_files": small,
        BACKLOG: len(waiting),
        "bytes": sum(e[1] for e in entries),
        "small_file_ratio": round(small / files, 4) if files else 0.0,
        "backlog_bytes": sum(e[SMALL_BYTES] for e in entries if e[NEEDS]),
        OLDEST_BACKLOG: round((now - min(waiting)) / 3600, 2) if waiting else 0.0,
        SUSPENDED: len(suspended),
        SUSPENDED_UNITS: dg.MetadataValue.md(
            "\n".join(f"- {unit or '(whole table)'}: {why}" for unit, why in suspended) or "none"
        ),
        KIND: SUMMARY_KIND,
    }


def is_summary(metadata: dict) -> bool:
    """Whether an observation's metadata is a table's summary (not a unit's figures)."""
    return KIND in metadata and metadata[KIND].value == SUMMARY_KIND


NEEDS = 3  # the index of needs_compaction in a unit's figures
SINCE = 4  # the index of when (epoch seconds) the unit began to need compaction, 0 when it does not
SMALL_BYTES = 5  # the index of the unit's small files' bytes (then `surface/changes.py`'s entries)
COMPARED = 4  # the figures compared: file count, bytes, small files, needs compaction


def unit_figures(plan: UnitPlan, before: list | None, now: float) -> list:
    """What makes a unit's observation worth recording again when it differs (its first COMPARED entries: figures
    and the plan's decision, which a changed threshold changes without changing the files), then since when it
    needs compaction (kept from `before` while it still does; `now` when it began; a snapshot kept before this
    entry existed counts from `now`)."""
    figures = [plan.file_count, plan.total_bytes, plan.small_files, plan.needs_compaction]
    kept = before[SINCE] if before and len(before) > SINCE and before[NEEDS] else 0
    return figures + [(kept or now) if plan.needs_compaction else 0]


def read_observed_snapshot(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict[str, list]:
    """The snapshot last written for the asset (unit name, "" for an unpartitioned table -> figures); empty when
    none was, or the instance holds no event of the asset."""
    if not instance.get_asset_records([key]):
        return {}
    name = OBSERVED_SNAPSHOT_KEY + key.to_user_string()
    return json.loads(instance.run_storage.get_cursor_values({name}).get(name, "{}"))


def without_backlog(instance: dg.DagsterInstance, keys: Sequence[dg.AssetKey]) -> set[dg.AssetKey]:
    """The assets whose last kept figures have no unit needing compaction, in one key-value read for all (a table
    observed only before the backlog was kept beside its snapshot is not among them: the sensor reads its events)."""
    names = {BACKLOG_KEY + key.to_user_string(): key for key in keys}
    kept = instance.run_storage.get_cursor_values(set(names))
    return {names[name] for name, backlog in kept.items() if int(backlog) == 0}


def keep_observed_snapshot(instance: dg.DagsterInstance, key: dg.AssetKey, snapshot: dict[str, list]) -> None:
    """Keep a table's snapshot as the last recorded: its backlog first, then the snapshot (a process killed
    between the two leaves the older snapshot, so the next run records again what changed; the backlog is already
    that of the observations in the event log)."""
    backlog = sum(1 for f in snapshot.values() if f[NEEDS])
    # Two calls, one key each: SQLite storage inserts all the pairs or, if one exists, updates only the existing ones.
    instance.run_storage.set_cursor_values({BACKLOG_KEY + key.to_user_string(): str(backlog)})
    fail_point("backlog_kept")
    text = json.dumps(snapshot, separators=(",", ":"))
    instance.run_storage.set_cursor_values({OBSERVED_SNAPSHOT_KEY + key.to_user_string(): text})


def overlapping_runs(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """The other runs of the observation job executing now or finished since this run started."""
    record = instance.get_run_record_by_id(run_id)
    started = record.start_time if record and record.start_time else 0.0
    since = datetime.fromtimestamp(started, tz=timezone.utc)
    runs = instance.get_run_records(dg.RunsFilter(job_name=OBSERVE_JOB, statuses=EXECUTING))
    runs += instance.get_run_records(dg.RunsFilter(job_name=OBSERVE_JOB, updated_after=since))
    return sorted({r.dagster_run.run_id for r in runs} - {run_id})
