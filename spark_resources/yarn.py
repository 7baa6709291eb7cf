"""YARN in the local Hadoop (`hadoop.LocalHadoop` with NodeManagers): the servers' settings, the client's, and a Spark
application's on it.

Sized for a 2-core machine: NodeManagers of NODEMANAGER_VCORES cores and NODEMANAGER_MEMORY_MB each, a scheduler that
hands out small containers, one queue (`default`) that lets half its memory go to ApplicationMasters (two applications
at once: a session and a CLI run beside it). Spark's jars are staged once on HDFS (SPARK_ARCHIVE, world-readable so
that each NodeManager caches them for every application) rather than uploaded by each application.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from spark_resources.errors import ResourceError
from spark_resources.metastore import _site_xml

NODEMANAGER_VCORES = 2
NODEMANAGER_MEMORY_MB = 4096
AM_MEMORY = "512m"  # the client-mode ApplicationMaster (it only asks for executors)
EXECUTOR_MEMORY = "512m"
# Spark 4.3 in YARN client mode: the ApplicationMaster adds its proxy filter to the driver's web UI while the
# SparkContext attaches the UI's handlers, and the context then fails to start (a ConcurrentModificationException in
# Jetty's ServletHandler.initialize; two starts in three here). So a driver on this YARN runs without its web UI.
# In cluster mode the ApplicationMaster adds the filter before the UI starts: an application submitted so may turn it
# back on (`spark.ui.enabled` true in its extra_conf; cli/test_submit.py does) and be watched through its tracking URL.


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
    the driver on loopback (the NodeManagers' containers reach
    it there), a small ApplicationMaster, no driver web UI (see EXECUTOR_MEMORY's comment)."""
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
    """Pids of the container processes the NodeManagers launched (YARN's CONTAINER_ID in their environment, their
    working directory under `within`): what a hard stop of the minicluster would leave behind. Never this process."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            inside = Path(os.readlink(proc / "cwd")).is_relative_to(within)
            if inside and b"\0CONTAINER_ID=container_" in b"\0" + (proc / "environ").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids
