"""The demo's main job through Dagster: observe file counts, let the sensor request compaction, run what it
requested, observe again; with each table's before/after figures and check results."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.instance import install_instance_settings
from lakekeeper_dagster.surface.metadata import BACKLOG
from lakekeeper_dagster.surface.observations import OBSERVE_JOB, is_summary
from lakekeeper_dagster.surface.sensors.file_count import SENSOR_NAME, execute_request
from spark_resources.hive_session import require_metastore
from spark_resources.session import start_spark_session

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def _observe(defs: dg.Definitions, instance: dg.DagsterInstance) -> dict[str, tuple[int, int, int]]:
    """Run the observation job; per table, from its summary: (units, data files, units needing compaction)."""
    result = defs.get_job_def(OBSERVE_JOB).execute_in_process(instance=instance, run_config=QUIET)
    totals: dict[str, tuple[int, int, int]] = {}
    for event in result.all_events:
        if event.event_type == dg.DagsterEventType.ASSET_OBSERVATION:
            observation = event.event_specific_data.asset_observation
            metadata = observation.metadata
            if is_summary(metadata):
                figures = (metadata["partitions"].value, metadata["files"].value, metadata[BACKLOG].value)
                totals[observation.asset_key.to_user_string()] = figures
    return totals


def _tick(defs: dg.Definitions, instance: dg.DagsterInstance, cursor: str | None) -> dg.SensorResult:
    context = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs)
    return defs.get_repository_def().get_sensor_def(SENSOR_NAME)(context)  # resolved: its resources bound


def _report_run(key: str, result: dg.ExecuteInProcessResult) -> None:
    # A run over several partitions records its totals on each of them: report them once.
    for materialization in result.get_asset_materialization_events()[:1]:
        m = {k: v.value for k, v in materialization.materialization.metadata.items()}
        print(
            f"  {key}: materialized ({m['partitions_compacted']} compacted, {m['partitions_skipped']} skipped, "
            f"{m['partitions_failed']} failed): files {m['files_before']} -> {m['files_after']}, "
            f"rows {m.get('rows_before', '-')} -> {m.get('rows_after', '-')}, "
            f"size {m['size_before']} -> {m['size_after']}, "
            f"checksum {m.get('checksum_before', '-')} -> {m.get('checksum_after', '-')}, "
            f"backup {m['backup_table'] or '-'}"
        )
    for check in result.get_asset_check_evaluations():
        print(f"    check {check.check_name}: {'passed' if check.passed else 'FAILED'}")
    if not result.success:
        print(f"  {key}: run failed (see `make ui`, run {result.run_id})")


def run_demo(config: LakekeeperConfig, database: str, dagster_home: Path) -> bool:
    """observe -> file_count_sensor -> the runs it requested -> observe again, on a persistent instance (seen later
    in the UI); True when every requested run succeeded and nothing needs compaction afterwards."""
    config = config.model_copy(update={"tables": config.tables.model_copy(update={"databases": [database]})})
    require_metastore(config.metastore.uri, "the demo")
    spark = start_spark_session(config.spark_conf())  # the runs below share this session
    defs = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
    print(install_instance_settings(dagster_home))  # the same instance `make ui` opens
    ok = True
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        before = _observe(defs, instance)
        print(f"1. {OBSERVE_JOB}: file counts recorded as asset observations")
        for key, (units, files, needing) in sorted(before.items()):
            print(f"  {key}: {units} unit(s), {files} data files, {needing} need compaction")
        tick = _tick(defs, instance, None)
        print(f"2. {SENSOR_NAME}: {len(tick.run_requests)} run(s) requested")
        print("3. the requested runs (one Spark session per run, all its partitions):")
        for request in tick.run_requests:
            key = request.asset_selection[0].to_user_string()
            result = execute_request(defs, instance, request, QUIET)
            ok &= result.success
            _report_run(key, result)
        after = _observe(defs, instance)
        print(f"4. {OBSERVE_JOB} again:")
        for key, (units, files, needing) in sorted(after.items()):
            print(
                f"  {key}: {units} unit(s), files {before.get(key, (0, 0, 0))[1]} -> {files}, {needing} need compaction"
            )
            ok &= needing == 0
        again = _tick(defs, instance, tick.cursor)
        print(f"5. {SENSOR_NAME} again: {len(again.run_requests)} run(s) requested")
    print("Open the Dagster UI to see the assets, observations, checks and runs: make ui, then http://127.0.0.1:3000")
    return ok
