"""file_count_sensor: compaction requested for the partitions whose newest observation crosses the thresholds, and
again for those whose compaction the sensor requested failed (a partition that does not change is not observed
again, so the failed run, not a new observation, brings it back), at most MAX_RETRIES times in a row; a run that was
cancelled is not requested again (someone stopped it). Partitions skipped because a run was working on them or
their last compaction failed recently stay pending in the cursor until they can be requested (engine/plan/requests.py);
a table's cursor restarts from the beginning of its observations when its min_files changes."""

import hashlib
import json
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import dagster as dg

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.plan.requests import Observed, RunPlan, TableState, plan_tick
from lakekeeper_dagster.surface.metadata import (
    BACKLOG,
    FILE_COUNT,
    FINISHED,
    NEEDS_COMPACTION,
    NOT_FINISHED,
    PARTITION_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    RETRY_TAG,
    TABLE_TAG,
)
from lakekeeper_dagster.surface.observations import is_summary, without_backlog
from lakekeeper_dagster.surface.translator import HiveTableTranslator

SENSOR_NAME = "file_count_sensor"
EXAMPLES = 5
FETCH_PAGE = 10_000  # the most records the event log returns at once
MAX_RETRIES = 3  # a sensor run failing after this many requests in a row is not requested again
PENDING = "pending:"  # a cursor key: + a table: [[unit, observation storage id], ...] skipped (in flight, backing off)
MIN_FILES = "min_files:"  # a cursor key: + a table: the min_files its cursor was read with
RETRIED = "retried:"  # a cursor key: + the id of a failed run whose units were requested again (value: its end)
RETRY_WINDOW_SECONDS = 7 * 24 * 3600  # a failed run older than this (plus the back-off) is not requested again


def units_of_run(
    run: dg.DagsterRun, info: TableInfo, order: list[str], translator: HiveTableTranslator
) -> set[str | None]:
    """The units a run of the table's asset compacts: its `partitions` config, its partition, its range, or all."""
    config = run.run_config.get("ops", {}).get(translator.op_name(info), {}).get("config", {})
    if config.get("partitions"):
        return set(config["partitions"])
    if not info.is_partitioned:
        return {None}
    if PARTITION_TAG in run.tags:
        return {run.tags[PARTITION_TAG]}
    start, end = run.tags.get(RANGE_START_TAG), run.tags.get(RANGE_END_TAG)
    if start in order and end in order:
        return set(order[order.index(start) : order.index(end) + 1])
    return set(order)


def _runs_by_table(
    runs: list[dg.DagsterRun], tables: list[TableInfo], translator: HiveTableTranslator
) -> dict[str, list[dg.DagsterRun]]:
    keys = {translator.asset_key(t): t.qualified_name for t in tables}
    jobs = {translator.job_name(t): t for t in tables}
    by_table: dict[str, list[dg.DagsterRun]] = {}
    for run in runs:
        if run.job_name in jobs:  # the table's compaction job: a whole run, or one selecting its asset (not checks)
            info = jobs[run.job_name]
            if run.asset_selection is None or translator.asset_key(info) in run.asset_selection:
                by_table.setdefault(info.qualified_name, []).append(run)
            continue
        for key in run.asset_selection or ():  # Dagster's hidden asset job (several assets selected in the UI)
            if key in keys:
                by_table.setdefault(keys[key], []).append(run)
    return by_table


def _observations(records) -> list[Observed]:
    observed = []
    for record in records:
        metadata = record.asset_observation.metadata if record.asset_observation else {}
        if FILE_COUNT in metadata and NEEDS_COMPACTION in metadata and not is_summary(metadata):
            observed.append(
                Observed(
                    record.partition_key,
                    record.storage_id,
                    int(metadata[FILE_COUNT].value),
                    bool(metadata[NEEDS_COMPACTION].value),
                )
            )
    return observed


def _newest_to_read(instance: dg.DagsterInstance, key: dg.AssetKey, after: int | None) -> tuple[int | None, bool]:
    """(the newest observation's storage id after `after`, whether the records after `after` must be read): not when
    the only new record is the table's summary, or the newest is a summary with no backlog (nothing to compact)."""
    newest = instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=key, after_storage_id=after), limit=2, ascending=False
    ).records
    if not newest:
        return None, False
    metadata = newest[0].asset_observation.metadata if newest[0].asset_observation else {}
    done = is_summary(metadata) and (len(newest) == 1 or metadata[BACKLOG].value == 0)
    return newest[0].storage_id, not done


