"""Two runs of one table's asset never execute together: the second waits QUEUED until the first ends.

dagster 1.13.27 enforces a pool's `default_limit` only from the dequeue tick *after* the first one that sees the
pool: `QueuedRunCoordinatorDaemon._get_runs_to_dequeue` reads the configured pools
(`event_log_storage.get_concurrency_keys()`) before `GlobalOpConcurrencyLimitsCounter._initialize_pool_limits`
creates the new pool's limit row, so the counter has no limit for that pool and `is_blocked` lets every queued run
of it through in that tick. Registering each table's pool before its runs can be queued closes that window.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest
from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql, infer_job_selector

from lakekeeper_dagster.surface.instance import install_instance_settings
from lakekeeper_dagster.surface.state import register_pool_limits
from lakekeeper_dagster.surface.translator import HiveTableTranslator

BIN = Path(sys.executable).parent
POOL = HiveTableTranslator().pool(SimpleNamespace(database="db", name="t"))
RUNNING = {dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED}
FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}

PROBE = """
import os
import time
from pathlib import Path

import dagster as dg

TRACE = Path({trace!r})


def note(event, run_id):
    with TRACE.open("a") as f:
        f.write(f"{{event}} {{run_id}} {{time.time()}} {{os.getpid()}} {{os.getppid()}}\\n")


@dg.asset(pool={pool!r})
def t(context) -> None:
    note("start", context.run_id)
    time.sleep(float(context.run.tags.get("probe/seconds", "3")))
    note("end", context.run_id)


defs = dg.Definitions(
    assets=[t], jobs=[dg.define_asset_job("compact_t", selection=[t])], executor=dg.in_process_executor
)
"""
TRACE = "trace.txt"
WORKSPACE = "workspace.yaml"


def probe_definitions() -> dg.Definitions:
    """In-process twin of the probe's asset: what the code location registers the pool from."""

    @dg.asset(pool=POOL)
    def t() -> None:
        pass

    return dg.Definitions(assets=[t])


def _instance_home(tmp_path: Path) -> Path:
    home = tmp_path / "dagster_home"
    install_instance_settings(home)
    return home


