"""`lakekeeper-dagster cluster start|status|stop`: a real Spark standalone cluster run from pyspark's jars."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time

import pytest
import yaml

from lakekeeper_dagster_tests.cli.test_cli import run_cli
from spark_resources.cluster import MASTER_CLASS, WORKER_CLASS, SparkCluster


def _alive(pid: int, marker: str) -> bool:
    try:
        return marker.encode() in open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return False


@pytest.mark.slow
def test_cluster_start_status_stop(tmp_path):
    (tmp_path / "lakekeeper.yaml").write_text(f"metastore:\n  home: {tmp_path / 'lk'}\n")
    state_file = tmp_path / "lk" / "cluster" / "cluster.json"
    try:
        started = run_cli(["cluster", "start"], tmp_path)
        assert started.returncode == 0, started.stderr[-3000:]
        url = re.search(r"cluster running: (spark://127\.0\.0\.1:\d+)", started.stdout)[1]
        # the block it prints is a valid config that points the runs at the cluster
        block = yaml.safe_load(started.stdout.split("put this block in the config file:\n", 1)[1])
        assert block["spark_submit"]["master"] == url and block["spark_submit"]["deploy_mode"] == "client"
        state = json.loads(state_file.read_text())
        assert _alive(state["master"], MASTER_CLASS) and len(state["workers"]) == 2
        assert all(_alive(pid, WORKER_CLASS) for pid in state["workers"])

        status = run_cli(["cluster", "status"], tmp_path)
        assert status.returncode == 0 and f"running at {url} (2 of 2 workers alive" in status.stdout, status.stdout
        # The Master's web UI is on loopback: asked directly, never through a proxy of the environment.
        proxy = {"http_proxy": "http://127.0.0.1:9", "no_proxy": "", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": ""}
        proxied = run_cli(["cluster", "status"], tmp_path, proxy)
        assert f"running at {url} (2 of 2 workers alive" in proxied.stdout, proxied.stdout
        again = run_cli(["cluster", "start"], tmp_path)  # a no-op on the running cluster
        assert f"cluster running: {url}" in again.stdout and json.loads(state_file.read_text()) == state

        stopped = run_cli(["cluster", "stop"], tmp_path)
        assert stopped.returncode == 0 and "cluster stopped" in stopped.stdout
        assert not any(
            _alive(pid, cls)
            for pid, cls in [(state["master"], MASTER_CLASS)] + [(pid, WORKER_CLASS) for pid in state["workers"]]
        )
        after = run_cli(["cluster", "status"], tmp_path)
        assert after.returncode == 3 and "stopped" in after.stdout
        assert "was not running" in run_cli(["cluster", "stop"], tmp_path).stdout
    finally:
        run_cli(["cluster", "stop"], tmp_path)


def _state_becomes(pid: int, state: str, deadline_s: float = 60) -> bool:
    """Whether the process reaches `state` (/proc/<pid>/stat) within the deadline. Stop sees a Master gone once its
    command line is (the kernel drops it early in the exit), so a loaded machine can still show it exiting (R)
    for a moment before it is a zombie (Z)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with open(f"/proc/{pid}/stat") as stat:
            if stat.read().rsplit(")", 1)[1].split()[0] == state:
                return True
        time.sleep(0.05)
    return False


def test_stop_does_not_wait_for_a_zombie_to_be_reaped(tmp_path):
    """A Master started by an earlier `cluster start` is not a child of `cluster stop`: once it exits on SIGTERM it
    can linger as a zombie (its parent has not reaped it yet), which `kill -0` still finds. Stop sees it gone."""
    child = "import os, time; print(os.getpid(), flush=True); time.sleep(300)"  # prints once it runs
    script = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}, {MASTER_CLASS!r}]); "
    script += "time.sleep(300)"  # never reaps its child
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        master = int(parent.stdout.readline())
        (tmp_path / "cluster.json").write_text(json.dumps({"master": master, "workers": [], "port": 1}))
        cluster = SparkCluster(home=tmp_path)
        stopped: list[bool] = []
        stopping = threading.Thread(target=lambda: stopped.append(cluster.stop(timeout=3600)), daemon=True)
        stopping.start()
        stopping.join(120)  # a deadline only: stop returns once the zombie's command line is gone
        assert stopped == [True], "stop still waits for the exited Master to be reaped"
        assert _state_becomes(master, "Z")  # it exited and was never reaped: stop did not wait for that
        assert not (tmp_path / "cluster.json").exists()
    finally:
        parent.kill()
        parent.wait()
