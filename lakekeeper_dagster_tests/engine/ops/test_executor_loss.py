"""An executor killed while a compaction's write tasks run, on the test cluster (`--spark-cluster`): SIGKILLed on
the Spark standalone cluster, its container shut down by its NodeManager on YARN (`YarnClient.signalToContainer`,
FORCEFUL_SHUTDOWN, as `yarn container -signal` does). Spark runs the lost tasks again on the executors left (a task
may fail 4 times on a cluster; the status store shows the task lost with its executor and the stage attempts run
again), the unit's verification (its input counted in the write's own tasks) still matches, no row is lost or
duplicated and no output file of the killed task is left anywhere."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
import traceback
from pathlib import Path

import pytest

from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.plan.thresholds import Batching, WriteMode
from lakekeeper_dagster.engine.protocol.journal import Journal
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster_tests.tables import OPTIONS, data_files, hidden_dirs, make_table, rows_of
from spark_resources.local_yarn import LocalYarn
from spark_resources.py4j import hadoop_conf, jvm, scala_seq
from spark_resources.yarn import yarn_client

PARTS = [{"date": f"2024-03-0{d}"} for d in (1, 2, 3)]


class ExecutorKiller(threading.Thread):
    """Watches the driver's status store for a running task of the writing stage of `table` (its job labelled
    `lakekeeper compact <table>...: write ...`); freezes the executor running it (SIGSTOP), checks once the driver
    has heard everything that the task is still running there, and kills it (`kill`): the task dies mid-write, and the
    shuffle output the executor held is lost with it (map tasks run again). An exception in the thread is kept in
    `error` (its traceback) for the test to report; an executor it froze but did not kill runs on."""

    def __init__(self, spark, cluster, table: str):
        super().__init__(daemon=True)
        self.spark, self.cluster, self.label = spark, cluster, f"lakekeeper compact {table}"
        self.killed: tuple[str, int, int] | None = None  # (executor id, pid, id of the job whose task it ran)
        self.error: str | None = None
        self.done = threading.Event()

    def _running_task(self) -> tuple[str, int, int, int] | None:
        """(executor id, job, stage, task) of a running task of the last stage of a labelled write job that has a
        shuffle (the stage that writes, reading map outputs the executors hold), by the driver's status store."""
        context = self.spark._jsc.sc()
        context.listenerBus().waitUntilEmpty()
        tracker = self.spark.sparkContext.statusTracker()
        jobs = [tracker.getJobInfo(job) for job in tracker.getActiveJobsIds()]
        writing = {max(job.stageIds): job.jobId for job in jobs if job is not None and len(job.stageIds) > 1}
        store = context.statusStore()
        for stage in scala_seq(store.activeStages()):
            description = str(stage.description().getOrElse(None))
            labelled = description.startswith(self.label) and ": write " in description
            if not labelled or stage.stageId() not in writing:
                continue
            for task in scala_seq(store.taskList(stage.stageId(), stage.attemptId(), 100)):
                if str(task.status()) == "RUNNING":
                    return str(task.executorId()), writing[stage.stageId()], stage.stageId(), task.taskId()
        return None

    def _pid(self, executor: str) -> int | None:
        app = self.spark.sparkContext.applicationId
        if isinstance(self.cluster, LocalYarn):  # the executor's container, as the executor told the driver
            attributes = self.spark._jsc.sc().statusStore().executorSummary(executor).attributes()
            return self.cluster.executor_pids(app).get(attributes.get("CONTAINER_ID").get())
        within = str(self.cluster.work_dir / app / executor)
        for pid in self.cluster.executor_pids(app):
            try:
                if os.readlink(f"/proc/{pid}/cwd") == within:
                    return pid
            except OSError:  # it exited since it was listed
                continue
        return None

    def run(self) -> None:
        try:
            self._watch()
        except BaseException:
            self.error = traceback.format_exc()

    def _watch(self) -> None:
        while not self.done.is_set() and self.killed is None:
            found = self._running_task()
            pid = self._pid(found[0]) if found else None
            if pid is None:
                time.sleep(0.05)
                continue
            os.kill(pid, signal.SIGSTOP)
            try:
                time.sleep(1.0)  # a status update the executor sent before it froze reaches the driver
                if self._running_task() == found:
                    self.kill(found[0], pid)
                    self.killed = (found[0], pid, found[1])
            finally:
                if self.killed is None:  # never leave an executor frozen
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)

    def kill(self, executor: str, pid: int) -> None:
        """SIGKILL on the standalone cluster; on YARN the ResourceManager has the executor's NodeManager shut its
        container down (a SIGKILL to the container's processes: the frozen executor dies as it is)."""
        if not isinstance(self.cluster, LocalYarn):
            os.kill(pid, signal.SIGKILL)
            return
        container = self.spark._jsc.sc().statusStore().executorSummary(executor).attributes().get("CONTAINER_ID")
        java = jvm(self.spark)
        with yarn_client(java, hadoop_conf(self.spark)) as client:
            client.signalToContainer(
                java.org.apache.hadoop.yarn.api.records.ContainerId.fromString(container.get()),
                java.org.apache.hadoop.yarn.api.records.SignalContainerCommand.valueOf("FORCEFUL_SHUTDOWN"),
            )
        deadline = time.monotonic() + 60  # the NodeManager hears of it at its next heartbeat
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.1)


