"""`spark_submit.deploy_mode: cluster` (`cli/submit.py`): the command line submits the command to YARN, whose
ApplicationMaster runs it in-process from a packed Python environment; the re-submission guard.

The YARN tests run with `--spark-cluster=yarn`; the others need no cluster: a stand-in spark-submit (a script that
records what it was given) shows what is submitted, and the submitted side runs until it meets a closed metastore.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from lakekeeper_dagster.cli.common import SUBMITTED_ENV, session_conf
from lakekeeper_dagster.cli.submit import ENTRY_SCRIPT, SUBMITTED_CONFIG
from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine import faults
from lakekeeper_dagster_tests.packed_env import BASE_PYTHON, build_packed_env
from lakekeeper_dagster_tests.tables import DATES, data_files, make_table, rows_of, run_cli
from spark_resources.local_yarn import NO_PROXY

KERBEROS = {"principal": "etl@EXAMPLE.COM", "keytab": "/edge-node-only/etl.keytab"}


def closed_metastore_uri() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"thrift://127.0.0.1:{probe.getsockname()[1]}"


def stand_in_submit(tmp_path: Path) -> tuple[Path, Path]:
    """A spark-submit that records its arguments, its PYTHONPATH and the config shipped to the driver, then fails
    before any application exists (exit 3)."""
    record = tmp_path / "submitted.json"
    script = tmp_path / "spark-submit"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "args = sys.argv[1:]\n"
        "files = args[args.index('--files') + 1].split(',')\n"
        f"(shipped,) = [f.split('#')[0] for f in files if f.endswith('#{SUBMITTED_CONFIG}')]\n"
        "record = {'argv': args, 'config': open(shipped).read(), 'pythonpath': os.environ.get('PYTHONPATH')}\n"
        f"open({str(record)!r}, 'w').write(json.dumps(record))\n"
        "sys.exit(3)\n"
    )
    script.chmod(0o755)
    return script, record


def cluster_block(submit_command: Path) -> dict:
    block = {"enabled": True, "master": "yarn", "deploy_mode": "cluster", "submit_command": str(submit_command)}
    return {"spark_submit": {**block, **KERBEROS}}


def test_cluster_deploy_mode_submits_the_command_with_its_config_to_the_entry_script(tmp_path):
    script, record = stand_in_submit(tmp_path)
    uri = closed_metastore_uri()
    args = ["--config-file", "lakekeeper.yaml", "--log-level=WARNING", "analyze", "--table", "db.t"]
    done = run_cli(args, tmp_path, uri, env_extra={"HADOOP_CONF_DIR": str(tmp_path)}, config=cluster_block(script))

    assert done.returncode == 1, done.stderr[-3000:]
    assert "spark-submit exited 3 (its output is above); no YARN application" in done.stderr
    submitted = json.loads(record.read_text())
    argv = submitted["argv"]
    flags = ["--master", "yarn", "--deploy-mode", "cluster", "--principal", KERBEROS["principal"], "--keytab"]
    assert argv[:8] == [*flags, KERBEROS["keytab"]]
    confs = {argv[i + 1] for i, flag in enumerate(argv) if flag == "--conf"}
    assert {f"spark.yarn.appMasterEnv.{SUBMITTED_ENV}=1", "spark.yarn.maxAppAttempts=1"} <= confs
    assert argv[argv.index(str(ENTRY_SCRIPT)) :] == [
        str(ENTRY_SCRIPT),
        "--config-file",
        SUBMITTED_CONFIG,
        "--log-level",
        "WARNING",
        "analyze",
        "--table",
        "db.t",
    ]
    shipped = yaml.safe_load(submitted["config"])  # the effective config: LAKEKEEPER_METASTORE_URI applied
    assert shipped["metastore"]["uri"] == uri
    assert shipped["spark_submit"]["deploy_mode"] == "cluster"
    assert submitted["pythonpath"] is None  # the edge node's paths are not put before the driver's own


def test_the_submitted_driver_runs_the_command_in_process_without_kinit(tmp_path):
    """With LAKEKEEPER_SUBMITTED=1 (the ApplicationMaster's environment) the same command never submits again and
    does not log in from the edge node's keytab path: it goes straight to opening its session, here refused by the
    closed metastore."""
    script, record = stand_in_submit(tmp_path)
    uri = closed_metastore_uri()
    env = {SUBMITTED_ENV: "1", "HADOOP_CONF_DIR": str(tmp_path)}
    done = run_cli(["analyze", "--table", "db.t"], tmp_path, uri, env_extra=env, config=cluster_block(script))

    assert done.returncode == 2, done.stderr[-3000:]
    assert f"the Hive Metastore at {uri} is not reachable" in done.stderr
    assert not record.exists()


def test_the_session_of_the_submitted_driver_leaves_the_keytab_to_spark_submit(monkeypatch):
    config = parse_config({"spark_submit": {"enabled": True, "deploy_mode": "cluster", **KERBEROS}}, "test")
    assert session_conf(config)["spark.kerberos.keytab"] == KERBEROS["keytab"]
    monkeypatch.setenv(SUBMITTED_ENV, "1")
    conf = session_conf(config)
    assert "spark.kerberos.keytab" not in conf and "spark.kerberos.principal" not in conf
    assert conf["spark.submit.deployMode"] == "cluster"


@pytest.mark.parametrize(
    "args, refusal",
    [
        (["demo", "create"], "demo create writes the demo's config file beside you"),
        (["cleanup", "--table", "db.t"], "list the backups with --dry-run, then pass --yes"),
    ],
)
def test_commands_that_cannot_run_in_a_yarn_container_are_refused(tmp_path, args, refusal):
    script, record = stand_in_submit(tmp_path)
    env = {"HADOOP_CONF_DIR": str(tmp_path)}
    done = run_cli(args, tmp_path, closed_metastore_uri(), env_extra=env, config=cluster_block(script))

    assert done.returncode == 2, done.stderr[-3000:]
    assert refusal in done.stderr and "Nothing was done" in done.stderr
    assert not record.exists()


@pytest.mark.parametrize(
    "settings, refusal",
    [
        ({"extra_conf": {"spark.yarn.maxAppAttempts": "2"}}, "extra_conf sets spark.yarn.maxAppAttempts to '2'"),
        ({"extra_conf": {"spark.yarn.submit.waitAppCompletion": "false"}}, "spark.yarn.submit.waitAppCompletion"),
        ({"master": "spark://127.0.0.1:7077"}, "the command line submits its driver to YARN only"),
    ],
)
def test_cluster_settings_that_would_undo_the_submissions_guarantees_are_refused(tmp_path, settings, refusal):
    script, record = stand_in_submit(tmp_path)
    config = cluster_block(script)
    config["spark_submit"].update(settings)
    done = run_cli(["analyze"], tmp_path, closed_metastore_uri(), {"HADOOP_CONF_DIR": str(tmp_path)}, config=config)

    assert done.returncode == 2, done.stderr[-3000:]
    assert refusal in done.stderr and "Nothing was done" in done.stderr
    assert not record.exists()


def test_extra_conf_cannot_turn_the_resubmission_guard_off(tmp_path):
    """spark-submit keeps a key's last value: the guard comes after extra_conf."""
    script, record = stand_in_submit(tmp_path)
    config = cluster_block(script)
    config["spark_submit"]["extra_conf"] = {f"spark.yarn.appMasterEnv.{SUBMITTED_ENV}": "0"}
    run_cli(["analyze"], tmp_path, closed_metastore_uri(), {"HADOOP_CONF_DIR": str(tmp_path)}, config=config)

    argv = json.loads(record.read_text())["argv"]
    guards = [argv[i + 1] for i, flag in enumerate(argv) if flag == "--conf" and SUBMITTED_ENV in argv[i + 1]]
    assert guards[-1] == f"spark.yarn.appMasterEnv.{SUBMITTED_ENV}=1"


def test_cluster_deploy_mode_without_the_cluster_configuration_is_refused(tmp_path):
    script, record = stand_in_submit(tmp_path)
    env = {"HADOOP_CONF_DIR": "", "YARN_CONF_DIR": ""}
    done = run_cli(["analyze"], tmp_path, closed_metastore_uri(), env_extra=env, config=cluster_block(script))

    assert done.returncode == 2, done.stderr[-3000:]
    assert "neither HADOOP_CONF_DIR nor YARN_CONF_DIR is set" in done.stderr
    assert not record.exists()


@pytest.fixture(scope="session")
def packed_env(tmp_path_factory) -> Path:
    """The test session's packed environment, built once."""
    return build_packed_env(tmp_path_factory.mktemp("packed_env"))


def cluster_mode_config(yarn, archive: Path, events: Path) -> dict:
    """The test YARN's `spark_submit` block in cluster deploy mode from `archive`, each application's event log
    (JSON lines) in `events`."""
    block = yarn.spark_submit()
    logged = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": events.as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",  # one file per attempt: <application id>_<attempt>
    }
    return {
        "spark_submit": {
            **block,
            "deploy_mode": "cluster",
            "archives": f"{archive}#env",
            "python_env": "./env/bin/python",
            "extra_conf": {**block["extra_conf"], **logged},
        }
    }


