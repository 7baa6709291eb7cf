"""Dagster's own commands and a user's own Python load the code location from the instance's stored state (or say
why they see 0 tables), and never fail on it: `dagster asset list -m`, `dg list defs`, `dagster job launch -m`,
`dagster asset materialize -m`, an imported `defs`; each quietly (no location-name warning, no Spark banner)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import dagster as dg
import pytest
import yaml

from lakekeeper_dagster.config import load_config
from lakekeeper_dagster.surface.instance import install_instance_settings
from lakekeeper_dagster.surface.state import store_state
from lakekeeper_dagster.surface.tables import load_managed_tables
from lakekeeper_dagster_tests.tables import REPO, make_table
from spark_resources.metastore import free_port

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("repository")]  # commands run in the repository folder

BIN = Path(sys.executable).parent
CRASH = ("Traceback", "ComponentTreeException", "StateStorage")
NOISE = ("does not match the name", "get_sensor_def", "log4j", "Setting default log level", "sc.setLogLevel")
ASSETS = """
import json
from lakekeeper_dagster.definitions import defs
print(json.dumps(sorted(k.to_user_string() for k in defs().resolve_asset_graph().get_all_asset_keys())))
"""


def _run(command: list[str], env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


def _env(config: Path, home: Path | None) -> dict[str, str]:
    env = {**os.environ, "LAKEKEEPER_CONFIG": str(config), "PYTHONPATH": str(REPO)}
    for name in ("DAGSTER_HOME", "DAGSTER_IS_DEV_CLI", "LAKEKEEPER_METASTORE_URI"):
        env.pop(name, None)
    return {**env, "DAGSTER_HOME": str(home)} if home else env


@pytest.fixture
def stored(spark, metastore, database, data_dir, tmp_path):
    """(config file, DAGSTER_HOME) of a location managing `database`, whose instance stores a state read from the
    metastore with one table, `t`."""
    make_table(spark, database, "t", data_dir / "t", files=2)
    config = tmp_path / "lakekeeper.yaml"
    settings = {"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri, "home": str(tmp_path / "lk")}}
    config.write_text(yaml.safe_dump(settings))
    home = tmp_path / "dagster_home"
    install_instance_settings(home)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        loaded = load_config(str(config))
        store_state(instance, loaded, load_managed_tables(spark, loaded))
    return config, home


def test_dagster_commands_and_an_imported_defs_load_the_stored_tables(stored, database):
    env = _env(*stored)
    listed = _run([str(BIN / "dagster"), "asset", "list", "-m", "lakekeeper_dagster.definitions"], env)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert listed.stdout.split() == [f"hive/{database}/t"]

    imported = _run([sys.executable, "-c", ASSETS], env)
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert json.loads(imported.stdout.splitlines()[-1]) == [f"hive/{database}/t"]

    dg_list = _run([str(BIN / "dg"), "list", "defs"], {**env, "COLUMNS": "400"})  # its table's width
    assert dg_list.returncode == 0, dg_list.stderr[-3000:]
    assert f"hive/{database}/t" in dg_list.stdout and "refresh_tables_job" in dg_list.stdout

    launch = [str(BIN / "dagster"), "job", "launch", "-m", "lakekeeper_dagster.definitions", "-j", "refresh_tables_job"]
    launched = _run(launch, env)
    assert launched.returncode == 0, launched.stderr[-3000:]
    with dg.DagsterInstance.from_config(str(stored[1])) as instance:
        assert [run.job_name for run in instance.get_runs()] == ["refresh_tables_job"]  # queued for the daemon

    for done in (listed, imported, dg_list, launched):
        said = done.stdout + done.stderr
        assert not [word for word in CRASH + NOISE if word in said], said[-3000:]


def test_materialize_in_its_own_process_says_how_to_launch_instead(stored, database):
    """`dagster asset materialize -m` reconstructs the location with no version pinned: 0 tables, and it says that
    the instance stores one and how to launch through a code server, rather than that none is stored."""
    command = [str(BIN / "dagster"), "asset", "materialize", "-m", "lakekeeper_dagster.definitions"]
    done = _run([*command, "--select", f"hive/{database}/t"], _env(*stored))
    assert done.returncode != 0  # Dagster's own refusal: the selected asset is not in a 0-table location
    assert "though the instance has one" in done.stderr and "dagster job launch -m" in done.stderr
    assert "no state of the managed tables is stored" not in done.stderr
    assert "ComponentTreeException" not in done.stderr


def test_a_process_without_an_instance_loads_0_tables_and_says_why(tmp_path):
    config = tmp_path / "lakekeeper.yaml"
    config.write_text(yaml.safe_dump({"tables": {"databases": ["sales"]}, "metastore": {"uri": _closed()}}))
    done = _run([sys.executable, "-c", ASSETS], _env(config, None))
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == []
    assert "this process has no Dagster instance (DAGSTER_HOME is not set)" in done.stderr

    home = tmp_path / "dagster_home"
    install_instance_settings(home)
    listed = _run([str(BIN / "dagster"), "asset", "list", "-m", "lakekeeper_dagster.definitions"], _env(config, home))
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert listed.stdout == "" and "no state of the managed tables is stored in this instance yet" in listed.stderr


def test_a_driver_jvm_starts_without_spark_s_log4j_banner(tmp_path):
    script = textwrap.dedent(
        f"""
        from spark_resources.session import local_hive_conf, start_spark_session
        spark = start_spark_session(local_hive_conf({_closed()!r}, None))
        print(spark.range(3).count())
        spark.stop()
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("LAKEKEEPER_SPARK_LOG_LEVEL", None)
    done = _run([sys.executable, "-c", script], env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["3"]
    assert not [word for word in NOISE if word in done.stderr], done.stderr


def _closed() -> str:
    return f"thrift://127.0.0.1:{free_port()}"
