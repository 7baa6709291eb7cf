"""How the code location loads (issues 16, 18): from the managed tables' stored state, refreshed by a `dagster dev`
load with the metastore up, down, or never read; what it says when it manages nothing; the demo's config and the
instance settings; a quiet start. The run workers' load and the refresh job: test_state.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import dagster as dg
import pytest
import yaml

from lakekeeper_dagster.config import load_config, parse_config
from lakekeeper_dagster.definitions import defs
from lakekeeper_dagster.demo.config import ensure_demo_config
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.instance import install_instance_settings
from lakekeeper_dagster.surface.metadata import NOTICE_KEY
from lakekeeper_dagster.surface.state import state_from_json, state_key
from lakekeeper_dagster_tests.tables import DATES, REPO, data_files, make_table, rows_of
from spark_resources.metastore import free_port

OPERATOR_JOBS = {"rollback_job", "cleanup_job", "recover_job", "analyze_job", "sync_partitions_job"}


@pytest.fixture
def instance():
    """A test instance, entered: the code location's state is stored in its defs state storage."""
    with dg.instance_for_test() as entered:
        yield entered


@pytest.fixture
def configure(tmp_path, monkeypatch, instance):
    """Write the location's config file (LAKEKEEPER_CONFIG) into tmp_path; loads are `dagster dev`'s (they refresh
    the state from the metastore, DAGSTER_IS_DEV_CLI), in `instance`."""
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setenv("DAGSTER_IS_DEV_CLI", "1")

    def write(data: dict) -> Path:
        path = tmp_path / "lakekeeper.yaml"
        path.write_text(yaml.safe_dump({**data, "metastore": {"home": str(tmp_path / "home"), **data["metastore"]}}))
        monkeypatch.setenv("LAKEKEEPER_CONFIG", str(path))
        return path

    return write


def closed_uri() -> str:
    return f"thrift://127.0.0.1:{free_port()}"


def notices(definitions: dg.Definitions) -> dict[str, str]:
    repo = definitions.get_repository_def()
    return {job.name: job.metadata[NOTICE_KEY].value for job in repo.get_all_jobs() if NOTICE_KEY in job.metadata}


def asset_names(definitions: dg.Definitions) -> list[str]:
    return sorted(k.to_user_string() for k in definitions.resolve_asset_graph().get_all_asset_keys())


