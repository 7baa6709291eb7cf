"""The Dagster processes of benchmark 8, started as a deployment runs them: a code server (`dagster api grpc`), a
webserver on it, runs launched through GraphQL (DefaultRunCoordinator + DefaultRunLauncher: the code server starts
each run worker at once), and what is read back: the run's event log, the run worker's peak RSS, the instance's
size."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import dagster as dg

from spark_resources.metastore import free_port

LOCATION = "lakekeeper_dagster"
READY_LINE = "Started Dagster code server"  # logged by `dagster api grpc` once the code location is loaded
# In the command line of a run worker the code server starts: a multiprocessing child (`_grpc/impl.py`), or
# `dagster api execute_run` when a launcher starts it as a command.
WORKER_MARKS = (b"spawn_main", b"execute_run")
STARTED_PROCESS = "Started process for run"  # the run worker's first event, before it loads the code location
UNPARTITIONED = "ASSET_OBSERVATION without partition"  # counted within ASSET_OBSERVATION too
RUN_ENDS = {t.value for t in (dg.DagsterEventType.RUN_SUCCESS, dg.DagsterEventType.RUN_FAILURE)} | {
    dg.DagsterEventType.RUN_CANCELED.value
}


class Service:
    """A process in its own session, its output in `log`; `stop()` ends its whole process group."""

    def __init__(self, command: list[str], env: dict, log: Path, cwd: Path) -> None:
        self.log = log
        self.started = time.monotonic()
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def wait_for(self, ready, what: str, timeout: float) -> float:
        """Seconds from the start until `ready()` holds; fails with the log's tail when the process exits first."""
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            if ready():
                return time.monotonic() - self.started
            if self.process.poll() is not None:
                raise RuntimeError(f"{what} exited with {self.process.returncode}:\n{self.tail()}")
            time.sleep(0.2)
        raise RuntimeError(f"{what} not ready within {timeout:.0f}s:\n{self.tail()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def start_code_server(env: dict, home: Path, cwd: Path, module: str, timeout: float) -> tuple[Service, int, float]:
    """`dagster api grpc` on the module; returns it, its port and the seconds until it served (load included)."""
    port = free_port()
    command = [
        sys.executable, "-m", "dagster", "api", "grpc", "--module-name", module, "--host", "127.0.0.1",
        "--port", str(port), "--location-name", LOCATION, "--use-python-environment-entry-point",
    ]  # fmt: skip
    server = Service(command, env, home / "code-server.log", cwd)
    seconds = server.wait_for(lambda: READY_LINE in server.log.read_text(errors="replace"), "the code server", timeout)
    return server, port, round(seconds, 2)


def start_webserver(env: dict, home: Path, cwd: Path, grpc_port: int, timeout: float) -> tuple[Service, int]:
    workspace = home / "workspace.yaml"
    workspace.write_text(
        f"load_from:\n  - grpc_server:\n      host: 127.0.0.1\n      port: {grpc_port}\n"
        f"      location_name: {LOCATION}\n"
    )
    port = free_port()
    command = [sys.executable, "-m", "dagster_webserver", "-w", str(workspace), "-h", "127.0.0.1", "-p", str(port)]
    server = Service(command, env, home / "webserver.log", cwd)
    server.wait_for(lambda: _answers(f"http://127.0.0.1:{port}/server_info"), "the webserver", timeout)
    return server, port


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


LOCATION_QUERY = """{ workspaceOrError { __typename ... on Workspace { locationEntries { name
  locationOrLoadError { __typename ... on RepositoryLocation { repositories { name jobs { name } } }
  ... on PythonError { message } } } } } }"""


def location_jobs(port: int) -> list[str]:
    """The jobs the webserver sees in the code location (fails with the load error when it did not load)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": LOCATION_QUERY}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        data = json.loads(response.read())["data"]["workspaceOrError"]
    for entry in data.get("locationEntries", []):
        loaded = entry["locationOrLoadError"] or {}
        if loaded.get("__typename") != "RepositoryLocation":
            raise RuntimeError(f"the code location did not load: {loaded.get('message', loaded)}")
        return [job["name"] for repository in loaded["repositories"] for job in repository["jobs"]]
    raise RuntimeError(f"no code location in the workspace: {data}")


# ---- the run worker's memory ------------------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        tree.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return tree


def _descendants(pid: int, tree: dict[int, list[int]]) -> list[int]:
    found, todo = [], list(tree.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo.extend(tree.get(child, []))
    return found


def _peak_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class WorkerMemory(threading.Thread):
    """Samples the peak RSS (VmHWM) of the run worker under the code server and of the worker's own children (its
    Spark JVM) every `interval` seconds, until `stop()`. Peaks reached in the last interval before exit are missed."""

    def __init__(self, code_server_pid: int, interval: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = code_server_pid, interval
        self.worker_mib = self.children_mib = 0.0
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.wait(self.interval):
            tree = _children()
            for pid in _descendants(self.root, tree):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if any(mark in cmdline for mark in WORKER_MARKS):
                    self.worker_mib = max(self.worker_mib, _peak_rss_mib(pid) or 0.0)
                    for child in _descendants(pid, tree):
                        self.children_mib = max(self.children_mib, _peak_rss_mib(child) or 0.0)

    def stop(self) -> dict:
        self._done.set()
        self.join()
        return {
            "worker_python_peak_rss_mib": round(self.worker_mib, 1) or None,
            "worker_jvm_peak_rss_mib": round(self.children_mib, 1) or None,
        }


# ---- a run and its events ---------------------------------------------------------------------------------


def launch_and_wait(
    instance: dg.DagsterInstance, webserver_port: int, code_server_pid: int, job: str, timeout: float
) -> dict:
    """Launch `job` through the webserver's GraphQL API and wait for its end; its timeline and events."""
    from dagster_graphql import DagsterGraphQLClient

    memory = WorkerMemory(code_server_pid)
    memory.start()
    submitted = time.time()
    run_id = DagsterGraphQLClient("127.0.0.1", port_number=webserver_port).submit_job_execution(job)
    deadline = time.monotonic() + timeout
    while True:
        run = instance.get_run_by_id(run_id)
        if run is not None and run.is_finished:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"run {run_id} of {job} not finished within {timeout:.0f}s")
        time.sleep(1)
    time.sleep(1)  # the run worker's last events ("Process for run exited") follow the run's end
    figures = {"run_id": run_id, "status": str(run.status.value), **memory.stop(), **run_events(instance, run_id)}
    marks = figures.pop("_marks")
    figures["launch_to_worker_process_s"] = _gap(submitted, marks.get("process"))
    figures["run_worker_load_s"] = _gap(marks.get("process"), marks.get("start"))
    figures["execution_s"] = _gap(marks.get("start"), marks.get("end"))
    figures["start_to_listed_s"] = _gap(marks.get("start"), marks.get("listed"))
    figures["submit_to_end_s"] = _gap(submitted, marks.get("end"))
    return figures


