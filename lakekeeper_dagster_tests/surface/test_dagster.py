"""The Dagster surface on a real instance, real Spark, a real metastore and real files."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from lakekeeper_dagster.config import load_config, parse_config
from lakekeeper_dagster.engine.hive.catalog import read_table
from lakekeeper_dagster.engine.hive.history_table import DAY
from lakekeeper_dagster.surface.assets import CHECKSUM, DIFF, ROW_COUNT, WITHIN_TARGET
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.checks import LIVE_MATCHES_BACKUP
from lakekeeper_dagster.surface.metadata import FINISHED, NOT_FINISHED, PARTITION_TAG, RANGE_END_TAG, RANGE_START_TAG
from lakekeeper_dagster.surface.sensors.runs import units_of_run
from lakekeeper_dagster.surface.state import store_state
from lakekeeper_dagster.surface.tables import load_managed_tables
from lakekeeper_dagster_tests.surface.identity import TRANSLATOR, asset_key, job_name, partitions_def_name
from lakekeeper_dagster_tests.tables import (
    DATES,
    REPO,
    cli_spark_submit,
    data_files,
    make_table,
    new_cluster_apps,
    rows_of,
)


@pytest.fixture
def location(spark, metastore, database, data_dir):
    """Two managed tables (partitioned and flat), a view, and the code location built on them."""
    make_table(spark, database, "ev", data_dir / "ev", partitions=DATES, files=4)
    make_table(spark, database, "flat", data_dir / "flat", files=5)
    spark.sql(f"CREATE VIEW {database}.vw AS SELECT 1 AS x")
    config = parse_config(
        {"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}, "asset_owners": ["team:data"]}, "t"
    )
    resource = spark_resource_for(config, stop_at_teardown=False)
    return build_definitions(config, spark, resource)


def test_definitions_snapshot(location, database):
    location.resolve_all_job_defs()
    graph = location.resolve_asset_graph()
    assert sorted(k.to_user_string() for k in graph.get_all_asset_keys()) == [
        f"hive/{database}/ev",
        f"hive/{database}/flat",
    ]
    ev = graph.get(asset_key(database, "ev"))
    assert ev.partitions_def == dg.DynamicPartitionsDefinition(name=partitions_def_name(database, "ev"))
    assert graph.get(asset_key(database, "flat")).partitions_def is None
    assert ev.group_name == database and ev.owners == ["team:data"]
    assert ev.kinds == {"spark", "hive", "parquet"}
    schema = ev.metadata["dagster/column_schema"]
    assert [(c.name, c.type) for c in schema.columns] == [
        ("id", "bigint"),
        ("v", "string"),
        ("n", "int"),
        ("date", "string"),
    ]
    checks = sorted(k.name for k in graph.asset_check_keys if k.asset_key == asset_key(database, "ev"))
    assert checks == sorted([ROW_COUNT, CHECKSUM, WITHIN_TARGET, LIVE_MATCHES_BACKUP])
    assert sorted(j.name for j in location.jobs if not j.name.startswith("__")) == [
        f"Compact__{database}__ev",
        f"Compact__{database}__flat",
        "analyze_job",
        "archive_job",
        "cleanup_job",
        "merge_job",
        "observe_partitions_job",
        "recover_job",
        "refresh_tables_job",
        "retention_job",
        "rollback_job",
        "sync_partitions_job",
    ]
    assert [s.name for s in location.schedules] == [
        "cleanup_old_backups",
        "observe_partitions_schedule",
        "refresh_tables_schedule",
        "archive_schedule",
        "retention_schedule",
        "merge_schedule",
    ]
    assert {s.default_status for s in location.schedules} == {dg.DefaultScheduleStatus.STOPPED}
    assert location.schedules[1].cron_schedule == "0 * * * *"
    sensor, partitions_sensor = location.sensors
    assert (sensor.name, sensor.default_status, sensor.minimum_interval_seconds) == (
        "file_count_sensor",
        dg.DefaultSensorStatus.STOPPED,
        300,
    )
    assert (partitions_sensor.name, partitions_sensor.default_status) == (
        "hive_partitions_sensor",
        dg.DefaultSensorStatus.RUNNING,
    )


def _checks(result: dg.ExecuteInProcessResult) -> dict:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


@pytest.mark.cluster
def test_materializing_partitions_compacts_them_and_checks_pass(spark, location, database, data_dir):
    table = f"{database}.ev"
    before = rows_of(spark, table)
    with dg.instance_for_test() as instance:
        location.get_job_def("sync_partitions_job").execute_in_process(instance=instance)
        assert instance.get_dynamic_partitions(partitions_def_name(database, "ev")) == [
            "date=2024-01-01",
            "date=2024-01-02",
        ]
        job = location.get_implicit_global_asset_job_def()
        result = job.execute_in_process(
            instance=instance,
            asset_selection=[asset_key(database, "ev")],
            partition_key="date=2024-01-01",
        )
        assert result.success
        run = instance.get_run_by_id(result.run_id)
        assert run.tags[PARTITION_TAG] == "date=2024-01-01"  # the tag the sensor reads a run's partition from
        order = instance.get_dynamic_partitions(partitions_def_name(database, "ev"))
        assert units_of_run(run, read_table(spark, database, "ev"), order, TRANSLATOR) == {"date=2024-01-01"}
        (materialization,) = result.asset_materializations_for_node(f"hive__{database}__ev")
        metadata = {k: v.value for k, v in materialization.metadata.items()}
        assert (metadata["files_before"], metadata["files_after"], metadata["dagster/row_count"]) == (4, 1, 200)
        assert metadata["backup_table"].startswith("__bkp_ev_")
        checks = _checks(result)
        assert checks[ROW_COUNT].passed and checks[CHECKSUM].passed and checks[WITHIN_TARGET].passed
        assert checks[ROW_COUNT].metadata["partitions"].value == "date=2024-01-01"
        assert checks[ROW_COUNT].metadata["rows_before"].value == 200
        assert len(data_files(data_dir / "ev" / "date=2024-01-01")) == 1
        assert len(data_files(data_dir / "ev" / "date=2024-01-02")) == 4
        assert rows_of(spark, table) == before

        # The independent re-count ran after the materialization: live partition == the originals kept.
        assert checks[LIVE_MATCHES_BACKUP].passed
        assert checks[LIVE_MATCHES_BACKUP].metadata["partitions_compared"].value == 1


def test_a_history_that_cannot_be_read_never_fails_a_committed_materialization(spark, metastore, database, data_dir):
    """The diff shown after a compaction reads the history table; when Spark cannot read it (a
    damaged file in it), the step that committed the compaction still succeeds, with a warning and no diff."""
    make_table(spark, database, "ev", data_dir / "ev", partitions=DATES, files=4)
    history = f"{database}_h"
    settings = {"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}}
    config = parse_config({**settings, "history": {"table": f"{history}.history"}}, "t")
    location = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
    selection = {"asset_selection": [asset_key(database, "ev")], "raise_on_error": False}
    try:
        with dg.instance_for_test() as instance:
            location.get_job_def("sync_partitions_job").execute_in_process(instance=instance)
            job = location.get_implicit_global_asset_job_def()
            first = job.execute_in_process(instance=instance, partition_key="date=2024-01-01", **selection)
            assert DIFF in _materialization(first, database).metadata
            root = Path(read_table(spark, history, "history").location.removeprefix("file:"))
            for day in root.glob(f"{DAY}=*"):
                (day / "history-damaged-000.parquet").write_bytes(b"not a parquet file")

            second = job.execute_in_process(instance=instance, partition_key="date=2024-01-02", **selection)

            assert second.success
            assert DIFF not in _materialization(second, database).metadata
            messages = [entry.user_message for entry in instance.all_logs(second.run_id)]
            assert any(m.startswith("no diff of run") for m in messages), messages
            assert len(data_files(data_dir / "ev" / "date=2024-01-02")) == 1
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS `{history}` CASCADE")


def _materialization(result: dg.ExecuteInProcessResult, database: str) -> dg.AssetMaterialization:
    (materialization,) = result.asset_materializations_for_node(f"hive__{database}__ev")
    return materialization


def test_corrupted_verification_fails_the_blocking_check_and_leaves_data(
    spark, location, database, data_dir, monkeypatch
):
    table = f"{database}.flat"
    before = rows_of(spark, table)
    before_files = data_files(data_dir / "flat")
    monkeypatch.setenv("LAKEKEEPER_FAULT", "drop-staged-file")
    with dg.instance_for_test() as instance:
        result = location.get_implicit_global_asset_job_def().execute_in_process(
            instance=instance, asset_selection=[asset_key(database, "flat")], raise_on_error=False
        )
    assert not result.success
    checks = _checks(result)
    assert not checks[ROW_COUNT].passed and not checks[CHECKSUM].passed
    assert checks[ROW_COUNT].metadata["rows_before"].value == 200
    assert checks[ROW_COUNT].metadata["rows_after"].value < 200
    assert data_files(data_dir / "flat") == before_files
    assert rows_of(spark, table) == before


@pytest.mark.cluster(only=True)
def test_dagster_cli_validates_and_launches_a_partition(spark, spark_cluster, metastore, database, data_dir, tmp_path):
    """`dagster definitions validate` and `dagster job launch` (the CLI way to compact a partition: its code server
    pins the newest stored state, as refresh_tables_job stores it) in a subprocess, on the YAML config, whose
    `spark_submit` points the run's resource at the test cluster: on a cluster only (the YARN tier of `make test`),
    where it proves what the local mode's launched runs (the daemon's, the UI's: test_run_queue, test_browser) do not,
    a run worker's own session on the cluster."""
    import json
    import os
    import subprocess
    import sys
    import time

    import yaml

    make_table(spark, database, "cli", data_dir, partitions=DATES, files=3)
    before = rows_of(spark, f"{database}.cli")
    config = tmp_path / "lakekeeper.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "tables": {"databases": [database]},
                "metastore": {"uri": metastore.uri},
                "spark_submit": cli_spark_submit(),
            }
        )
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    # Runs start at once (no daemon here): DefaultRunCoordinator, then DefaultRunLauncher.
    (home / "dagster.yaml").write_text(
        "run_coordinator:\n  module: dagster._core.run_coordinator\n  class: DefaultRunCoordinator\n"
    )
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_dynamic_partitions(partitions_def_name(database, "cli"), ["date=2024-01-02"])
        settings = load_config(str(config))
        store_state(instance, settings, load_managed_tables(spark, settings))
    env = {**os.environ, "LAKEKEEPER_CONFIG": str(config), "DAGSTER_HOME": str(home), "PYTHONPATH": str(REPO)}
    env.pop("LAKEKEEPER_METASTORE_URI", None)

    def dagster(*args: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "dagster", *args, "-m", "lakekeeper_dagster.definitions"]
        return subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)

    validate = dagster("definitions", "validate")
    assert validate.returncode == 0, validate.stderr[-3000:]
    tags = json.dumps({"dagster/partition": "date=2024-01-02"})
    apps_before = set(spark_cluster.applications())
    launched = dagster("job", "launch", "-j", job_name(database, "cli"), "--tags", tags)
    assert launched.returncode == 0, launched.stderr[-3000:]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        deadline = time.monotonic() + 240
        while not (runs := [r for r in instance.get_runs() if r.status in FINISHED]) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert [r.status for r in runs] == [dg.DagsterRunStatus.SUCCESS]
        checks = [e.dagster_event.event_specific_data for e in instance.all_logs(runs[0].run_id) if e.is_dagster_event]
        checks = {c.check_name: c.passed for c in checks if isinstance(c, dg.AssetCheckEvaluation)}
        assert checks[ROW_COUNT] is True
    assert len(data_files(data_dir / "date=2024-01-02")) == 1
    assert len(data_files(data_dir / "date=2024-01-01")) == 3
    assert rows_of(spark, f"{database}.cli") == before
    # the run's own session (the resource's, from spark_submit) ran on the cluster
    assert new_cluster_apps(spark_cluster, apps_before) == [("lakekeeper-dagster", "FINISHED")]


