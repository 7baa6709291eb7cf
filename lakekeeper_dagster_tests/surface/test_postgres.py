"""The Dagster surface on a production instance: the project's instance settings installed with DAGSTER_POSTGRES_URL
set (dagster-postgres storage, run monitoring), on a real PostgreSQL server (Debian `postgresql`, started by the test
session in a temp directory), real Spark, a real metastore and real files.

Without a PostgreSQL server the tests are skipped; `LAKEKEEPER_REQUIRE_POSTGRES=1` (CI) makes that a failure."""

from __future__ import annotations

import itertools
import os
import signal
from pathlib import Path

import dagster as dg
import pytest
import yaml

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine.errors import ConfigError
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.instance import POSTGRES_URL_ENV, install_instance_settings
from lakekeeper_dagster.surface.metadata import TABLE_TAG
from lakekeeper_dagster.surface.observations import OBSERVE_JOB
from lakekeeper_dagster.surface.sensors.file_count import SENSOR_NAME, execute_request
from lakekeeper_dagster_tests.postgres import PostgresServer
from lakekeeper_dagster_tests.surface.identity import asset_key, job_name, partitions_def_name
from lakekeeper_dagster_tests.surface.test_run_queue import (
    all_finished,
    queue_probe_runs,
    start_daemon,
    stop,
    tail,
    trace,
    watch,
)
from lakekeeper_dagster_tests.tables import DATES, data_files, make_table, rows_of

REQUIRE = "LAKEKEEPER_REQUIRE_POSTGRES"  # =1 (CI): no PostgreSQL server fails instead of skipping
NAMES = [f"date={d['date']}" for d in DATES]
_databases = itertools.count()


@pytest.fixture(scope="session")
def postgres() -> PostgresServer:
    """One PostgreSQL server for the test session (a database per test)."""
    try:
        server = PostgresServer()
    except RuntimeError as error:  # no server installed
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{REQUIRE}=1 but {error}", pytrace=False)
        pytest.skip(str(error))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def pg_home(postgres, tmp_path, monkeypatch) -> Path:
    """A DAGSTER_HOME with the project's instance settings installed as `make ui` installs them with
    DAGSTER_POSTGRES_URL set, on a new database."""
    monkeypatch.setenv(POSTGRES_URL_ENV, postgres.create_database(f"dagster_{next(_databases)}"))
    home = tmp_path / "dagster_home"
    assert "storage PostgreSQL" in install_instance_settings(home)
    return home


def test_instance_settings_with_a_postgres_url_give_a_postgres_instance_with_run_monitoring(
    pg_home, tmp_path, monkeypatch
):
    settings = (pg_home / "dagster.yaml").read_text()
    assert os.environ[POSTGRES_URL_ENV] not in settings  # the URL (a password) stays in the environment
    with dg.DagsterInstance.from_config(str(pg_home)) as instance:
        storages = {type(s).__name__ for s in (instance.run_storage, instance.event_log_storage)}
        assert storages == {"PostgresRunStorage", "PostgresEventLogStorage"}
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        pools = instance.get_concurrency_config().pool_config
        assert (pools.default_pool_limit, pools.pool_granularity.value) == (1, "run")
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_max_resume_run_attempts == 0  # what the default run launcher requires
        assert instance.run_monitoring_max_runtime_seconds == 86400
    assert "the project's instance settings, storage PostgreSQL" in install_instance_settings(pg_home)

    # The other storage's settings are never overwritten, and never silently opened instead.
    monkeypatch.delenv(POSTGRES_URL_ENV)
    with pytest.raises(ConfigError, match=f"{pg_home / 'dagster.yaml'} stores the Dagster instance in PostgreSQL"):
        install_instance_settings(pg_home)
    sqlite_home = tmp_path / "sqlite_home"
    assert "storage SQLite" in install_instance_settings(sqlite_home)
    monkeypatch.setenv(POSTGRES_URL_ENV, "postgresql+psycopg2://nobody@127.0.0.1:1/none")
    with pytest.raises(ConfigError, match=f"{POSTGRES_URL_ENV} is set: unset it to open that instance"):
        install_instance_settings(sqlite_home)
    assert (pg_home / "dagster.yaml").read_text() == settings
    assert "storage" not in yaml.safe_load((sqlite_home / "dagster.yaml").read_text())

    # A URL with no driver would fail at the first connection with "No module named 'psycopg'" (SQLAlchemy 2.1).
    monkeypatch.setenv(POSTGRES_URL_ENV, "postgresql://nobody@127.0.0.1:1/none")
    new_home = tmp_path / "new_home"
    with pytest.raises(ConfigError, match=r"starts with postgresql, not postgresql\+psycopg2://"):
        install_instance_settings(new_home)
    assert not new_home.exists()