def tail(path: Path, lines: int = 40) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def stop(process: subprocess.Popen) -> None:
    """Interrupt the daemon (it stops its code server); kill its process group if it does not exit."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def trace(tmp_path: Path) -> list[list[str]]:
    """The probe's notes: event, run id, time, worker pid, its parent's (the code server's) pid."""
    path = tmp_path / TRACE
    return [line.split() for line in path.read_text().splitlines()] if path.exists() else []


LAUNCH = """mutation Launch($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on PythonError { message } } }"""


def queue_probe_runs(instance: dg.DagsterInstance, tmp_path: Path, runs: list[dict[str, str]]) -> list[str]:
    """Write the probe and its workspace, register its pool, and queue one run of its job per entry of `runs` (its
    tags; `probe/seconds`: how long its asset sleeps, 3 by default), through GraphQL as the UI launches, all QUEUED
    before any daemon ticks; returns their ids, in that (the queue's) order."""
    (tmp_path / "probe.py").write_text(PROBE.format(trace=str(tmp_path / TRACE), pool=POOL))
    (tmp_path / WORKSPACE).write_text("load_from:\n  - python_file: {relative_path: probe.py, location_name: probe}\n")
    assert register_pool_limits(instance, [POOL]) == [POOL]  # what loading the code location does
    assert [(p.name, p.limit) for p in instance.event_log_storage.get_pool_limits()] == [(POOL, 1)]
    with define_out_of_process_context(str(tmp_path / WORKSPACE), None, instance) as context:
        for tags in runs:  # one after the other: the queue's order is theirs
            params = {
                "selector": infer_job_selector(context, "compact_t"),
                "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]},
            }
            launched = execute_dagster_graphql(context, LAUNCH, {"params": params}).data["launchRun"]
            assert launched["__typename"] == "LaunchRunSuccess", launched
    queued = instance.get_runs(ascending=True)
    assert [r.status for r in queued] == [dg.DagsterRunStatus.QUEUED] * len(runs)
    assert all(r.run_op_concurrency and r.run_op_concurrency.all_pools == {POOL} for r in queued)
    return [r.run_id for r in queued]


def start_daemon(instance: dg.DagsterInstance, tmp_path: Path) -> subprocess.Popen:
    """`dagster-daemon run` on the probe's workspace (it starts the probe's code server, which starts the run
    workers)."""
    env = {**os.environ, "DAGSTER_HOME": instance.root_directory}
    with (tmp_path / "daemon.log").open("w") as log:
        return subprocess.Popen(
            [str(BIN / "dagster-daemon"), "run", "-w", WORKSPACE],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def watch(
    instance: dg.DagsterInstance, tmp_path: Path, daemon: subprocess.Popen, run_ids: list[str], until
) -> list[tuple[str, ...]]:
    """Poll the runs' statuses until `until(statuses)`, asserting that never two run at once; returns the history
    of their status combinations."""
    history: list[tuple[str, ...]] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        statuses = tuple(instance.get_run_by_id(run_id).status.value for run_id in run_ids)
        if not history or history[-1] != statuses:
            history.append(statuses)
        running = [s for s in statuses if dg.DagsterRunStatus(s) in RUNNING]
        assert len(running) <= 1, f"two runs executing at once: {history}\n{tail(tmp_path / 'daemon.log')}"
        if until(statuses):
            return history
        assert daemon.poll() is None, f"daemon exited: {history}\n{tail(tmp_path / 'daemon.log')}"
        time.sleep(0.2)
    pytest.fail(f"runs did not get there: {history}\n{tail(tmp_path / 'daemon.log')}")


def all_finished(statuses: tuple[str, ...]) -> bool:
    return all(dg.DagsterRunStatus(s) in FINISHED for s in statuses)


@pytest.mark.slow
def test_second_run_of_a_table_waits_queued_until_the_first_ends(tmp_path):
    """Two runs of the probe's table queued together run one after the other (on SQLite; test_postgres's dead-runs
    test queues three on PostgreSQL)."""
    with dg.DagsterInstance.from_config(str(_instance_home(tmp_path))) as instance:
        run_ids = queue_probe_runs(instance, tmp_path, [{}, {}])  # the case where an unregistered pool lets both start
        daemon = start_daemon(instance, tmp_path)
        try:
            history = watch(instance, tmp_path, daemon, run_ids, all_finished)
        finally:
            stop(daemon)

        assert history[-1] == ("SUCCESS", "SUCCESS"), f"{history}\n{tail(tmp_path / 'daemon.log')}"
        assert ("STARTED", "QUEUED") in history, history
        records = sorted(instance.get_run_records(), key=lambda r: r.start_time)
        first, second = records
        assert second.start_time >= first.end_time
        events = trace(tmp_path)
        assert [(event[0], event[1]) for event in events] == [
            ("start", first.dagster_run.run_id),
            ("end", first.dagster_run.run_id),
            ("start", second.dagster_run.run_id),
            ("end", second.dagster_run.run_id),
        ]
        assert float(events[2][2]) >= float(events[1][2])


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="dagster 1.13.27: the first dequeue tick that sees a new pool does not enforce its default_limit",
)
def test_an_unregistered_pool_holds_back_the_second_run_in_the_first_tick(tmp_path):
    """The root cause, in-process: when this starts passing (a dagster fix), `register_pool_limits` can go."""
    from dagster._core.remote_origin import RegisteredCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

    job = dg.Definitions(
        assets=probe_definitions().assets, jobs=[dg.define_asset_job("compact_t", selection=["t"])]
    ).resolve_job_def("compact_t")
    origin = RemoteJobOrigin(
        RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("probe"), "__repository__"), "compact_t"
    )
    with dg.DagsterInstance.from_config(str(_instance_home(tmp_path))) as instance:
        for _ in range(2):
            instance.create_run_for_job(job_def=job, status=dg.DagsterRunStatus.QUEUED, remote_job_origin=origin)
        daemon = QueuedRunCoordinatorDaemon(interval_seconds=5)
        to_launch = daemon._get_runs_to_dequeue(instance, instance.get_concurrency_config(), fixed_iteration_time=None)
        assert len(to_launch) == 1


def test_registering_pools_keeps_limits_set_by_hand(tmp_path):
    with dg.DagsterInstance.from_config(str(_instance_home(tmp_path))) as instance:
        instance.event_log_storage.set_concurrency_slots(POOL, 3)  # `dagster instance concurrency set ... 3`
        assert register_pool_limits(instance, [POOL]) == []
        assert [(p.name, p.limit) for p in instance.event_log_storage.get_pool_limits()] == [(POOL, 3)]
