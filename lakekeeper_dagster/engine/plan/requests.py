"""Which observed partitions to compact next, grouped into few runs: pure Python, no Dagster, no Spark.

The sensor feeds it the observations that are new since its cursor, the units it skipped on earlier ticks (pending),
the partitions runs are already working on, and the partitions whose last compaction failed recently; it returns the
runs to request, the next cursor and the units still pending.

Pending units: a unit whose observation wants compaction but that a run is already working on ("in flight"), or
whose last compaction failed recently ("backing off"), is kept with its observation (storage id and figures) in the
sensor's cursor (per table), and checked again every tick without re-reading the event log: it is requested once no
run works on it and its back-off is over, whoever launched the run it waited for (a backfill, a hand-launched run,
the sensor), unless that run compacted it (`settled`) or a newer observation of the unit says otherwise. The cursor
itself moves past its observation, so a long-running backfill does not make every tick read the same records again.

Ranking and budget: the candidates of every table read this tick are ranked by benefit for cost (`Observed.score`:
files removed per GB rewritten, times the table's priority) and taken best first while the tick's budget lasts (runs
a tick, bytes an hour); what the budget leaves waits for a later tick, its table's cursor moved back to it. An
observation stored before a run that settled its unit started (a run that succeeded over it, or the sensor's own
run of it that failed, which the retries handle) is stale: it is not a candidate (the event log's storage ids order
the two, not clocks). A unit larger than the whole hourly budget is requested in an hour with no other request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GB = 1024**3
MIN_COST_BYTES = 1024**2  # a unit's cost is at least 1 MB: a score stays finite for a unit of tiny files


@dataclass(frozen=True)
class Observed:
    """One recorded observation of a unit (partition name, or None for an unpartitioned table)."""

    partition: str | None
    storage_id: int
    file_count: int
    needs_compaction: bool
    files_removed: int = 0  # the files the compaction would remove (its files less its target)
    bytes_rewritten: int = 0  # what it would rewrite (its small files' bytes)
    recorded_at: float = 0.0  # when the observation was stored (0: unknown): bounds the sensor's read of runs

    def score(self, priority: float = 1.0) -> float:
        """Benefit for cost: files removed per GB rewritten, times the table's priority."""
        return priority * self.files_removed * GB / max(self.bytes_rewritten, MIN_COST_BYTES)


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
    pending: dict[str | None, Observed] = field(default_factory=dict)  # units skipped earlier -> their observation
    settled: set[str | None] = field(default_factory=set)  # pending units a finished run compacted or retries
    priority: float = 1.0  # multiplies the score of the table's units
    acted_on: dict[str | None, int] = field(default_factory=dict)  # unit -> its last settling run's start (storage id)


@dataclass(frozen=True)
class Budget:
    """What one tick may request: runs, units a run, and bytes to rewrite (None: no limit). `spent` is what was
    requested within the hour before this tick, counted against `bytes_per_hour`; a unit larger than the whole
    hourly budget is requested alone, when nothing was requested within the hour (under a steady load of smaller
    requests it waits: raise the budget above the largest units)."""

    max_runs: int
    max_partitions_per_run: int
    bytes_per_hour: int | None = None
    spent: int = 0


@dataclass(frozen=True)
class RunPlan:
    """One run to request: a table and the units it compacts, in partition order (a tick's runs: best first)."""

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
    over_bytes: dict[str, int] = field(default_factory=dict)  # table -> units left for a later tick (byte budget)
    pending: dict[str, dict[str | None, Observed]] = field(default_factory=dict)  # table -> in flight/backed off
    bytes_requested: int = 0  # what the runs requested this tick would rewrite


def latest_per_unit(observations: list[Observed]) -> dict[str | None, Observed]:
    """The newest observation of each unit."""
    latest: dict[str | None, Observed] = {}
    for observation in observations:
        if observation.partition not in latest or observation.storage_id > latest[observation.partition].storage_id:
            latest[observation.partition] = observation
    return latest


