"""The runs the file-count sensor reads: which units a run covers, each unit's last outcome, and the failed runs whose
units it requests again (at most MAX_RETRIES times in a row, within RETRY_WINDOW_SECONDS)."""

import hashlib
import json
from datetime import datetime, timedelta, timezone

import dagster as dg

from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.plan.requests import RunPlan
from lakekeeper_dagster.surface.metadata import (
    FINISHED,
    PARTITION_TAG,
    RANGE_END_TAG,
    RANGE_START_TAG,
    RETRY_TAG,
    TABLE_TAG,
)
from lakekeeper_dagster.surface.translator import HiveTableTranslator

MAX_RETRIES = 3  # a sensor run failing after this many requests in a row is not requested again
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


def runs_by_table(
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


def partition_order(instance: dg.DagsterInstance, info: TableInfo, translator: HiveTableTranslator) -> list[str]:
    """The table's partitions in their Dagster order (none for an unpartitioned table)."""
    return instance.get_dynamic_partitions(translator.partitions_def_name(info)) if info.is_partitioned else []


def last_outcomes(
    runs: list[dg.DagsterRun], info: TableInfo, order: list[str], translator: HiveTableTranslator
) -> dict[str | None, dg.DagsterRun]:
    """Each unit's newest run among finished `runs` (newest first)."""
    last: dict[str | None, dg.DagsterRun] = {}
    for run in runs:
        for unit in units_of_run(run, info, order, translator):
            last.setdefault(unit, run)
    return last


def failed_to_retry(
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
    for name, runs in runs_by_table(since, tables, translator).items():
        info = by_name[name]
        order = partition_order(instance, info, translator)
        last = last_outcomes(runs, info, order, translator)
        units = {u: run for u, run in last.items() if run.run_id in due and (u is None or u in order)}
        if units:
            retries[name] = units
    return retries, {RETRIED + run_id: int(r.update_timestamp.timestamp()) for run_id, r in due.items()}


def retry_count(run: dg.DagsterRun) -> int:
    """How many times in a row the sensor requested the run's units again (0: a first request, or not the sensor's)."""
    return int(run.tags.get(RETRY_TAG, "0"))


def retry_runs(
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


def acted_on(
    instance: dg.DagsterInstance,
    tables: list[TableInfo],
    translator: HiveTableTranslator,
    since: float,
    orders: dict[str, list[str]],
) -> dict[str, dict[str | None, int]]:
    """Per table (of `tables`), the storage id of the start of each unit's last run that settled it, among runs
    finished since `since`: a run that succeeded over the unit, or one the sensor requested that failed (its retries
    request the unit again). An observation stored before that is stale. One event-log read a run."""
    records = instance.get_run_records(
        dg.RunsFilter(
            statuses=[dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE],
            updated_after=datetime.fromtimestamp(since, tz=timezone.utc),
        )
    )
    by_name = {t.qualified_name: t for t in tables}
    acted: dict[str, dict[str | None, int]] = {}
    for name, runs in runs_by_table([r.dagster_run for r in records], tables, translator).items():
        info = by_name[name]
        units = acted.setdefault(name, {})
        for run in runs:
            if run.status != dg.DagsterRunStatus.SUCCESS and TABLE_TAG not in run.tags:
                continue
            started = instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.RUN_START, limit=1)
            if not started.records:
                continue
            for unit in units_of_run(run, info, orders[name], translator):
                units[unit] = max(units.get(unit, 0), started.records[0].storage_id)
    return acted