def test_the_metastore_down_gives_the_last_known_state_with_every_job(
    spark, metastore, database, data_dir, configure, instance, tmp_path, monkeypatch, caplog
):
    make_table(spark, database, "ev", data_dir / "ev", partitions=DATES, files=2)
    configure({"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        up = defs()
        up.get_repository_def()
        assert up.resolve_asset_graph().asset_check_keys  # read by a code server's snapshot
    assert [str(w.message) for w in caught] == []  # no beta, preview or supersession warning on a load
    assert asset_names(up) == [f"hive/{database}/ev"]
    assert notices(up) == {}
    key = state_key(load_config())
    stored = tmp_path / "stored"  # the version the load stored: what its run workers rebuild from
    instance.defs_state_storage.download_state_to_path(key, instance.defs_state_storage.get_latest_version(key), stored)
    assert [info.name for info in state_from_json(stored.read_text())[0].tables] == ["ev"]

    # a reload, and the metastore is down
    down_uri = closed_uri()
    monkeypatch.setenv("LAKEKEEPER_METASTORE_URI", down_uri)
    with caplog.at_level("WARNING"):
        down = defs()
    assert asset_names(down) == [f"hive/{database}/ev"]
    said = notices(down)
    assert OPERATOR_JOBS | {"observe_partitions_job"} <= set(said)
    notice = said["rollback_job"]
    assert f"the Hive Metastore at {down_uri} is unreachable" in notice
    assert "last known state, read at " in notice and f"from {metastore.uri}" in notice
    assert "the jobs stay available but fail until it answers" in notice
    assert notice in caplog.text  # the load's log line
    with dg.instance_for_test() as instance:
        run = down.get_job_def("rollback_job").execute_in_process(
            instance=instance,
            run_config={"ops": {"rollback": {"config": {"table": f"{database}.ev"}}}},
            raise_on_error=False,
        )
    assert not run.success
    failure = run.failure_data_for_node("rollback")
    assert (
        f"the Hive Metastore at {down_uri} is not reachable, and this run needs it"
        in failure.user_failure_data.description
    )


def test_the_metastore_down_and_no_state_yet_loads_the_jobs_and_says_why(configure, monkeypatch):
    uri = closed_uri()
    monkeypatch.delenv("LAKEKEEPER_METASTORE_URI", raising=False)
    configure({"tables": {"databases": ["sales"]}, "metastore": {"uri": uri}})
    definitions = defs()
    assert asset_names(definitions) == []
    said = notices(definitions)
    assert set(said) >= OPERATOR_JOBS
    assert said["cleanup_job"].startswith(
        f"the Hive Metastore at {uri} is unreachable and no state was saved yet: 0 tables managed"
    )


def test_no_managed_table_says_what_to_set(spark, metastore, configure, tmp_path, monkeypatch, caplog):
    path = configure({"metastore": {"uri": metastore.uri}})
    with caplog.at_level("WARNING"):
        said = notices(defs())
    expected = f"0 tables managed: set tables.databases (or tables.tables) in {path}"
    assert said["observe_partitions_job"].startswith(expected) and expected in caplog.text
    monkeypatch.delenv("LAKEKEEPER_CONFIG")
    monkeypatch.chdir(tmp_path)
    path.unlink()
    assert f"in a config file ({tmp_path / 'lakekeeper.yaml'} does not exist)" in notices(defs())["rollback_job"]


def test_a_missing_managed_database_is_said_and_the_jobs_stay(spark, metastore, configure):
    configure({"tables": {"databases": ["no_such_db"]}, "metastore": {"uri": metastore.uri}})
    said = notices(defs())
    assert set(said) >= OPERATOR_JOBS
    assert said["recover_job"].startswith(
        f"the managed tables could not be read from the Hive Metastore at {metastore.uri}: database 'no_such_db' "
        "does not exist in the metastore and no state was saved yet: 0 tables managed"
    )


def test_a_run_says_when_it_starts_the_spark_session(spark, metastore, configure):
    """The longest silent wait of a run is its JVM starting on the first Spark call: the run's log says so first."""
    configure({"metastore": {"uri": metastore.uri}})
    config = load_config()
    definitions = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
    with dg.instance_for_test() as instance:
        result = definitions.get_job_def("analyze_job").execute_in_process(instance=instance)
        messages = [entry.user_message for entry in instance.all_logs(result.run_id)]
    assert result.success
    expected = f"starting the Spark session (a JVM, master local[*], metastore {metastore.uri}): the first Spark call"
    started = [i for i, m in enumerate(messages) if m.startswith(expected)]
    assert len(started) == 1 and started[0] > messages.index('Started execution of step "analyze_tables".')


def test_demo_create_leaves_a_config_that_manages_the_demo_database(tmp_path):
    database = "lakekeeper_demo"
    names = [f"{database}.ev"]
    path = tmp_path / "lakekeeper.yaml"
    message = ensure_demo_config(parse_config({}, "defaults"), str(path), database, names)
    assert message.startswith(f"wrote {path}")
    assert load_config(str(path)).tables.databases == [database]
    assert ensure_demo_config(load_config(str(path)), str(path), database, names) == f"{path} manages the demo tables"

    other = tmp_path / "other.yaml"
    other.write_text("tables:\n  databases: [sales]\n")
    message = ensure_demo_config(load_config(str(other)), str(other), database, names)
    assert message.startswith(f"note: {other} does not manage {database}.ev, so the Dagster UI will not show them")
    assert message.endswith(f"tables:\n  databases: [sales, {database}]")
    assert other.read_text() == "tables:\n  databases: [sales]\n"  # never overwritten


def test_the_instance_settings_are_installed_into_dagster_home(tmp_path):
    assert not (REPO / "dagster.yaml").exists()  # Dagster ignores (and warns about) one in the current folder
    home = tmp_path / "dagster_home"
    assert install_instance_settings(home).startswith(f"wrote {home / 'dagster.yaml'}")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        pools = instance.get_concurrency_config().pool_config
        assert (pools.default_pool_limit, pools.pool_granularity.value) == (1, "run")
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    assert "it is kept as it is" in install_instance_settings(home)
    assert (home / "dagster.yaml").read_text() == "telemetry:\n  enabled: false\n"


def _graphql(port: int, query: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


LOCATION_QUERY = """{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus
  locationOrLoadError { __typename ... on RepositoryLocation { repositories {
    jobs { name metadataEntries { label ... on TextMetadataEntry { text } } } } } } } } } }"""


@pytest.mark.slow
@pytest.mark.xdist_group("repository")  # runs commands in the repository folder
def test_make_ui_starts_quietly_and_shows_the_jobs_and_why_nothing_is_managed(tmp_path):
    """`make ui`'s own command (the Makefile's warning filter, the instance settings installed into DAGSTER_HOME,
    the repo's workspace.yaml), with the metastore down and no state: the location loads, every job is there with
    the notice on its page, and the start prints no beta/preview/supersession or ignored-dagster.yaml warning."""
    recipe = (REPO / "Makefile").read_text().split("\nui:", 1)[1]
    warning_filter = re.search(r"-W '([^']+)'", recipe).group(1)
    home = tmp_path / "dagster_home"
    install = [sys.executable, "-m", "lakekeeper_dagster.surface.instance", str(home)]
    subprocess.run(install, cwd=REPO, check=True, capture_output=True)
    config = tmp_path / "lakekeeper.yaml"
    uri = closed_uri()
    config.write_text(yaml.safe_dump({"tables": {"databases": ["sales"]}, "metastore": {"uri": uri}}))
    env = {**os.environ, "LAKEKEEPER_CONFIG": str(config), "DAGSTER_HOME": str(home), "PYTHONPATH": str(REPO)}
    env.pop("LAKEKEEPER_METASTORE_URI", None)
    port = free_port()
    command = [sys.executable, "-W", warning_filter, "-m", "dagster", "dev", "-w", "workspace.yaml", "-p", str(port)]
    stderr = tmp_path / "dev.err"
    with stderr.open("w") as err:
        server = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=err, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        entries = None
        for _ in range(240):
            try:
                entries = _graphql(port, LOCATION_QUERY)["data"]["workspaceOrError"]["locationEntries"]
                if entries and entries[0]["loadStatus"] == "LOADED":
                    break
            except OSError:
                pass
            assert server.poll() is None, stderr.read_text()[-3000:]
            time.sleep(1)
        location = entries[0]["locationOrLoadError"]
        assert location["__typename"] == "RepositoryLocation", location
        jobs = {job["name"]: job["metadataEntries"] for job in location["repositories"][0]["jobs"]}
        assert OPERATOR_JOBS | {"observe_partitions_job"} <= set(jobs)
        shown = {e["label"]: e["text"] for e in jobs["rollback_job"]}
        assert shown[NOTICE_KEY].startswith(f"the Hive Metastore at {uri} is unreachable and no state was saved yet")
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=60)
    log = stderr.read_text()
    assert f"the Hive Metastore at {uri} is unreachable" in log  # the load's log line
    for noise in ("superseded", "BetaWarning", "PreviewWarning", "dagster.yaml"):
        assert noise not in log, log[-3000:]


def test_a_run_on_definitions_older_than_the_table_refuses_and_changes_nothing(
    spark, metastore, database, data_dir, configure
):
    """Definitions come from a saved state: a table re-created partitioned since must not be compacted whole by an
    asset built for the unpartitioned table (the run would cover every partition, not the one the user chose)."""
    make_table(spark, database, "t", data_dir / "t", files=3)
    configure({"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}})
    config = load_config()
    stale = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
    spark.sql(f"DROP TABLE `{database}`.`t`")
    make_table(spark, database, "t", data_dir / "t2", partitions=DATES, files=3)
    before = rows_of(spark, f"{database}.t")
    files = {d.name: len(data_files(d)) for d in sorted((data_dir / "t2").iterdir()) if d.is_dir()}
    with dg.instance_for_test() as instance:
        run = stale.get_job_def(f"Compact__{database}__t").execute_in_process(instance=instance, raise_on_error=False)
    assert not run.success
    message = run.failure_data_for_node(f"hive__{database}__t").user_failure_data.description
    assert f"table {database}.t changed since the code location loaded" in message
    assert "run refresh_tables_job (or `dg utils refresh-defs-state`" in message
    assert rows_of(spark, f"{database}.t") == before
    assert {d.name: len(data_files(d)) for d in sorted((data_dir / "t2").iterdir()) if d.is_dir()} == files
