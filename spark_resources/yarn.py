"""YARN in the local Hadoop (`hadoop.LocalHadoop` with NodeManagers): the servers' settings, the client's, and a Spark
application's on it.

Sized for a 2-core machine: NodeManagers of NODEMANAGER_VCORES cores and NODEMANAGER_MEMORY_MB each, a scheduler that
hands out small containers, one queue (`default`) that lets half its memory go to ApplicationMasters (two applications
at once: a session and a CLI run beside it). Spark's jars are staged once on HDFS (SPARK_ARCHIVE, world-readable so
that each NodeManager caches them for every application) rather than uploaded by each application.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_resources.errors import ResourceError
from spark_resources.metastore import _site_xml

if TYPE_CHECKING:
    from spark_resources.hadoop import LocalHadoop

EXECUTOR_CLASS = "org.apache.spark.executor.YarnCoarseGrainedExecutorBackend"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))

NODEMANAGER_VCORES = 2
NODEMANAGER_MEMORY_MB = 4096
AM_MEMORY = "512m"  # the client-mode ApplicationMaster (it only asks for executors)
EXECUTOR_MEMORY = "512m"
# Spark 4.3 in YARN client mode: the ApplicationMaster adds its proxy filter to the driver's web UI while the
# SparkContext attaches the UI's handlers, and the context then fails to start (a ConcurrentModificationException in
# Jetty's ServletHandler.initialize; two starts in three here). So a driver on this YARN runs without its web UI.


def spark_archive_path() -> str:
    """Where on HDFS Spark's jars are staged: one archive per pyspark version."""
    import pyspark

    return f"/lakekeeper/spark-{pyspark.__version__}-jars.zip"


def server_settings(home: Path) -> dict[str, str]:
    """The NodeManagers' and scheduler's settings (`-D` of the launcher)."""
    return {
        "yarn.nodemanager.resource.cpu-vcores": str(NODEMANAGER_VCORES),
        "yarn.nodemanager.resource.memory-mb": str(NODEMANAGER_MEMORY_MB),
        "yarn.scheduler.minimum-allocation-mb": "128",
        "yarn.scheduler.maximum-allocation-mb": str(NODEMANAGER_MEMORY_MB),
        # A JVM reserves far more address space than it uses; physical memory stays checked.
        "yarn.nodemanager.vmem-check-enabled": "false",
        # A full disk of the machine is not the NodeManagers' concern here (they would refuse every container).
        "yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage": "100",
        "yarn.nodemanager.delete.debug-delay-sec": "600",  # containers' directories kept a while, to be read
    }


def capacity_scheduler_xml() -> str:
    """The scheduler's queues: only `default`, half of it for ApplicationMasters."""
    return _site_xml(
        {
            "yarn.scheduler.capacity.root.queues": "default",
            "yarn.scheduler.capacity.root.default.capacity": "100",
            "yarn.scheduler.capacity.root.default.maximum-capacity": "100",
            "yarn.scheduler.capacity.maximum-am-resource-percent": "0.5",
        }
    )


def client_settings(ready: dict[str, str]) -> dict[str, str]:
    """yarn-site.xml's settings: the ResourceManager's addresses the launcher reported once it listened."""
    return {key: value for key, value in ready.items() if key.startswith("yarn.resourcemanager.")}


def spark_conf(namenode_uri: str) -> dict[str, str]:
    """A Spark application's settings on this YARN without a key of their own in `spark_submit`: the staged jars,
    the driver on loopback (the NodeManagers' containers reach it there), a small ApplicationMaster, no driver web
    UI (see EXECUTOR_MEMORY's comment)."""
    return {
        "spark.yarn.archive": f"{namenode_uri}{spark_archive_path()}",
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.yarn.am.memory": AM_MEMORY,
    }


@contextmanager
def yarn_client(jvm: Any, hadoop_conf: Any) -> Iterator[Any]:
    """A started `YarnClient` (in the JVM of py4j view `jvm`) of the ResourceManager that the Hadoop `Configuration`
    `hadoop_conf` names (yarn-site.xml's settings, the login of that JVM), stopped afterwards."""
    client = jvm.org.apache.hadoop.yarn.client.api.YarnClient.createYarnClient()
    client.init(jvm.org.apache.hadoop.yarn.conf.YarnConfiguration(hadoop_conf))
    client.start()
    try:
        yield client
    finally:
        client.stop()


def check_queue(jvm: Any, conf: dict[str, str]) -> None:
    """Refuse a Spark conf whose `spark.yarn.queue` is no leaf queue of the ResourceManager (asked through a
    `YarnClient` in the not yet submitted driver's JVM, with the Hadoop settings the SparkContext would use), before
    anything is submitted: YARN would only reject the application once Spark waits for it."""
    queue = conf["spark.yarn.queue"]
    spark_conf = jvm.org.apache.spark.SparkConf(False)
    for key, value in conf.items():
        spark_conf.set(key, value)
    hadoop_conf = jvm.org.apache.spark.deploy.SparkHadoopUtil.get().newConfiguration(spark_conf)
    with yarn_client(jvm, hadoop_conf) as client:
        leaves = [info for info in client.getAllQueues() if info.getChildQueues().isEmpty()]
    if any(queue in (info.getQueueName(), info.getQueuePath()) for info in leaves):
        return
    names = ", ".join(sorted(info.getQueuePath() for info in leaves))
    raise ResourceError(
        f"spark_submit.queue is {queue!r} (spark.yarn.queue), and the ResourceManager has no such queue to run "
        f"applications in: its queues are {names}. Set spark_submit.queue to one of them, or leave it out for the "
        "cluster's default queue. Nothing was done"
    )


def container_pids(within: Path) -> list[int]:
    """Pids of the processes the NodeManagers launched (their working directory is under `within`): what a hard
    stop of the minicluster would leave behind."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if Path(os.readlink(proc / "cwd")).is_relative_to(within):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


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