def test_project_instance_settings_give_each_table_one_run_at_a_time(location, database, tmp_path):
    from lakekeeper_dagster.surface.instance import install_instance_settings
    from lakekeeper_dagster.surface.state import register_pool_limits

    install_instance_settings(tmp_path)
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        pools = instance.get_concurrency_config().pool_config
        assert (pools.default_pool_limit, pools.pool_granularity.value) == (1, "run")
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        # Storing the state registers each table's pool, so the first queue tick already enforces it.
        table_pools = {a.op.pool for a in location.assets if isinstance(a, dg.AssetsDefinition) and a.op.pool}
        added = register_pool_limits(instance, table_pools)
        assert added == [f"lakekeeper/{database}.ev", f"lakekeeper/{database}.flat"]
        assert {p.name: p.limit for p in instance.event_log_storage.get_pool_limits()} == {
            f"lakekeeper/{database}.ev": 1,
            f"lakekeeper/{database}.flat": 1,
        }
        assert register_pool_limits(instance, table_pools) == []
    assert location.get_assets_def(asset_key(database, "ev")).op.pool == f"lakekeeper/{database}.ev"


def test_demo_main_job_runs_through_dagster(spark, metastore, database, data_dir, tmp_path, capsys):
    """What `make demo` runs after creating the tables, on small tables: observe, sensor, its runs, observe again."""
    from lakekeeper_dagster.demo.run import run_demo

    make_table(spark, database, "ev", data_dir / "ev", partitions=DATES, files=3)
    make_table(spark, database, "flat", data_dir / "flat", files=4)
    before = rows_of(spark, f"{database}.ev")
    config = parse_config({"metastore": {"uri": metastore.uri}}, "t")
    assert run_demo(config, database, tmp_path / "home") is True
    captured = capsys.readouterr()
    out = captured.out
    assert f"hive/{database}/ev: 2 unit(s), 6 data files, 2 need compaction" in out
    assert "file_count_sensor: 2 run(s) requested" in out
    assert f"hive/{database}/ev: materialized (2 compacted, 0 skipped, 0 failed): files 6 -> 2, rows 400" in out
    assert f"hive/{database}/flat: materialized (1 compacted, 0 skipped, 0 failed): files 4 -> 1, rows 200" in out
    assert out.count("check row_count_preserved: passed") == 2 and "FAILED" not in out
    assert out.count(f"hive/{database}/ev: materialized") == 1 and "STEP_START" not in captured.err
    assert f"hive/{database}/ev: 2 unit(s), files 6 -> 2, 0 need compaction" in out
    assert f"hive/{database}/flat: 1 unit(s), files 4 -> 1, 0 need compaction" in out
    assert "file_count_sensor again: 0 run(s) requested" in out
    assert "make ui" in out
    assert rows_of(spark, f"{database}.ev") == before
    assert all(len(data_files(data_dir / "ev" / f"date={d['date']}")) == 1 for d in DATES)


