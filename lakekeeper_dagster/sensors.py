"""file_count_sensor: compaction requested for the partitions whose newest observation crosses the thresholds."""

import json
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import dagster as dg

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.plan.requests import Observed, RunPlan, TableState, plan_tick
from lakekeeper_dagster.observations import FILE_COUNT, NEEDS_COMPACTION
from lakekeeper_dagster.translator import HiveTableTranslator

SENSOR_NAME = "file_count_sensor"
TABLE_TAG = "lakekeeper/table"
EXAMPLES = 5
FETCH_PAGE = 10_000  # the most records the event log returns at once

# Dagster's system tags of a partitioned run: documented, but not exported by dagster 1.13, so named here once;
# test_dagster checks them against the tags of a real one-partition run and a real range run.
PARTITION_TAG = "dagster/partition"
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"

# Dagster's finished and unfinished run statuses (MANAGED, a run of an external system, is neither).
FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]
NOT_FINISHED = [
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.SUSPENDED,
    dg.DagsterRunStatus.CANCELING,
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
]


def run_units(
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
        if FILE_COUNT in metadata and NEEDS_COMPACTION in metadata:
            observed.append(
                Observed(
                    record.partition_key,
                    record.storage_id,
                    int(metadata[FILE_COUNT].value),
                    bool(metadata[NEEDS_COMPACTION].value),
                )
            )
    return observed


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


def run_request(run: RunPlan, info: TableInfo, translator: HiveTableTranslator) -> dg.RunRequest:
    """One run of the table's compaction job over the planned partitions (one Spark session for all of them)."""
    key = translator.asset_key(info)
    job_name = translator.job_name(info)
    tags = {TABLE_TAG: info.qualified_name}
    partitions = [p for p in run.partitions if p is not None]
    run_key = f"{info.qualified_name}:{len(partitions)}:{run.last_storage_id}"
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
        "off partitions whose last compaction failed, and groups a table's partitions into few runs.",
    )
    def file_count_sensor(context: dg.SensorEvaluationContext) -> dg.SensorResult:
        instance = context.instance
        cursor = {k: int(v) for k, v in json.loads(context.cursor or "{}").items()}
        active = _runs_by_table(list(instance.get_runs(dg.RunsFilter(statuses=NOT_FINISHED))), tables, translator)
        cutoff = datetime.fromtimestamp(time.time() - thresholds.failure_backoff_seconds, tz=timezone.utc)
        finished = _runs_by_table(
            list(instance.get_runs(dg.RunsFilter(statuses=FINISHED, updated_after=cutoff))), tables, translator
        )
        budget = thresholds.max_observations_per_tick
        states = []
        failures: dict[str, dict[str | None, dg.DagsterRun]] = {}
        for name, info in by_name.items():
            if budget <= 0:
                break
            records = _new_observations(instance, translator.asset_key(info), cursor.get(name), budget)
            if not records:
                continue
            budget -= len(records)
            order = instance.get_dynamic_partitions(translator.partitions_def_name(info)) if info.is_partitioned else []
            in_flight = set().union(*[run_units(r, info, order, translator) for r in active.get(name, [])])
            last_outcome: dict[str | None, dg.DagsterRun] = {}
            for run in finished.get(name, []):  # newest first: the first run seen per unit is its last outcome
                for unit in run_units(run, info, order, translator):
                    last_outcome.setdefault(unit, run)
            failed = {u: r for u, r in last_outcome.items() if r.status == dg.DagsterRunStatus.FAILURE}
            failures[name] = failed
            states.append(
                TableState(
                    table=name,
                    observations=_observations(records),
                    partition_order=order,
                    min_files=settings.min_files_for(info.database, info.name),
                    in_flight=in_flight,
                    backed_off=set(failed),
                    read_up_to=records[-1].storage_id,
                )
            )
        plan = plan_tick(states, cursor, thresholds.max_runs_per_tick, thresholds.max_partitions_per_run)
        for name, units in plan.in_flight.items():
            context.log.info(f"{name}: already being compacted or requested, not requested again: {_named(units)}")
        for name, units in plan.backed_off.items():
            runs = sorted({failures[name][unit].run_id[:8] for unit in units})
            context.log.info(
                f"{name}: backing off {len(units)} partition(s) whose last compaction failed less than "
                f"{thresholds.failure_backoff_seconds} s ago (run {', '.join(runs)}): {_named(units)}; "
                "see the failed run, then wait or change sensor.failure_backoff_seconds"
            )
        for name, left in plan.deferred.items():
            context.log.info(f"{name}: {left} partition(s) left for the next tick (sensor.max_runs_per_tick)")
        requests = [run_request(run, by_name[run.table], translator) for run in plan.runs]
        for run in plan.runs:
            context.log.info(
                f"{run.table}: requesting compaction of {len(run.partitions)} unit(s): {_named(run.partitions)}"
            )
        new_cursor = json.dumps(plan.cursor, sort_keys=True)
        if not requests:
            return dg.SensorResult(skip_reason="no new observation over the thresholds", cursor=new_cursor)
        return dg.SensorResult(run_requests=requests, cursor=new_cursor)

    return file_count_sensor