def _new_observations(instance: dg.DagsterInstance, key: dg.AssetKey, after: int | None, limit: int) -> list:
    """Up to `limit` observation records of `key` stored after `after`, oldest first (paged by the event log)."""
    records: list = []
    while len(records) < limit:
        page = instance.fetch_observations(
            dg.AssetRecordsFilter(asset_key=key, after_storage_id=records[-1].storage_id if records else after),
            limit=min(limit - len(records), FETCH_PAGE),
            ascending=True,
        )
        records += page.records
        if not page.has_more:
            break
    return records


def run_request(
    run: RunPlan, info: TableInfo, translator: HiveTableTranslator, run_key: str | None = None, retry: int = 0
) -> dg.RunRequest:
    """One run of the table's compaction job over the planned partitions (one Spark session for all of them);
    `retry`: how many times in a row these units are requested again (a tag on the run)."""
    key = translator.asset_key(info)
    job_name = translator.job_name(info)
    tags = {TABLE_TAG: info.qualified_name} | ({RETRY_TAG: str(retry)} if retry else {})
    partitions = [p for p in run.partitions if p is not None]
    run_key = run_key or f"{info.qualified_name}:{len(partitions)}:{run.last_storage_id}"
    if not partitions:
        return dg.RunRequest(run_key=run_key, job_name=job_name, asset_selection=[key], tags=tags)
    if len(partitions) > 1:
        tags |= {RANGE_START_TAG: partitions[0], RANGE_END_TAG: partitions[-1]}
    return dg.RunRequest(
        run_key=run_key,
        job_name=job_name,
        asset_selection=[key],
        partition_key=partitions[0] if len(partitions) == 1 else None,
        tags=tags,
        run_config={"ops": {translator.op_name(info): {"config": {"partitions": partitions}}}},
    )


def execute_request(
    defs: dg.Definitions, instance: dg.DagsterInstance, request: dg.RunRequest, run_config: dict | None = None
) -> dg.ExecuteInProcessResult:
    """Run what the sensor requested in this process, its job with its tags and run config, as the daemon would."""
    return defs.resolve_job_def(request.job_name).execute_in_process(
        instance=instance,
        asset_selection=list(request.asset_selection),
        partition_key=request.partition_key,
        tags=dict(request.tags),
        run_config={**request.run_config, **(run_config or {})},
        raise_on_error=False,
    )


def _order(instance: dg.DagsterInstance, info: TableInfo, translator: HiveTableTranslator) -> list[str]:
    """The table's partitions in their Dagster order (none for an unpartitioned table)."""
    return instance.get_dynamic_partitions(translator.partitions_def_name(info)) if info.is_partitioned else []


def _last_outcomes(
    runs: list[dg.DagsterRun], info: TableInfo, order: list[str], translator: HiveTableTranslator
) -> dict[str | None, dg.DagsterRun]:
    """Each unit's newest run among finished `runs` (newest first)."""
    last: dict[str | None, dg.DagsterRun] = {}
    for run in runs:
        for unit in units_of_run(run, info, order, translator):
            last.setdefault(unit, run)
    return last


def _failed_to_retry(
    instance: dg.DagsterInstance,
    tables: list[TableInfo],
    translator: HiveTableTranslator,
    cursor: dict,
    now: float,
    backoff: int,
) -> tuple[dict[str, dict[str | None, dg.DagsterRun]], dict[str, int]]:
    """Per table, the units to request again, each with its failed run: runs the sensor requested (they carry its
    table tag) that failed (not cancelled: someone stopped them) more than `backoff` s ago, requested fewer than
    MAX_RETRIES times in a row (their retry tag), not requested again yet (the cursor marks them), and still each
    unit's last run; and the marks ({cursor key: end}) of those failed runs."""
    ended = instance.get_run_records(
        dg.RunsFilter(
            statuses=[dg.DagsterRunStatus.FAILURE],
            updated_after=datetime.fromtimestamp(now - backoff - RETRY_WINDOW_SECONDS, tz=timezone.utc),
            updated_before=datetime.fromtimestamp(now - backoff, tz=timezone.utc),
        )
    )
    due = {
        r.dagster_run.run_id: r
        for r in ended
        if TABLE_TAG in r.dagster_run.tags
        and RETRIED + r.dagster_run.run_id not in cursor
        and retry_count(r.dagster_run) < MAX_RETRIES
    }
    if not due:
        return {}, {}
    oldest = min(r.update_timestamp for r in due.values()) - timedelta(seconds=1)
    since = [r.dagster_run for r in instance.get_run_records(dg.RunsFilter(statuses=FINISHED, updated_after=oldest))]
    by_name = {t.qualified_name: t for t in tables}
    retries = {}
    for name, runs in _runs_by_table(since, tables, translator).items():
        info = by_name[name]
        order = _order(instance, info, translator)
        last = _last_outcomes(runs, info, order, translator)
        units = {u: run for u, run in last.items() if run.run_id in due and (u is None or u in order)}
        if units:
            retries[name] = units
    return retries, {RETRIED + run_id: int(r.update_timestamp.timestamp()) for run_id, r in due.items()}


