"""file_count_sensor: compaction requested for the partitions whose newest observation crosses the thresholds, and
again for those whose compaction the sensor requested failed (a partition that does not change is not observed
again, so the failed run, not a new observation, brings it back), at most MAX_RETRIES times in a row; a run that was
cancelled is not requested again (someone stopped it). Partitions skipped because a run was working on them or
their last compaction failed recently stay pending in the cursor until they can be requested (engine/plan/requests.py);
a table's cursor restarts from the beginning of its observations when its min_files changes. What a tick reads is
ranked by files removed per GB rewritten (times the table's priority) and requested best first within the budget:
runs a tick, MB an hour (`sensor/cursor.py` keeps the hour's requests), nothing during quiet hours."""

import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

import dagster as dg

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.plan.quiet_hours import quiet_until
from lakekeeper_dagster.engine.plan.requests import Budget, Observed, RunPlan, TableState, plan_tick
from lakekeeper_dagster.surface.metadata import (
    BACKLOG,
    FILE_COUNT,
    FINISHED,
    NEEDS_COMPACTION,
    NOT_FINISHED,
    RANGE_END_TAG,
    RANGE_START_TAG,
    RETRY_TAG,
    TABLE_TAG,
)
from lakekeeper_dagster.surface.observations import is_summary, without_backlog
from lakekeeper_dagster.surface.sensors.cursor import read_cursor, write_cursor
from lakekeeper_dagster.surface.sensors.runs import (
    RETRIED,
    RETRY_WINDOW_SECONDS,
    acted_on,
    failed_to_retry,
    last_outcomes,
    partition_order,
    retry_runs,
    runs_by_table,
    units_of_run,
)
from lakekeeper_dagster.surface.translator import HiveTableTranslator

SENSOR_NAME = "file_count_sensor"
EXAMPLES = 5
FETCH_PAGE = 10_000  # the most records the event log returns at once
MB = 1024**2
SKEW_SECONDS = 3600  # the runs read for staleness start this much before the oldest candidate's observation
MIN_FILES = "min_files:"  # a cursor key: + a table: the min_files its cursor was read with


