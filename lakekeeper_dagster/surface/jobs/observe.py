"""The observation job and its schedule: the job observes every managed table (`surface/observation_run.py`), the
schedule runs it on `observation.cron_schedule` and never beside itself."""

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor

import dagster as dg

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.surface.changes import full_reads_due
from lakekeeper_dagster.surface.failures import engine_failures
from lakekeeper_dagster.surface.metadata import QUEUED_OR_EXECUTING
from lakekeeper_dagster.surface.observation_run import ObservationRun
from lakekeeper_dagster.surface.observations import OBSERVE_JOB
from lakekeeper_dagster.surface.translator import HiveTableTranslator
from spark_resources.resource import HiveSparkResource

GROUP_TABLES = 10  # tables observed together: one listing job (two groups' units and snapshots in memory at once)


def thresholds_fingerprint(settings: LakekeeperConfig) -> str:
    """What the units' decisions depend on besides their files: a table read under others is read in full."""
    return hashlib.sha256(repr(settings.thresholds()).encode()).hexdigest()[:16]


def build_observe_job(
    settings: LakekeeperConfig, tables: list[TableInfo], translator: HiveTableTranslator
) -> dg.JobDefinition:
    """One op: read the managed tables (only what may have changed, `surface/changes.py`), sync their dynamic
    partitions, record what changed and a summary per table."""

    @dg.op(out={})
    def observe_partitions(context: dg.OpExecutionContext, spark: HiveSparkResource):
        """Record each partition's (or unpartitioned table's) data file count, bytes, average and median size when
        they changed, and each table's summary; read again only what may have changed (`surface/changes.py`)."""
        instance = context.instance
        with engine_failures():
            session = spark.spark_session
        keys = {info.qualified_name: translator.asset_key(info) for info in tables}
        fingerprint = thresholds_fingerprint(settings)
        due = full_reads_due(instance, keys, time.time(), settings.observation.full_read_hours, fingerprint)
        run = ObservationRun(context, session, settings, translator, fingerprint)
        groups = [tables[start : start + GROUP_TABLES] for start in range(0, len(tables), GROUP_TABLES)]
        # The next group is read from the metastore while this one's directories are listed (one Spark job).
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="lakekeeper-observe-read") as pool:
            ahead = run.read_ahead(pool, groups[0], due) if groups else None
            for number in range(len(groups)):
                with engine_failures():
                    found = ahead.result()
                ahead = run.read_ahead(pool, groups[number + 1], due) if number + 1 < len(groups) else None
                yield from run.observe(found)
        context.log.info(
            f"{run.units} unit(s) of {run.tables} table(s), {run.listed} listed, {run.full} table(s) read in full: "
            f"{run.seconds['read']:.1f}s to read them from the metastore with their directories' times (beside the "
            "listing), "
            f"{run.seconds['sync']:.1f}s to sync the dynamic partitions, {run.seconds['list']:.1f}s to list their "
            "directories"
        )
        if run.overlapped:
            context.log.warning(
                f"another observation run overlapped this one ({', '.join(r[:8] for r in run.overlapped)}): what was "
                "recorded from then on is not kept as the last figures, the next run compares with the previous ones"
            )

    @dg.job(
        name=OBSERVE_JOB,
        description="Record the file count and sizes of every managed partition that changed since the last run "
        "(asset observations) and one summary per table (partitions, files, small files, backlog, bytes); new Hive "
        "partitions become dynamic partitions and vanished ones are removed.",
    )
    def observe_partitions_job() -> None:
        observe_partitions()

    return observe_partitions_job


def observe_schedule(job: dg.JobDefinition, settings: LakekeeperConfig) -> dg.ScheduleDefinition:
    """The observation job on `observation.cron_schedule`, skipped while a run of it is queued or running (runs of
    the job never overlap by the schedule: each keeps its figures); off until turned on."""

    @dg.schedule(
        name="observe_partitions_schedule",
        job=job,
        cron_schedule=settings.observation.cron_schedule,
        default_status=dg.DefaultScheduleStatus.STOPPED,
    )
    def observe_partitions_schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        running = context.instance.get_runs(dg.RunsFilter(job_name=OBSERVE_JOB, statuses=QUEUED_OR_EXECUTING), limit=1)
        if running:
            return dg.SkipReason(f"observation run {running[0].run_id[:8]} is not finished: not started again")
        return dg.RunRequest()

    return observe_partitions_schedule
