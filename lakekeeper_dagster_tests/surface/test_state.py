"""The code location's state: run workers build their definitions from the stored state, with no JVM and
no metastore call; refresh_tables_job brings new and dropped tables (and their pools) into the code location."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql, infer_job_selector

from lakekeeper_dagster.config import load_config
from lakekeeper_dagster.definitions import defs
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.instance import install_instance_settings
from lakekeeper_dagster.surface.metadata import NOTICE_KEY
from lakekeeper_dagster.surface.observations import OBSERVE_JOB
from lakekeeper_dagster.surface.state import state_from_json, state_key, store_state
from lakekeeper_dagster.surface.tables import load_managed_tables
from lakekeeper_dagster_tests.surface.identity import asset_key
from lakekeeper_dagster_tests.tables import REPO, make_table
from spark_resources.errors import ResourceError
from spark_resources.metastore import free_port

BIN = Path(sys.executable).parent
# Runs start at once (no daemon in this test): DefaultRunCoordinator, then DefaultRunLauncher.
DIRECT = "run_coordinator:\n  module: dagster._core.run_coordinator\n  class: DefaultRunCoordinator\n"
FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}

# Loaded by every Python process of the launch (CLI, code server, run worker) through PYTHONPATH: records at exit
# whether the process started a JVM (pyspark's gateway), and whether it is a run worker (the code server starts each
# run in a multiprocessing child).
SITECUSTOMIZE = """
import atexit, json, multiprocessing, os, sys


def _record():
    jvm = False
    if "pyspark" in sys.modules:
        from pyspark import SparkContext
        jvm = SparkContext._gateway is not None
    with open(os.environ["LAKEKEEPER_TEST_PROBE"], "a") as out:
        worker = multiprocessing.parent_process() is not None
        out.write(json.dumps({"argv": sys.argv, "jvm": jvm, "worker": worker}) + "\\n")