def test_observe_sensor_compact_and_observe_again_on_postgres(spark, metastore, database, data_dir, pg_home):
    """The auto-compaction flow with every record (observations, cursor-paged reads, runs, checks) in PostgreSQL."""
    make_table(spark, database, "ev", data_dir / "ev", partitions=DATES, files=4)
    table = f"{database}.ev"
    before = rows_of(spark, table)
    config = parse_config(
        {"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}, "sensor": {"min_files": 3}}, "t"
    )
    defs = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
    sensor = defs.get_sensor_def(SENSOR_NAME)

    def tick(instance, cursor):
        return sensor(dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs))

    def file_counts(instance) -> list[int]:
        """The newest observed file count of each partition, as stored in PostgreSQL."""
        return [
            instance.fetch_observations(
                dg.AssetRecordsFilter(asset_key=asset_key(database, "ev"), asset_partitions=[name]), limit=1
            )
            .records[0]
            .asset_observation.metadata["file_count"]
            .value
            for name in NAMES
        ]

    with dg.DagsterInstance.from_config(str(pg_home)) as instance:
        assert defs.get_job_def(OBSERVE_JOB).execute_in_process(instance=instance).success
        assert instance.get_dynamic_partitions(partitions_def_name(database, "ev")) == NAMES
        assert file_counts(instance) == [4, 4]

        first = tick(instance, None)
        (request,) = first.run_requests  # both partitions in one run
        assert request.tags[TABLE_TAG] == table
        assert request.run_config["ops"][f"hive__{database}__ev"]["config"]["partitions"] == NAMES
        run = execute_request(defs, instance, request)
        assert run.success
        assert instance.get_run_by_id(run.run_id).job_name == job_name(database, "ev")
        materialized = instance.fetch_materializations(asset_key(database, "ev"), limit=10).records
        assert {r.partition_key for r in materialized if r.run_id == run.run_id} == set(NAMES)
        checks = {e.check_name: e.passed for e in run.get_asset_check_evaluations()}
        assert checks["row_count_preserved"] and checks["content_checksum_matches"]

        assert [len(data_files(data_dir / "ev" / name)) for name in NAMES] == [1, 1]
        assert rows_of(spark, table) == before and len(before) == 400

        assert defs.get_job_def(OBSERVE_JOB).execute_in_process(instance=instance).success
        assert file_counts(instance) == [1, 1]
        assert tick(instance, first.cursor).run_requests == []  # compacted: nothing more to request


def _wait_for_start(instance, tmp_path, daemon, run_ids, count: int) -> list[str]:
    """Wait until the probe's asset has started in `count` runs; the last one's note (run id, worker pid, ...)."""
    watch(instance, tmp_path, daemon, run_ids, lambda _: [e[0] for e in trace(tmp_path)].count("start") >= count)
    return [e for e in trace(tmp_path) if e[0] == "start"][count - 1]


@pytest.mark.crash
@pytest.mark.slow
def test_dead_runs_fail_and_free_their_tables_pool(pg_home, tmp_path):
    """Three runs of one table, queued: one at a time on PostgreSQL (never two executing, each waiting QUEUED until
    the one before ended). The first one's worker is SIGKILLed while it is STARTED: its code server marks
    it failed and the second one starts. Then every Dagster process of the host is SIGKILLed (the daemon, its code
    server, the second run's worker), so nothing is left to notice: the restarted daemon's run monitoring fails the
    second run once it is over its `dagster/max_runtime`, and the third one starts and succeeds."""
    settings = pg_home / "dagster.yaml"
    settings.write_text(settings.read_text().replace("poll_interval_seconds: 30", "poll_interval_seconds: 1"))
    runs = [{"probe/seconds": "600"}, {"probe/seconds": "600", "dagster/max_runtime": "5"}, {"probe/seconds": "0"}]
    with dg.DagsterInstance.from_config(str(pg_home)) as instance:
        run_ids = queue_probe_runs(instance, tmp_path, runs)
        first, second, third = run_ids
        daemon = start_daemon(instance, tmp_path)
        try:
            _, run_id, _, worker, _ = _wait_for_start(instance, tmp_path, daemon, run_ids, 1)
            assert run_id == first and instance.get_run_by_id(first).status == dg.DagsterRunStatus.STARTED
            assert {instance.get_run_by_id(r).status for r in (second, third)} == {dg.DagsterRunStatus.QUEUED}
            os.kill(int(worker), signal.SIGKILL)

            _, run_id, _, worker, code_server = _wait_for_start(instance, tmp_path, daemon, run_ids, 2)
            assert run_id == second and instance.get_run_by_id(second).status == dg.DagsterRunStatus.STARTED
            assert instance.get_run_by_id(first).status == dg.DagsterRunStatus.FAILURE
            for pid in (code_server, worker):
                os.kill(int(pid), signal.SIGKILL)
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
            assert instance.get_run_by_id(second).status == dg.DagsterRunStatus.STARTED  # as the crash left it

            daemon = start_daemon(instance, tmp_path)
            history = watch(instance, tmp_path, daemon, run_ids, all_finished)
        finally:
            stop(daemon)
        assert history[-1] == ("FAILURE", "FAILURE", "SUCCESS"), f"{history}\n{tail(tmp_path / 'daemon.log')}"
        assert ("FAILURE", "STARTED", "QUEUED") in history, history  # the third waited while the second executed
        crash = f"[DagsterApiServer] Run execution process for {first} was terminated by signal 9 (SIGKILL)."
        assert any(e.message.startswith(crash) for e in instance.all_logs(first))
        over = "Canceling due to exceeding maximum runtime of 5 seconds."
        assert over in [e.message for e in instance.all_logs(second)]
        records = [instance.get_run_record_by_id(run_id) for run_id in run_ids]
        assert records[1].start_time >= records[0].end_time and records[2].start_time >= records[1].end_time
    assert [(e[0], e[1]) for e in trace(tmp_path)] == [("start", r) for r in run_ids] + [("end", third)]