def plan_tick(states: list[TableState], cursor: dict[str, int], budget: Budget) -> TickPlan:
    """The runs to request this tick within `budget`, the best-ranked units first.

    A unit is a candidate when its newest observation needs compaction and has at least the table's `min_files`
    files, unless a run is already working on it or its last compaction failed recently. Candidates are taken in
    the order of their score (ties: table, then partition order) while the budget lasts; a table's units taken go
    into as few runs as `max_partitions_per_run` allows, in partition order. Units the budget leaves move the
    table's cursor back to just before their observations, so a later tick sees them again. Units in flight or
    backed off are kept in `pending` (see the module's docstring); a pending unit with no newer observation is a
    candidate again, unless `settled`.
    """
    plan = TickPlan(cursor=dict(cursor))
    candidates: list[tuple[TableState, Observed]] = []
    positions: dict[str, dict[str, int]] = {}
    for state in states:
        newest = max([o.storage_id for o in state.observations] + [state.read_up_to or 0])
        if newest:
            plan.cursor[state.table] = max(newest, cursor.get(state.table, 0))
        positions[state.table] = position = {name: index for index, name in enumerate(state.partition_order)}
        latest = latest_per_unit(state.observations)
        for unit, kept in state.pending.items():
            if unit not in latest and unit not in state.settled:
                latest[unit] = kept
        for unit, observed in latest.items():
            if not observed.needs_compaction or observed.file_count < state.min_files:
                continue
            if observed.storage_id < state.acted_on.get(unit, 0):
                continue  # stale: a run started on the unit since (it compacted it, or the retries have it)
            if unit in state.in_flight:
                plan.in_flight.setdefault(state.table, []).append(unit)
                plan.pending.setdefault(state.table, {})[unit] = observed
            elif unit in state.backed_off:
                plan.backed_off.setdefault(state.table, []).append(unit)
                plan.pending.setdefault(state.table, {})[unit] = observed
            elif unit is None or unit in position:  # a partition gone since it was observed is not requested
                candidates.append((state, observed))
    candidates.sort(
        key=lambda c: (-c[1].score(c[0].priority), c[0].table, positions[c[0].table].get(c[1].partition, -1))
    )
    taken: dict[str, list[Observed]] = {}
    left: dict[str, list[Observed]] = {}
    runs = 0
    hourly = budget.bytes_per_hour
    for state, observed in candidates:
        table = taken.setdefault(state.table, [])
        opens_run = len(table) % budget.max_partitions_per_run == 0
        spent = budget.spent + plan.bytes_requested
        if opens_run and runs >= budget.max_runs:
            plan.deferred[state.table] = plan.deferred.get(state.table, 0) + 1
        elif hourly is not None and spent + observed.bytes_rewritten > hourly and (spent or any(taken.values())):
            plan.over_bytes[state.table] = plan.over_bytes.get(state.table, 0) + 1
        else:
            table.append(observed)
            runs += opens_run
            plan.bytes_requested += observed.bytes_rewritten
            continue
        left.setdefault(state.table, []).append(observed)
    for state in states:
        chosen = sorted(taken.get(state.table, []), key=lambda o: positions[state.table].get(o.partition, -1))
        for start in range(0, len(chosen), budget.max_partitions_per_run):
            chunk = chosen[start : start + budget.max_partitions_per_run]
            plan.runs.append(RunPlan(state.table, tuple(o.partition for o in chunk), max(o.storage_id for o in chunk)))
        if state.table in left:
            plan.cursor[state.table] = min(o.storage_id for o in left[state.table]) - 1
    rank = {(state.table, observed.partition): index for index, (state, observed) in enumerate(candidates)}
    plan.runs.sort(key=lambda run: min(rank[(run.table, p)] for p in run.partitions))  # the best-ranked run first
    return plan