atexit.register(_record)
"""


@pytest.fixture
def location(tmp_path, monkeypatch, metastore, database):
    """(config file, DAGSTER_HOME) of a location managing `database`; no dev CLI refresh at load."""
    monkeypatch.delenv("DAGSTER_IS_DEV_CLI", raising=False)
    monkeypatch.delenv("LAKEKEEPER_METASTORE_URI", raising=False)
    config = tmp_path / "lakekeeper.yaml"
    config.write_text(
        yaml.safe_dump(
            {"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri, "home": str(tmp_path / "lk")}}
        )
    )
    monkeypatch.setenv("LAKEKEEPER_CONFIG", str(config))
    home = tmp_path / "dagster_home"
    install_instance_settings(home)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return config, home


def refresh(spark, instance: dg.DagsterInstance, webserver: str = "") -> list[str]:
    """Run refresh_tables_job as a user launches it; its log lines."""
    config = load_config()
    job = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
    result = job.get_job_def("refresh_tables_job").execute_in_process(
        instance=instance, run_config={"ops": {"refresh_tables": {"config": {"webserver": webserver}}}}
    )
    assert result.success
    return [entry.user_message for entry in instance.all_logs(result.run_id)]


def asset_names(instance: dg.DagsterInstance) -> list[str]:
    """The assets a (non-dev) load of the code location shows, from the stored state of `instance` (entered)."""
    loaded = defs()
    return sorted(k.to_user_string() for k in loaded.resolve_asset_graph().get_all_asset_keys())


def notices() -> set[str]:
    """The location's notices, on the pages of the jobs that are not a table's compaction job."""
    jobs = defs().get_repository_def().get_all_jobs()
    return {job.metadata[NOTICE_KEY].value for job in jobs if NOTICE_KEY in job.metadata}


def test_a_state_from_another_metastore_or_not_downloadable_is_said_on_every_job(
    spark, metastore, database, data_dir, location, monkeypatch
):
    make_table(spark, database, "t", data_dir / "t", files=2)
    home = location[1]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        version = store_state(instance, load_config(), load_managed_tables(spark, load_config()))
        elsewhere = f"thrift://127.0.0.1:{free_port()}"
        monkeypatch.setenv("LAKEKEEPER_METASTORE_URI", elsewhere)
        assert notices() == {
            f"the managed tables were read from the Hive Metastore at {metastore.uri}, but this location uses "
            f"{elsewhere}: they may not be its tables; run refresh_tables_job (or `dg utils refresh-defs-state` in "
            "the project folder)"
        }
        assert asset_names(instance) == [f"hive/{database}/t"]
        monkeypatch.delenv("LAKEKEEPER_METASTORE_URI")
        assert NOTICE_KEY not in defs().get_job_def("refresh_tables_job").metadata

        # The version was stored by another host, in its own local defs_state folder: the load still succeeds.
        [blob] = [path for path in home.rglob(version) if path.is_file()]
        blob.unlink()
        [notice] = notices()
        assert notice.startswith("the stored state of the managed tables cannot be read from this instance's defs ")
        assert "set defs_state_storage in dagster.yaml to a base_path every host reads" in notice
        assert asset_names(instance) == []


def test_build_definitions_reads_the_tables_through_the_resource_it_is_given(database, location):
    """A Kerberized resource passed in (its principal, here without its keytab) is the one the read goes through."""
    config = load_config()
    resource = spark_resource_for(config, principal="lakekeeper@EXAMPLE.COM", stop_at_teardown=False)
    with pytest.raises(ResourceError, match="a Kerberos principal is set .* but no keytab"):
        build_definitions(config, resource=resource)


def test_new_and_dropped_tables_appear_after_the_refresh_job(spark, database, data_dir, location):
    make_table(spark, database, "a", data_dir / "a", files=2)
    home = location[1]
    with dg.DagsterInstance.from_config(str(home)) as instance:
        notices = {job.metadata[NOTICE_KEY].value for job in defs().get_repository_def().get_all_jobs()}
        assert notices == {
            "no state of the managed tables is stored in this instance yet: 0 tables managed; run "
            "refresh_tables_job (or `dg utils refresh-defs-state` in the project folder)"
        }
        closed = f"http://127.0.0.1:{free_port()}"
        said = refresh(spark, instance, webserver=closed)
        assert any(m.startswith("1 table(s) (0 skipped) stored as version ") for m in said), said
        assert any(
            m.startswith(f"the webserver at {closed} did not reload the code location")
            and m.endswith("the code location shows it from its next load (Deployment -> Reload, or a restart)")
            for m in said
        ), said
        assert asset_names(instance) == [f"hive/{database}/a"]
        pools = {p.name: p.limit for p in instance.event_log_storage.get_pool_limits()}
        assert pools == {f"lakekeeper/{database}.a": 1}  # registered with the state, before any run is queued

        make_table(spark, database, "b", data_dir / "b", files=2)
        assert asset_names(instance) == [f"hive/{database}/a"]  # the stored state: no metastore read at load
        refresh(spark, instance)
        assert asset_names(instance) == [f"hive/{database}/a", f"hive/{database}/b"]
        assert f"lakekeeper/{database}.b" in {p.name for p in instance.event_log_storage.get_pool_limits()}

        spark.sql(f"DROP TABLE `{database}`.`a`")
        refresh(spark, instance)
        assert asset_names(instance) == [f"hive/{database}/b"]
        stored = instance.defs_state_storage.get_latest_version(state_key(load_config()))
        path = home / "stored"
        instance.defs_state_storage.download_state_to_path(state_key(load_config()), stored, path)
        assert [t.name for t in state_from_json(path.read_text())[0].tables] == ["b"]


def _launch(env: dict, cwd: Path, job: str, run_config: dict) -> subprocess.CompletedProcess:
    command = [str(BIN / "dagster"), "job", "launch", "-m", "lakekeeper_dagster.definitions", "-j", job]
    command += ["--config-json", json.dumps(run_config)]
    return subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def _finished_run(instance: dg.DagsterInstance, known: set[str]) -> dg.DagsterRun:
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        runs = [r for r in instance.get_runs() if r.run_id not in known and r.status in FINISHED]
        if runs:
            return runs[0]
        time.sleep(0.5)
    raise AssertionError(f"no run finished: {[(r.run_id, r.status) for r in instance.get_runs()]}")


def _failure(instance: dg.DagsterInstance, run: dg.DagsterRun) -> str:
    failures = [e.dagster_event for e in instance.all_logs(run.run_id) if e.is_dagster_event]
    failures = [e for e in failures if e.event_type == dg.DagsterEventType.STEP_FAILURE]
    return failures[0].step_failure_data.user_failure_data.description


def _workers(probe: Path, count: int) -> list[dict]:
    """The run workers' records, once `count` have exited."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        records = [json.loads(line) for line in probe.read_text().splitlines()] if probe.exists() else []
        workers = [r for r in records if r["worker"]]
        if len(workers) >= count:
            return workers
        time.sleep(0.5)
    raise AssertionError(f"{count} run worker(s) expected in {probe}")


