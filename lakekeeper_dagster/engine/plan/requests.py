"""Which observed partitions to compact next, grouped into few runs: pure Python, no Dagster, no Spark.

The sensor feeds it the observations that are new since its cursor, the units it skipped on earlier ticks (pending),
the partitions runs are already working on, and the partitions whose last compaction failed recently; it returns the
runs to request, the next cursor and the units still pending.

Pending units: a unit whose observation wants compaction but that a run is already working on ("in flight"), or
whose last compaction failed recently ("backing off"), is kept with its observation's storage id in the sensor's
cursor (per table), and checked again every tick without re-reading the event log: it is requested once no run works
on it and its back-off is over, whoever launched the run it waited for (a backfill, a hand-launched run, the sensor),
unless that run compacted it (`settled`) or a newer observation of the unit says otherwise. The cursor itself moves
past its observation, so a long-running backfill does not make every tick read the same records again.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Observed:
    """One recorded observation of a unit (partition name, or None for an unpartitioned table)."""

    partition: str | None
    storage_id: int
    file_count: int
    needs_compaction: bool


@dataclass(frozen=True)
class TableState:
    """What the sensor knows about one table in a tick."""

    table: str  # db.table
    observations: list[Observed]  # new since the cursor, ascending storage id
    partition_order: list[str]  # the table's partitions in their Dagster order (empty when unpartitioned)
    min_files: int
    in_flight: set[str | None] = field(default_factory=set)
    backed_off: set[str | None] = field(default_factory=set)
    read_up_to: int | None = None  # the newest storage id read (records that are not file counts included)
    pending: dict[str | None, int] = field(default_factory=dict)  # units skipped earlier -> their observation's id
    settled: set[str | None] = field(default_factory=set)  # pending units a finished run compacted or retries


@dataclass(frozen=True)
class RunPlan:
    """One run to request: a table and the units it compacts, in partition order."""

    table: str
    partitions: tuple[str | None, ...]
    last_storage_id: int  # the newest observation behind the request (makes its run key unique)


@dataclass
class TickPlan:
    runs: list[RunPlan] = field(default_factory=list)
    cursor: dict[str, int] = field(default_factory=dict)
    in_flight: dict[str, list[str | None]] = field(default_factory=dict)
    backed_off: dict[str, list[str | None]] = field(default_factory=dict)
    deferred: dict[str, int] = field(default_factory=dict)  # table -> units left for a later tick (run cap)
    pending: dict[str, dict[str | None, int]] = field(default_factory=dict)  # table -> in flight/backed off units


def latest_per_unit(observations: list[Observed]) -> dict[str | None, Observed]:
    """The newest observation of each unit."""
    latest: dict[str | None, Observed] = {}
    for observation in observations:
        if observation.partition not in latest or observation.storage_id > latest[observation.partition].storage_id:
            latest[observation.partition] = observation
    return latest


def plan_tick(states: list[TableState], cursor: dict[str, int], max_runs: int, max_partitions_per_run: int) -> TickPlan:
    """The runs to request this tick, at most `max_runs`, each with at most `max_partitions_per_run` units.

    A unit is requested when its newest observation needs compaction and has at least the table's `min_files`
    files, unless a run is already working on it or its last compaction failed recently. Units a capped tick
    could not request move the table's cursor back to just before their observations, so the next tick sees them.
    Units in flight or backed off are kept in `pending` (see the module's docstring); a pending unit with no newer
    observation is a candidate again, unless `settled`.
    """
    plan = TickPlan(cursor=dict(cursor))
    for state in states:
        newest = max([o.storage_id for o in state.observations] + [state.read_up_to or 0])
        if newest:
            plan.cursor[state.table] = max(newest, cursor.get(state.table, 0))
        position = {name: index for index, name in enumerate(state.partition_order)}
        wanted: list[Observed] = []
        latest = latest_per_unit(state.observations)
        for unit, storage_id in state.pending.items():
            if unit not in latest and unit not in state.settled:
                latest[unit] = Observed(unit, storage_id, state.min_files, True)
        for unit, observed in latest.items():
            if not observed.needs_compaction or observed.file_count < state.min_files:
                continue
            if unit in state.in_flight:
                plan.in_flight.setdefault(state.table, []).append(unit)
                plan.pending.setdefault(state.table, {})[unit] = observed.storage_id
            elif unit in state.backed_off:
                plan.backed_off.setdefault(state.table, []).append(unit)
                plan.pending.setdefault(state.table, {})[unit] = observed.storage_id
            elif unit is None or unit in position:  # a partition gone since it was observed is not requested
                wanted.append(observed)
        wanted.sort(key=lambda o: position.get(o.partition, -1))
        chunks = [wanted[i : i + max_partitions_per_run] for i in range(0, len(wanted), max_partitions_per_run)]
        room = max(0, max_runs - len(plan.runs))
        for chunk in chunks[:room]:
            plan.runs.append(RunPlan(state.table, tuple(o.partition for o in chunk), max(o.storage_id for o in chunk)))
        left = [o for chunk in chunks[room:] for o in chunk]
        if left:
            plan.deferred[state.table] = len(left)
            plan.cursor[state.table] = min(o.storage_id for o in left) - 1
    return plan