def test_partitions_follow_the_metastore_and_a_range_runs_in_one_session(spark, location, database, data_dir):
    from pyspark import SparkContext

    name = partitions_def_name(database, "ev")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(name, ["date=1999-01-01"])  # gone from Hive: removed by the sync
        location.get_job_def("sync_partitions_job").execute_in_process(instance=instance)
        assert instance.get_dynamic_partitions(name) == ["date=2024-01-01", "date=2024-01-02"]
        context_before = SparkContext._active_spark_context
        result = location.get_implicit_global_asset_job_def().execute_in_process(
            instance=instance,
            asset_selection=[asset_key(database, "ev")],
            tags={RANGE_START_TAG: "date=2024-01-01", RANGE_END_TAG: "date=2024-01-02"},  # the sensor's range tags
        )
        assert result.success
        assert SparkContext._active_spark_context is context_before  # one Spark session for both partitions
        materialized = {e.partition for e in result.get_asset_materialization_events()}
        assert materialized == {"date=2024-01-01", "date=2024-01-02"}
        run = instance.get_run_by_id(result.run_id)
        order = instance.get_dynamic_partitions(name)
        assert units_of_run(run, read_table(spark, database, "ev"), order, TRANSLATOR) == materialized
    assert all(len(data_files(data_dir / "ev" / f"date={d['date']}")) == 1 for d in DATES)