def retries_in(spark, job: int, executor: str) -> tuple[list[str], list[tuple[int, int]]]:
    """In `job`, by the driver's status store: the error of every task that failed on `executor`, and those tasks'
    (stage, partition) that a later try ran to success (a task re-attempt, or a task of the stage's next attempt)."""
    store = spark._jsc.sc().statusStore()
    failed, rerun = [], []
    for stage in scala_seq(store.job(job).stageIds()):
        attempts = range(store.lastStageAttempt(stage).attemptId() + 1)
        tasks = [task for attempt in attempts for task in scala_seq(store.taskList(stage, attempt, 10_000))]
        succeeded = {task.partitionId() for task in tasks if str(task.status()) == "SUCCESS"}
        for task in tasks:
            error = task.errorMessage()
            if str(task.executorId()) == executor and str(task.status()) == "FAILED" and error.isDefined():
                failed.append(str(error.get()))
                if task.partitionId() in succeeded:
                    rerun.append((stage, task.partitionId()))
    return failed, rerun


def children(pids: list[int]) -> list[str]:
    """The command lines of the processes whose parent is one of `pids`."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) in pids:
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.crash
@pytest.mark.cluster(only=True)
@pytest.mark.parametrize("mode", [WriteMode.ONE_JOB, WriteMode.PER_UNIT])
def test_an_executor_killed_mid_write_loses_and_duplicates_nothing(spark, spark_cluster, database, data_dir, mode):
    table = make_table(spark, database, "ev", data_dir, partitions=PARTS, files=4, rows=50_000)
    before = rows_of(spark, table)
    assert len({row[0] for row in before}) == len(before) == 3 * 50_000
    options = dataclasses.replace(OPTIONS, batching=Batching(write_mode=mode, concurrent_jobs=2), sort_columns=("v",))
    killer = ExecutorKiller(spark, spark_cluster, table)
    killer.start()
    try:
        results = compact_table(spark, database, "ev", options)
    finally:
        killer.done.set()
        killer.join()

    assert killer.error is None, f"the thread that kills the executor failed:\n{killer.error}"
    assert killer.killed is not None, "no write task was caught running"
    executor, pid, job = killer.killed
    assert not os.path.exists(f"/proc/{pid}")
    lost = [e for e in scala_seq(spark._jsc.sc().statusStore().executorList(False)) if str(e.id()) == executor]
    assert [e.isActive() for e in lost] == [False]  # the driver saw it die
    # Spark retried: in the killed write job a task failed with the executor's loss, and its partition was run again
    # to success, by a task re-attempt or by the stage's next attempt (which of the two depends on when the executor
    # died: in the map stage Spark resubmits the task, a lost map output fetched by the write stage re-runs a stage).
    failed, rerun = retries_in(spark, job, executor)
    assert any(error.startswith("ExecutorLostFailure") for error in failed), failed
    assert rerun, f"no task that failed with executor {executor} in job {job} was run again to success"
    assert [r.status for r in results] == [UnitStatus.COMPACTED] * 3, [r.reason for r in results]
    assert all(r.row_count_preserved and r.checksum_matches for r in results)
    assert rows_of(spark, table) == before  # every row, once: nothing lost, nothing duplicated
    assert all(len(data_files(data_dir / r.partition)) == 1 for r in results)
    # Nothing of the killed task's output anywhere: no temporary directory, no staging sibling left behind.
    assert not list(data_dir.rglob("_temporary")) and not list(data_dir.rglob("*.crc.tmp"))
    assert [d for d in hidden_dirs(data_dir) if not d.startswith(".lk-old-")] == []
    (run_id,) = {r.run_id for r in results}
    home = data_dir.parent / f".lakekeeper-{data_dir.name}"
    journal = Journal.load(Storage(spark), (home / "journal" / run_id).as_uri())
    assert [u.state for u in journal.units] == ["committed"] * 3
    assert not (home / "lease").exists()
    # The engine ships no Python function to executors (DataFrame expressions only): no executor started a Python
    # worker, so executors need no Python environment of the project.
    executors = spark_cluster.executor_pids(spark.sparkContext.applicationId)
    pids = list(executors.values()) if isinstance(executors, dict) else executors  # YARN's by container
    assert pids and children(pids) == []