def the_new_application(yarn, known: set[str]) -> tuple[str, dict]:
    """The one application the ResourceManager knows beyond `known`, and its report."""
    new = [app_id for app_id in yarn.applications() if app_id not in known]
    assert len(new) == 1, new
    return new[0], yarn.application(new[0])


def events_of(events: Path, app_id: str) -> list[dict]:
    """The events of the application's (one) event log."""
    (log,) = events.glob(f"{app_id}_*")
    return [json.loads(line) for line in log.read_text().splitlines()]


def environment_of(events: list[dict]) -> dict[str, dict[str, str]]:
    """The driver's environment (Spark and system properties) from the application's events."""
    (event,) = [event for event in events if event["Event"] == "SparkListenerEnvironmentUpdate"]
    return {section: dict(values) for section, values in event.items() if section != "Event"}


def proxied_jobs(yarn, app_id: str) -> list[dict]:
    """The running application's jobs as Spark's REST API in its driver's UI says them, reached through its tracking
    URL (the ResourceManager's web proxy); [] while the application or its UI is not there yet."""
    report = yarn.application(app_id)
    web = yarn.hadoop.yarn_addresses()["yarn.resourcemanager.webapp.address"]
    if report["state"] != "RUNNING":
        return []
    assert report["trackingUrl"] == f"http://{web}/proxy/{app_id}/", report  # the RM's proxy, not the driver
    try:
        with NO_PROXY.open(f"{report['trackingUrl']}api/v1/applications/{app_id}/jobs", timeout=10) as answer:
            return json.loads(answer.read())
    except (OSError, ValueError):  # the UI not bound yet: the proxy answers with an error or its own page
        return []