def _observations(records) -> list[Observed]:
    observed = []
    for record in records:
        metadata = record.asset_observation.metadata if record.asset_observation else {}
        if FILE_COUNT in metadata and NEEDS_COMPACTION in metadata and not is_summary(metadata):
            files = int(metadata[FILE_COUNT].value)
            target = int(metadata["target_files"].value) if "target_files" in metadata else files
            observed.append(
                Observed(
                    record.partition_key,
                    record.storage_id,
                    files,
                    bool(metadata[NEEDS_COMPACTION].value),
                    files_removed=max(files - target, 0),
                    bytes_rewritten=int(metadata["small_bytes"].value) if "small_bytes" in metadata else 0,
                    recorded_at=record.timestamp,
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
        "off partitions whose last compaction failed and requests them again after the back-off, ranks what is left "
        "by files removed per GB rewritten and requests the best first within its budget (runs a tick, MB an hour, "
        "quiet hours), grouping a table's partitions into few runs.",
    )
    def file_count_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        instance = context.instance
        zone = ZoneInfo(thresholds.timezone)
        if until := quiet_until(datetime.now(zone), thresholds.quiet_hours):
            return dg.SensorResult(
                skip_reason=f"quiet hours (sensor.quiet_hours) until {until:%Y-%m-%d %H:%M} {thresholds.timezone}: "
                "nothing read or requested",
                cursor=context.cursor,
            )
        min_files = {name: settings.min_files_for(i.database, i.name) for name, i in by_name.items()}
        kept = read_cursor(context.cursor, min_files)
        pending, cursor = kept.pending, kept.marks
        for name in by_name:  # a changed min_files reads the table's observations again
            if cursor.get(MIN_FILES + name, min_files[name]) != min_files[name]:
                cursor.pop(name, None)
            cursor[MIN_FILES + name] = min_files[name]
        now, backoff = time.time(), thresholds.failure_backoff_seconds
        active = runs_by_table(list(instance.get_runs(dg.RunsFilter(statuses=NOT_FINISHED))), tables, translator)
        cutoff = datetime.fromtimestamp(now - backoff, tz=timezone.utc)
        finished = runs_by_table(
            list(instance.get_runs(dg.RunsFilter(statuses=FINISHED, updated_after=cutoff))), tables, translator
        )
        retries, marks = failed_to_retry(instance, tables, translator, cursor, now, backoff)
        orders: dict[str, list[str]] = {}
        in_flight: dict[str, set[str | None]] = {}
        failures: dict[str, dict[str | None, dg.DagsterRun]] = {}
        settled: dict[str, set[str | None]] = {}  # compacted, or the sensor's failed run: the retries request it
        for name in set(active) | set(finished) | set(retries):
            info = by_name[name]
            orders[name] = order = partition_order(instance, info, translator)
            in_flight[name] = set().union(*[units_of_run(r, info, order, translator) for r in active.get(name, [])])
            last_outcome = last_outcomes(finished.get(name, []), info, order, translator)
            failures[name] = {u: r for u, r in last_outcome.items() if r.status == dg.DagsterRunStatus.FAILURE}
            settled[name] = {
                u for u, r in last_outcome.items() if r.status == dg.DagsterRunStatus.SUCCESS or TABLE_TAG in r.tags
            }
        reads_left = thresholds.max_observations_per_tick
        names = list(by_name)  # read in turn from where the last tick stopped
        first = names.index(kept.next_table) if kept.next_table in by_name else 0
        no_backlog = without_backlog(instance, [translator.asset_key(info) for info in by_name.values()])
        read: list[tuple[str, list[Observed], int | None]] = []
        next_table = None
        for name in names[first:] + names[:first]:
            if reads_left <= 0:
                next_table = name
                break
            info = by_name[name]
            key = translator.asset_key(info)
            if key in no_backlog and not pending.get(name):
                continue  # the last observation run kept no unit needing compaction: no event-log read
            newest, to_read = _newest_to_read(instance, key, cursor.get(name))
            if newest is None and not pending.get(name):
                continue
            records = _new_observations(instance, key, cursor.get(name), reads_left) if to_read else []
            reads_left -= len(records)
            read.append((name, _observations(records), records[-1].storage_id if records else newest))
        wanting = {}  # the tables with candidates, and when their oldest candidate was observed
        for name, observations, _ in read:
            kept_pending = list(pending.get(name, {}).values())
            for o in observations + kept_pending:
                if o.needs_compaction and o.file_count >= min_files[name] and o.recorded_at:
                    wanting[name] = min(wanting.get(name, o.recorded_at), o.recorded_at)
            if name not in orders:
                orders[name] = partition_order(instance, by_name[name], translator)
        since = max(min(wanting.values(), default=now) - SKEW_SECONDS, now - RETRY_WINDOW_SECONDS)
        acted = acted_on(instance, [by_name[n] for n in wanting], translator, since, orders) if wanting else {}
        states = []
        for name, observations, read_up_to in read:
            info = by_name[name]
            states.append(
                TableState(
                    table=name,
                    observations=observations,
                    partition_order=orders[name],
                    min_files=min_files[name],
                    in_flight=in_flight.get(name, set()),
                    backed_off=set(failures.get(name, {})),
                    read_up_to=read_up_to,
                    pending=pending.get(name, {}),
                    settled=settled.get(name, set()),
                    priority=settings.priority_for(info.database, info.name),
                    acted_on=acted.get(name, {}),
                )
            )
        hourly = thresholds.max_mb_per_hour * MB if thresholds.max_mb_per_hour else None
        spent = kept.spent(now)
        plan = plan_tick(
            states, cursor, Budget(thresholds.max_runs_per_tick, thresholds.max_partitions_per_run, hourly, spent)
        )
        busy = {name: set(units) for name, units in in_flight.items()}
        for run in plan.runs:
            busy.setdefault(run.table, set()).update(run.partitions)
        room = thresholds.max_runs_per_tick - len(plan.runs)
        retried, deferred = retry_runs(retries, busy, orders, room, thresholds.max_partitions_per_run)
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
        for name, left in plan.over_bytes.items():
            context.log.info(
                f"{name}: {left} partition(s) left for a later tick: the hourly budget (sensor.max_mb_per_hour: "
                f"{thresholds.max_mb_per_hour} MB) has {(spent + plan.bytes_requested) // MB} MB requested within "
                "the hour"
            )
        requests = [run_request(run, by_name[run.table], translator) for run in plan.runs]
        for run in plan.runs:
            context.log.info(
                f"{run.table}: requesting compaction of {len(run.partitions)} unit(s): {_named(run.partitions)}"
            )
        if plan.runs:
            context.log.info(
                f"{len(plan.runs)} run(s) requested, best ranked first (files removed per GB rewritten, times the "
                f"table's priority), {plan.bytes_requested // MB} MB of small files to rewrite"
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
        requested = kept.requested + ([(now, plan.bytes_requested)] if plan.runs else [])
        cursor_text = write_cursor(new_cursor, pending, requested, now, next_table)
        if not requests:
            reason = "no new observation over the thresholds"
            if plan.over_bytes:
                reason = (
                    f"the hourly budget (sensor.max_mb_per_hour: {thresholds.max_mb_per_hour} MB) is spent: "
                    f"{sum(plan.over_bytes.values())} partition(s) wait for a later tick"
                )
            return dg.SensorResult(skip_reason=reason, cursor=cursor_text)
        return dg.SensorResult(run_requests=requests, cursor=cursor_text)

    return file_count_sensor