def _gap(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round(end - start, 2)


TABLE_LINE = re.compile(r"^\S+: \d+ unit\(s\), \d+ listed")  # the observation job's line once a table is recorded
# The observation job's closing line: its units, those listed, the tables read in full, and its phases' sums.
PHASES = re.compile(
    r"^(\d+) unit\(s\) of \d+ table\(s\), (\d+) listed, (\d+) table\(s\) read in full: ([\d.]+)s to read .*, "
    r"([\d.]+)s to sync .*, ([\d.]+)s to list "
)
PHASE_FIGURES = ("listed", "tables_read_in_full", "metastore_read_s", "partition_sync_s", "listing_s")


def run_events(instance: dg.DagsterInstance, run_id: str) -> dict:
    """The run's event-log records by type (a plain log line counts as LOG_MESSAGE), the timeline marks and the
    observation job's phase times (metastore read, partition sync, listing)."""
    counts: Counter = Counter()
    marks: dict[str, float] = {}
    figures: dict[str, float] = {}  # the observation job's phase times, from its line
    cursor = None
    while True:
        connection = instance.get_records_for_run(run_id, cursor=cursor, limit=10_000)
        for record in connection.records:
            entry = record.event_log_entry
            event = entry.dagster_event
            kind = event.event_type_value if event else "LOG_MESSAGE"
            counts[kind] += 1
            observation = getattr(event.event_specific_data, "asset_observation", None) if event else None
            if observation is not None and observation.partition is None:
                counts[UNPARTITIONED] += 1  # a table's summary (the estate's tables are all partitioned)
            if event and event.event_type_value == "ENGINE_EVENT" and entry.message.startswith(STARTED_PROCESS):
                marks.setdefault("process", entry.timestamp)
            elif kind == "LOG_MESSAGE" and TABLE_LINE.match(entry.user_message):
                marks.setdefault("listed", entry.timestamp)  # the first table recorded
            elif kind == "LOG_MESSAGE" and (phases := PHASES.match(entry.user_message)):
                units, *seconds = phases.groups()
                figures = {"units": int(units), **dict(zip(PHASE_FIGURES, map(float, seconds), strict=True))}
                figures["listed"], figures["tables_read_in_full"] = (
                    int(figures["listed"]),
                    int(figures["tables_read_in_full"]),
                )
            elif kind == dg.DagsterEventType.RUN_START.value:
                marks["start"] = entry.timestamp
            elif kind in RUN_ENDS:
                marks["end"] = entry.timestamp
        cursor = connection.cursor
        if not connection.has_more:
            break
    events = sum(n for kind, n in counts.items() if kind != UNPARTITIONED)
    return {"events": events, "events_by_type": dict(counts.most_common()), "_marks": marks, **figures}


def instance_bytes(home: Path, postgres_url: str | None) -> dict:
    """SQLite: the bytes of the instance's database files under DAGSTER_HOME; Postgres: pg_database_size."""
    everything = sum(p.stat().st_size for p in home.rglob("*") if p.is_file())
    if postgres_url is None:
        databases = [p for p in home.rglob("*") if p.is_file() and p.name.endswith((".db", ".db-wal", ".db-shm"))]
        return {"instance_bytes": sum(p.stat().st_size for p in databases), "dagster_home_bytes": everything}
    import psycopg2

    dsn = postgres_url.replace("postgresql+psycopg2://", "postgresql://", 1)  # libpq reads no SQLAlchemy driver
    with psycopg2.connect(dsn) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        (size,) = cursor.fetchone()
    connection.close()
    return {"instance_bytes": int(size), "dagster_home_bytes": everything}