def jobs_once_verified(yarn, known: set[str], process: subprocess.Popen, table: str) -> tuple[str, list[dict]]:
    """The new application's id and its jobs through the proxy, once its verify job (the last before the `written`
    pause) has succeeded."""
    deadline, jobs = time.monotonic() + 240, []
    while time.monotonic() < deadline and process.poll() is None:
        new = [app_id for app_id in yarn.applications() if app_id not in known]
        jobs = proxied_jobs(yarn, new[0]) if new else []
        verified = any(job["description"].startswith(f"lakekeeper compact {table}: verify ") for job in jobs)
        if verified and all(job["status"] == "SUCCEEDED" for job in jobs):
            return new[0], jobs
        time.sleep(0.5)
    raise AssertionError(f"no verified jobs through the proxy (CLI exit {process.poll()}); jobs: {jobs}")


@pytest.mark.cluster(only="yarn")
def test_compact_in_cluster_deploy_mode_runs_the_driver_in_the_application_master(
    spark, spark_cluster, metastore, database, data_dir, tmp_path, packed_env
):
    """... and its jobs, labelled, with their progress, are seen through the application's tracking URL while it
    runs (the driver's UI in the ApplicationMaster, behind the ResourceManager's proxy), and in its event log."""
    # The machine's Python cannot run the command line: only the packed environment's can.
    assert subprocess.run([str(BASE_PYTHON), "-c", "import rich"], capture_output=True).returncode != 0
    table = make_table(spark, database, "submitted", data_dir, partitions=DATES[:1], files=6)
    before = rows_of(spark, table)
    events = tmp_path / "events"
    events.mkdir()
    known = set(spark_cluster.applications())
    release = tmp_path / "release"
    config = cluster_mode_config(spark_cluster, packed_env, events)
    config["spark_submit"]["extra_conf"].update(
        {
            "spark.ui.enabled": "true",  # the local YARN's config turns it off for client mode (see yarn.py)
            f"spark.yarn.appMasterEnv.{faults.ENV}": f"pause@written:{release}",  # the driver's environment
        }
    )

    process = run_cli(["compact", "--table", table], tmp_path, metastore.uri, config=config, wait=False)
    with ThreadPoolExecutor(1) as drain:  # the command's pipes never fill while the test looks
        output = drain.submit(process.communicate, timeout=300)
        try:
            app_id, jobs = jobs_once_verified(spark_cluster, known, process, table)
        finally:
            release.touch()
        try:
            stdout, stderr = output.result()
        finally:
            if process.poll() is None:  # hung: not left running (nor its application, which ends with it)
                process.kill()

    label = re.compile(rf"lakekeeper compact {re.escape(table)}( partition [^:]+)?: .+")
    assert [job["description"] for job in jobs if not label.fullmatch(job["description"])] == [], jobs
    assert f"lakekeeper compact {table} partition date=2024-01-01: write 1 file(s)" in {j["description"] for j in jobs}
    # Their progress, as the UI's Succeeded/Total: every task done, but those of a stage an earlier job ran (skipped).
    done = [(job["numCompletedIndices"], job["numSkippedTasks"], job["numTasks"]) for job in jobs]
    assert all(completed > 0 and completed + skipped == total for completed, skipped, total in done), done
    assert process.returncode == 0, stderr[-3000:]
    assert the_new_application(spark_cluster, known)[0] == app_id  # the driver did not submit again
    report = spark_cluster.application(app_id)
    assert (report["state"], report["finalStatus"]) == ("FINISHED", "SUCCEEDED")
    assert f"YARN application {app_id} succeeded; the driver's output: yarn logs -applicationId {app_id}" in stdout
    assert rows_of(spark, table) == before
    assert len(data_files(data_dir / "date=2024-01-01")) == 1
    logged = events_of(events, app_id)
    # What a history server shows once the application is over: every job started with its label (the run's
    # history record appended last, in a job labelled for the history table).
    started = [event for event in logged if event["Event"] == "SparkListenerJobStart"]
    descriptions = [event["Properties"].get("spark.job.description", "") for event in started]
    history = re.compile(r"lakekeeper history append 1 record\(s\) to [\w.]+")
    assert all(label.fullmatch(text) for text in descriptions[:-1]), descriptions
    assert history.fullmatch(descriptions[-1]) and {job["description"] for job in jobs} <= {*descriptions}
    environment = environment_of(logged)
    spark_properties, system = environment["Spark Properties"], environment["System Properties"]
    assert spark_properties["spark.submit.deployMode"] == "cluster"
    assert spark_properties["spark.pyspark.python"] == "./env/bin/python"
    assert spark_properties[f"spark.yarn.appMasterEnv.{SUBMITTED_ENV}"] == "1"
    # The driver's JVM ran in the application's first container: its ApplicationMaster.
    assert Path(system["user.dir"]).name == f"container_{app_id.removeprefix('application_')}_01_000001"