def retry_count(run: dg.DagsterRun) -> int:
    """How many times in a row the sensor requested the run's units again (0: a first request, or not the sensor's)."""
    return int(run.tags.get(RETRY_TAG, "0"))


def _retry_runs(
    retries: dict[str, dict[str | None, dg.DagsterRun]],
    busy: dict[str, set],
    orders: dict[str, list[str]],
    room: int,
    per_run: int,
) -> tuple[list[tuple[RunPlan, str, int]], set[str]]:
    """Runs over the units to request again (none being compacted or requested this tick: `busy`), at most `room`,
    with their run keys (from the failed runs and the units: the daemon launches one run per key) and retry counts;
    and the tables left for a later tick."""
    runs, deferred = [], set()
    for name, units in sorted(retries.items()):
        position = {p: i for i, p in enumerate(orders.get(name, []))}
        wanted = sorted((u for u in units if u not in busy.get(name, set())), key=lambda u: position.get(u, -1))
        for start in range(0, len(wanted), per_run):
            chunk = tuple(wanted[start : start + per_run])
            if len(runs) >= room:
                deferred.add(name)
                break
            failed = sorted({units[u].run_id for u in chunk})
            digest = hashlib.sha256(json.dumps([failed, chunk]).encode()).hexdigest()[:16]
            retry = 1 + max(retry_count(units[u]) for u in chunk)
            runs.append((RunPlan(name, chunk, 0), f"{name}:{len(chunk)}:retry-{digest}", retry))
    return runs, deferred


def _named(units: Sequence[str | None]) -> str:
    names = [u or "(table)" for u in units]
    return ", ".join(names[:EXAMPLES]) + (f" and {len(names) - EXAMPLES} more" if len(names) > EXAMPLES else "")


