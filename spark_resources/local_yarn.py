"""Spark on the YARN of a running `LocalHadoop`: the `spark_submit` block of a client-mode application there, and
what the ResourceManager and NodeManagers know of the applications."""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from spark_resources.errors import ResourceError
from spark_resources.hadoop import LocalHadoop
from spark_resources.yarn import EXECUTOR_MEMORY, container_pids

EXECUTOR_CLASS = "org.apache.spark.executor.YarnCoarseGrainedExecutorBackend"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class LocalYarn:
    """Spark on the YARN of a running `LocalHadoop` (started with NodeManagers): its `spark_submit` block, and what
    the ResourceManager and NodeManagers know of the applications (as `yarn application -list` and `-kill` do,
    through the ResourceManager's REST API). `extra_conf` is applied last."""

    hadoop: LocalHadoop
    num_executors: int = 2
    extra_conf: dict[str, str] = field(default_factory=dict)

    def spark_submit(self) -> dict:
        """The `spark_submit` block of a lakekeeper.yaml that runs Spark here in client mode (HADOOP_CONF_DIR must
        name `hadoop.conf_dir`)."""
        return {
            "enabled": True,
            "master": "yarn",
            "deploy_mode": "client",
            "queue": "default",
            "num_executors": self.num_executors,
            "executor_cores": 1,
            "executor_memory": EXECUTOR_MEMORY,
            "extra_conf": {**self.hadoop.yarn_spark_conf(), **self.extra_conf},
        }

    def _rest(self, path: str, method: str = "GET", body: dict | None = None) -> dict:
        web = self.hadoop.yarn_addresses()["yarn.resourcemanager.webapp.address"]
        url = f"http://{web}/ws/v1/cluster/{path}"
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
        try:  # straight to loopback, never through an http_proxy of the environment
            with NO_PROXY.open(request, timeout=10) as answer:
                return json.loads(answer.read() or b"{}")
        except (OSError, ValueError) as error:
            raise ResourceError(f"the ResourceManager's REST API at {url} does not answer: {error}") from None

    def applications(self) -> dict[str, tuple[str, str]]:
        """(name, state) of every application the ResourceManager knows, by id (state: NEW ... RUNNING, FINISHED,
        FAILED, KILLED)."""
        apps = (self._rest("apps").get("apps") or {}).get("app", [])
        return {app["id"]: (app["name"], app["state"]) for app in apps}

    def application(self, app_id: str) -> dict:
        """The ResourceManager's report of one application (state, finalStatus, progress, queue, ...)."""
        return self._rest(f"apps/{app_id}")["app"]

    def kill(self, app_id: str) -> None:
        """End an application as `yarn application -kill` does."""
        self._rest(f"apps/{app_id}/state", method="PUT", body={"state": "KILLED"})

    def executor_pids(self, app_id: str | None = None) -> dict[str, int]:
        """Pid of each executor JVM the NodeManagers run, by container id (of application `app_id` only when
        given)."""
        pids = {}
        for pid in container_pids(self.hadoop.home / "yarn"):
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
                container = Path(os.readlink(f"/proc/{pid}/cwd")).name
            except OSError:
                continue
            wanted = app_id is None or container.startswith("container_" + app_id.removeprefix("application_"))
            if EXECUTOR_CLASS.encode() in command and wanted:
                pids[container] = pid
        return pids