@pytest.mark.cluster(only="yarn")
def test_a_driver_failing_in_the_application_master_fails_the_command_and_names_the_application(
    spark, spark_cluster, metastore, database, tmp_path, packed_env
):
    events = tmp_path / "events"
    events.mkdir()
    known = set(spark_cluster.applications())

    done = run_cli(
        ["compact", "--table", f"{database}.does_not_exist"],
        tmp_path,
        metastore.uri,
        config=cluster_mode_config(spark_cluster, packed_env, events),
    )

    assert done.returncode == 1, done.stderr[-3000:]
    app_id, report = the_new_application(spark_cluster, known)  # one attempt: YARN did not run it again
    assert (report["state"], report["finalStatus"]) == ("FINISHED", "FAILED")
    assert f"error: YARN application {app_id} did not succeed" in done.stderr
    assert f"yarn logs -applicationId {app_id}" in done.stderr
    (driver,) = spark_cluster.hadoop.home.rglob(
        f"{app_id}/container_*_01_000001/stdout"
    )  # the AM: python driver's stdout and stderr
    assert f"error: table {database}.does_not_exist does not exist in the metastore" in driver.read_text()
    # One attempt: its driver's event log is the only one (YARN would run the command again in a second attempt).
    assert [log.name for log in events.glob(f"{app_id}_*")] == [f"{app_id}_1"]
    assert "does_not_exist" not in [row.tableName for row in spark.sql(f"SHOW TABLES IN {database}").collect()]