def build_file_count_sensor(
    settings: LakekeeperConfig, tables: list[TableInfo], translator: HiveTableTranslator, jobs: Sequence[Any]
) -> dg.SensorDefinition:
    """The code location's sensor over the tables' compaction `jobs`; off by default (turn it on in the UI or with
    `dagster sensor start`)."""
    by_name = {t.qualified_name: t for t in sorted(tables, key=lambda t: t.qualified_name)}
    thresholds = settings.sensor

    @dg.sensor(
        name=SENSOR_NAME,
        jobs=list(jobs) or None,
        minimum_interval_seconds=thresholds.minimum_interval_seconds,
        default_status=dg.DefaultSensorStatus.STOPPED,
        description="Requests compaction of the partitions whose newest observed file count is at least "
        "min_files and whose files are small by the plan's rule; skips partitions already being compacted, backs "
        "off partitions whose last compaction failed and requests them again after the back-off, and groups a "
        "table's partitions into few runs.",
    )
    def file_count_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        instance = context.instance
        stored = json.loads(context.cursor or "{}")
        pending = {k[len(PENDING) :]: {u: i for u, i in v} for k, v in stored.items() if k.startswith(PENDING)}
        cursor = {k: int(v) for k, v in stored.items() if not k.startswith(PENDING)}
        for name, info in by_name.items():  # a changed min_files reads the table's observations again
            min_files = settings.min_files_for(info.database, info.name)
            if cursor.get(MIN_FILES + name, min_files) != min_files:
                cursor.pop(name, None)
            cursor[MIN_FILES + name] = min_files
        now, backoff = time.time(), thresholds.failure_backoff_seconds
        active = _runs_by_table(list(instance.get_runs(dg.RunsFilter(statuses=NOT_FINISHED))), tables, translator)
        cutoff = datetime.fromtimestamp(now - backoff, tz=timezone.utc)
        finished = _runs_by_table(
            list(instance.get_runs(dg.RunsFilter(statuses=FINISHED, updated_after=cutoff))), tables, translator
        )
        retries, marks = _failed_to_retry(instance, tables, translator, cursor, now, backoff)
        orders: dict[str, list[str]] = {}
        in_flight: dict[str, set[str | None]] = {}
        failures: dict[str, dict[str | None, dg.DagsterRun]] = {}
        settled: dict[str, set[str | None]] = {}  # compacted, or the sensor's failed run: the retries request it
        for name in set(active) | set(finished) | set(retries):
            info = by_name[name]
            orders[name] = order = _order(instance, info, translator)
            in_flight[name] = set().union(*[units_of_run(r, info, order, translator) for r in active.get(name, [])])
            last_outcome = _last_outcomes(finished.get(name, []), info, order, translator)
            failures[name] = {u: r for u, r in last_outcome.items() if r.status == dg.DagsterRunStatus.FAILURE}
            settled[name] = {
                u for u, r in last_outcome.items() if r.status == dg.DagsterRunStatus.SUCCESS or TABLE_TAG in r.tags
            }
        budget = thresholds.max_observations_per_tick
        states = []
        quiet = without_backlog(instance, [translator.asset_key(info) for info in by_name.values()])
        for name, info in by_name.items():
            if budget <= 0:
                break
            key = translator.asset_key(info)
            if key in quiet and not pending.get(name):
                continue  # the last observation run kept no unit needing compaction: no event-log read
            newest, to_read = _newest_to_read(instance, key, cursor.get(name))
            if newest is None and not pending.get(name):
                continue
            records = _new_observations(instance, key, cursor.get(name), budget) if to_read else []
            budget -= len(records)
            if name not in orders:
                orders[name] = _order(instance, info, translator)
            states.append(
                TableState(
                    table=name,
                    observations=_observations(records),
                    partition_order=orders[name],
                    min_files=settings.min_files_for(info.database, info.name),
                    in_flight=in_flight.get(name, set()),
                    backed_off=set(failures.get(name, {})),
                    read_up_to=records[-1].storage_id if records else newest,
                    pending=pending.get(name, {}),
                    settled=settled.get(name, set()),
                )
            )
        plan = plan_tick(states, cursor, thresholds.max_runs_per_tick, thresholds.max_partitions_per_run)
        busy = {name: set(units) for name, units in in_flight.items()}
        for run in plan.runs:
            busy.setdefault(run.table, set()).update(run.partitions)
        room = thresholds.max_runs_per_tick - len(plan.runs)
        retried, deferred = _retry_runs(retries, busy, orders, room, thresholds.max_partitions_per_run)
        for name, units in plan.in_flight.items():
            context.log.info(
                f"{name}: already being compacted or requested, requested again if that run ends without "
                f"compacting them: {_named(units)}"
            )
        for name, failed in sorted(failures.items()):
            if failed:
                runs = sorted({r.run_id[:8] for r in failed.values()})
                context.log.info(
                    f"{name}: backing off {len(failed)} partition(s) whose last compaction failed less than "
                    f"{backoff} s ago (run {', '.join(runs)}): {_named(sorted(failed, key=lambda u: u or ''))}; "
                    "requested again once the back-off is over: see the failed run, then wait or change "
                    "sensor.failure_backoff_seconds"
                )
        for name, left in plan.deferred.items():
            context.log.info(f"{name}: {left} partition(s) left for the next tick (sensor.max_runs_per_tick)")
        requests = [run_request(run, by_name[run.table], translator) for run in plan.runs]
        for run in plan.runs:
            context.log.info(
                f"{run.table}: requesting compaction of {len(run.partitions)} unit(s): {_named(run.partitions)}"
            )
        for run, run_key, retry in retried:
            failed = sorted({retries[run.table][u].run_id[:8] for u in run.partitions})
            context.log.info(
                f"{run.table}: requesting again {len(run.partitions)} unit(s) whose last compaction (run "
                f"{', '.join(failed)}) failed or was cancelled more than {backoff} s ago: {_named(run.partitions)}"
            )
            requests.append(run_request(run, by_name[run.table], translator, run_key, retry))
        waiting = {RETRIED + r.run_id for name in deferred for r in retries[name].values()}
        horizon = now - backoff - RETRY_WINDOW_SECONDS
        new_cursor = {
            k: v
            for k, v in {**plan.cursor, **marks}.items()
            if k not in waiting and not (k.startswith(RETRIED) and v < horizon)
        }
        pending |= {state.table: plan.pending.get(state.table, {}) for state in states}
        new_cursor |= {PENDING + name: sorted(units.items(), key=str) for name, units in pending.items() if units}
        cursor_text = json.dumps(new_cursor, sort_keys=True)
        if not requests:
            return dg.SensorResult(skip_reason="no new observation over the thresholds", cursor=cursor_text)
        return dg.SensorResult(run_requests=requests, cursor=cursor_text)

    return file_count_sensor
