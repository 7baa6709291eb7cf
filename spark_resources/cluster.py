"""A Spark standalone cluster on this machine, run from pyspark's own jars: one Master and its Workers.

Started like the local metastore (pid, log and port files under a home directory, free loopback ports), for tests
and people who want executors in processes of their own, as on YARN: a session on `master_url` runs its driver in
the calling process (client mode) and its executors in JVMs the Workers launch.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from spark_resources.errors import ResourceError
from spark_resources.metastore import free_port, java_executable, port_is_open
from spark_resources.processes import stop_process

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
HOST = "127.0.0.1"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ClusterError(ResourceError):
    """The local Spark cluster could not be started, reached or stopped."""


def spark_home() -> Path:
    """The SPARK_HOME of the installed pyspark (its `bin/spark-class`, `jars/`)."""
    import pyspark

    return Path(pyspark.__file__).parent


def _alive(pid: int, marker: str) -> bool:
    """True when `pid` runs and its command line names `marker` (not a recycled pid)."""
    try:
        return marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _stop_pid(pid: int, marker: str, timeout: float) -> None:
    """Stop `pid` when it still runs a command naming `marker` (not a recycled pid); see `stop_process`."""
    if _alive(pid, marker):
        stop_process(pid, timeout)


@dataclass
class SparkCluster:
    """A standalone Master and `workers` Workers (`worker_cores` cores and `worker_memory` each) under `home`.

    `home` holds `cluster.json` (ports and pids), a log per process and the Workers' work directory (executor
    logs, `work/<app>/<executor>/stderr`). An application (`session_conf`) gets executors of `executor_memory`, one
    core each, and `app_cores` cores in all (None: every free core, so a second application waits for the first).
    """

    home: Path
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1g"
    executor_memory: str = "512m"
    app_cores: int | None = None

    def __post_init__(self) -> None:
        self.home = Path(self.home).absolute()
        self._started: list[subprocess.Popen] = []  # the processes `start` launched, watched while it waits

    @property
    def state_file(self) -> Path:
        return self.home / "cluster.json"

    @property
    def work_dir(self) -> Path:
        return self.home / "work"

    def _state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def _pids(self) -> list[tuple[int, str]]:
        """(pid, class) of every process of the recorded cluster that still runs, workers first."""
        state = self._state()
        recorded = [(pid, WORKER_CLASS) for pid in state.get("workers", [])] + [(state.get("master"), MASTER_CLASS)]
        return [(pid, cls) for pid, cls in recorded if pid and _alive(pid, cls)]

    @property
    def master_url(self) -> str:
        """spark://HOST:PORT of the running Master (a ClusterError when none runs)."""
        state = self._state()
        if not state.get("master") or not _alive(state["master"], MASTER_CLASS):
            raise ClusterError(f"no Spark cluster runs from {self.home}; start it (`lakekeeper-dagster cluster start`)")
        return f"spark://{HOST}:{state['port']}"

    def is_running(self) -> bool:
        state = self._state()
        return bool(state.get("master")) and _alive(state["master"], MASTER_CLASS)

    def master_json(self, timeout: float = 5.0) -> dict:
        """The Master's own view (its web UI's /json): url, workers with their state, applications."""
        url = f"http://{HOST}:{self._state().get('webui_port')}/json/"
        try:  # straight to loopback, never through an http_proxy of the environment
            with NO_PROXY.open(url, timeout=timeout) as answer:
                return json.loads(answer.read())
        except (OSError, ValueError) as error:
            raise ClusterError(f"the Spark Master's web UI at {url} does not answer: {error}") from None

    def applications(self) -> dict[str, tuple[str, str]]:
        """(name, state) of every application the Master knows, by id: running or waiting ones, then completed ones
        (FINISHED once their driver went; the Master learns that asynchronously)."""
        view = self.master_json()
        apps = view.get("activeapps", []) + view.get("completedapps", [])
        return {app["id"]: (app["name"], app["state"]) for app in apps}

    def alive_workers(self) -> int:
        return sum(1 for w in self.master_json().get("workers", []) if w.get("state") == "ALIVE")

    def status(self) -> str:
        """One line: the master URL and how many workers are alive, or `stopped`."""
        if not self.is_running():
            return f"stopped (home {self.home})"
        try:
            alive = f"{self.alive_workers()} of {len(self._state().get('workers', []))} workers alive"
        except ClusterError as error:
            alive = str(error)
        state = self._state()
        return f"running at {self.master_url} ({alive}, web UI http://{HOST}:{state['webui_port']}, home {self.home})"

    def session_conf(self) -> dict[str, str]:
        """The Spark conf a driver in this process needs to run on the cluster (client mode, on loopback)."""
        return {
            "spark.master": self.master_url,
            "spark.submit.deployMode": "client",
            "spark.executor.memory": self.executor_memory,
            "spark.executor.cores": "1",
            **self._extra_conf(),
        }

    def _extra_conf(self) -> dict[str, str]:
        """The conf without a key of its own in `spark_submit`: the driver on loopback, the application's cores."""
        conf = {"spark.driver.host": HOST, "spark.driver.bindAddress": HOST}
        if self.app_cores is not None:
            conf["spark.cores.max"] = str(self.app_cores)
        return conf

    def config_block(self) -> str:
        """The `spark_submit` block of a lakekeeper.yaml that runs on this cluster."""
        lines = ["spark_submit:", f"  master: {self.master_url}", "  deploy_mode: client"]
        lines += [f"  executor_memory: {self.executor_memory}", "  executor_cores: 1", "  extra_conf:"]
        lines += [f"    {key}: '{value}'" for key, value in self._extra_conf().items()]
        return "\n".join(lines) + "\n"

    def _launch(self, name: str, args: list[str]) -> subprocess.Popen:
        java = java_executable()
        env = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_CONF_DIR": str(self.home / "conf"),  # none of a user's spark-defaults.conf
            "SPARK_LOCAL_DIRS": str(self.home / "local"),
            "SPARK_WORKER_DIR": str(self.work_dir),
            "JAVA_HOME": str(Path(java).resolve().parents[1]),
        }
        with open(self.home / f"{name}.log", "ab") as log:
            process = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.home,
                env=env,
                start_new_session=True,
            )
        self._started.append(process)
        return process

    def start(self, timeout: float = 90.0) -> str:
        """Start the Master and Workers (a no-op when they run from this home); the master URL once every Worker
        is registered and alive."""
        if self.is_running():
            self._wait_ready(timeout)
            return self.master_url
        self.stop()  # workers of a master that died
        for directory in (self.home / "conf", self.home / "local", self.work_dir):
            directory.mkdir(parents=True, exist_ok=True)
        port, webui = free_port(), free_port()
        state: dict = {"port": port, "webui_port": webui, "workers": []}
        master = [MASTER_CLASS, "--host", HOST, "--port", str(port), "--webui-port", str(webui)]
        state["master"] = self._launch("master", master).pid
        self.state_file.write_text(json.dumps(state))
        try:
            self._wait_for(lambda: port_is_open(HOST, port), timeout, "the Master to listen", "master")
            for index in range(1, self.workers + 1):
                worker = [WORKER_CLASS, "--host", HOST, "--webui-port", str(free_port())]
                worker += ["--cores", str(self.worker_cores), "--memory", self.worker_memory]
                worker += ["--work-dir", str(self.work_dir), f"spark://{HOST}:{port}"]
                state["workers"].append(self._launch(f"worker-{index}", worker).pid)
                self.state_file.write_text(json.dumps(state))
            self._wait_ready(timeout)
        except ClusterError:
            self.stop()
            raise
        return self.master_url

    def _wait_ready(self, timeout: float) -> None:
        def ready() -> bool:
            try:
                return self.alive_workers() >= self.workers
            except ClusterError:
                return False

        self._wait_for(ready, timeout, f"{self.workers} workers to register", "worker-1")

    def _wait_for(self, condition, timeout: float, what: str, log_name: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            if self._exited():
                break
            time.sleep(0.3)
        raise ClusterError(
            f"the local Spark cluster did not come up (waited for {what}, {timeout:.0f}s at most). "
            f"Last lines of {self.home / (log_name + '.log')}:\n{self.log_tail(log_name)}"
        )

    def _exited(self) -> bool:
        """A process `start` launched has exited (watched through its Popen: its cmdline is unreadable for a moment
        while spark-class execs java), or else the Master."""
        if self._started:
            return any(process.poll() is not None for process in self._started)
        return not self.is_running()

    def log_tail(self, name: str, lines: int = 15) -> str:
        try:
            return "\n".join((self.home / f"{name}.log").read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def executor_pids(self, app_id: str | None = None) -> list[int]:
        """Pids of the executor JVMs the Workers launched (their working directory is `work/<app>/<executor>`), of
        application `app_id` only when given."""
        within = self.work_dir / app_id if app_id else self.work_dir
        pids = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                inside = Path(os.readlink(proc / "cwd")).is_relative_to(within)
                if inside and EXECUTOR_CLASS.encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                continue
        return pids

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the Workers (and their executors), then the Master; True when something was running."""
        running = self._pids()
        for pid, cls in running:
            _stop_pid(pid, cls, timeout)
        for pid in self.executor_pids():  # a Worker stops its executors; one killed hard cannot
            _stop_pid(pid, EXECUTOR_CLASS, timeout)
        self.state_file.unlink(missing_ok=True)
        self._started.clear()
        return bool(running)