def test_partition_aware_checks_do_not_name_partitions_of_a_range_run():
    """Why the checks carry their partitions in metadata: Dagster 1.13's partition-aware check specs (preview) name
    the partition of a one-partition run, but a single-run backfill over a range records one evaluation with no
    partition at all, and that is how many partitions are compacted in one Spark session."""
    import warnings

    partitions = dg.DynamicPartitionsDefinition(name="p")
    key = dg.AssetKey(["a"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = dg.AssetCheckSpec("c", asset=key, partitions_def=partitions)

    @dg.asset(key=key, partitions_def=partitions, backfill_policy=dg.BackfillPolicy.single_run(), check_specs=[spec])
    def probe():
        return dg.MaterializeResult(check_results=[dg.AssetCheckResult(check_name="c", passed=True)])

    job = dg.Definitions(assets=[probe]).get_implicit_global_asset_job_def()
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("p", ["x", "y"])
        one = job.execute_in_process(instance=instance, partition_key="x")
        assert [e.partition for e in one.get_asset_check_evaluations()] == ["x"]
        many = job.execute_in_process(
            instance=instance,
            tags={"dagster/asset_partition_range_start": "x", "dagster/asset_partition_range_end": "y"},
        )
        assert [e.partition for e in many.get_asset_check_evaluations()] == [None]


def test_the_sensors_run_statuses_are_dagsters():
    """metadata.py lists Dagster's finished and unfinished run statuses itself (Dagster does not export them)."""
    from dagster._core.storage.dagster_run import FINISHED_STATUSES, NOT_FINISHED_STATUSES

    assert (set(FINISHED), set(NOT_FINISHED)) == (set(FINISHED_STATUSES), set(NOT_FINISHED_STATUSES))