@pytest.mark.slow
def test_a_run_worker_builds_from_the_stored_state_without_jvm_or_metastore(
    spark, metastore, database, data_dir, location, tmp_path
):
    """Real runs launched through the instance's DefaultRunLauncher (`dagster job launch`: a code server, which
    starts a worker process for the run): the worker rebuilds the job from the state version the run was
    planned with. With the metastore up its load starts no JVM; with the metastore stopped the table's job is
    still there and fails on its own metastore check, not at load."""
    make_table(spark, database, "t", data_dir / "t", files=2)
    config, home = location
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    probe = tmp_path / "probe.jsonl"
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{REPO}", "LAKEKEEPER_TEST_PROBE": str(probe)}
    (home / "dagster.yaml").write_text(DIRECT)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        refresh(spark, instance)
        known = {r.run_id for r in instance.get_runs()}

        launched = _launch(env, tmp_path, "rollback_job", {"ops": {"rollback": {"config": {"table": ""}}}})
        assert launched.returncode == 0, launched.stderr[-3000:]
        run = _finished_run(instance, known)
        assert run.status == dg.DagsterRunStatus.FAILURE
        assert "config.table is empty" in _failure(instance, run)  # the op ran: its config check, before Spark
        assert [w["jvm"] for w in _workers(probe, 1)] == [False]

        down = f"thrift://127.0.0.1:{free_port()}"
        launched = _launch({**env, "LAKEKEEPER_METASTORE_URI": down}, tmp_path, f"Compact__{database}__t", {})
        assert launched.returncode == 0, launched.stderr[-3000:]
        run = _finished_run(instance, known | {run.run_id})
        assert run.status == dg.DagsterRunStatus.FAILURE
        assert f"the Hive Metastore at {down} is not reachable, and this run needs it" in _failure(instance, run)
        assert [w["jvm"] for w in _workers(probe, 2)] == [False, False]
    records = [json.loads(line) for line in probe.read_text().splitlines()]
    assert not [r["argv"] for r in records if r["jvm"]]  # nor the CLI's or the code server's load


@pytest.mark.slow
@pytest.mark.xdist_group("repository")  # runs commands in the repository folder
def test_dg_refresh_defs_state_stores_the_tables_a_load_then_shows(spark, database, data_dir, location):
    """`dg utils refresh-defs-state` in the project folder (its own JVM reads the metastore), as the README says."""
    make_table(spark, database, "t", data_dir / "t", files=2)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [str(BIN / "dg"), "utils", "refresh-defs-state"], env=env, cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    with dg.DagsterInstance.from_config(str(location[1])) as instance:
        assert asset_names(instance) == [f"hive/{database}/t"]
        assert f"lakekeeper/{database}.t" in {p.name for p in instance.event_log_storage.get_pool_limits()}


LAUNCH = """mutation Launch($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on PythonError { message } } }"""


@pytest.mark.slow
def test_a_run_planned_before_any_state_was_stored_never_runs_on_a_newer_one(
    spark, database, data_dir, location, tmp_path, monkeypatch
):
    """A code server that loaded when nothing was stored pins "no version" (0 tables); a refresh then stores a
    version with the table. A run that code server plans, launched as the UI launches it, runs in its own worker on
    the version it was planned with: it observes no table, not the newer state's."""
    make_table(spark, database, "t", data_dir / "t", files=2)
    config, home = location
    (home / "dagster.yaml").write_text(DIRECT)
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    workspace = tmp_path / "workspace.yaml"
    module = "{module_name: lakekeeper_dagster.definitions, location_name: lakekeeper_dagster}"
    workspace.write_text(f"load_from:\n  - python_module: {module}\n")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        with define_out_of_process_context(str(workspace), None, instance) as context:
            refresh(spark, instance)  # the code server keeps its load, planned on no stored version
            known = {r.run_id for r in instance.get_runs()}
            params = {"selector": infer_job_selector(context, OBSERVE_JOB), "runConfigData": {}}
            launched = execute_dagster_graphql(context, LAUNCH, {"params": params}).data["launchRun"]
            assert launched["__typename"] == "LaunchRunSuccess", launched
            run = _finished_run(instance, known)
        assert run.status == dg.DagsterRunStatus.SUCCESS
        observed = instance.fetch_observations(dg.AssetRecordsFilter(asset_key=asset_key(database, "t")), 10)
        assert observed.records == []
        assert asset_names(instance) == [f"hive/{database}/t"]  # the next load builds from the stored version
