"""The observation job: each partition's file count and sizes recorded over time as asset observations."""

import dagster as dg

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.fs.listing import list_directories
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.ops.analyze import plan_listed
from lakekeeper_dagster.engine.plan.units import UnitPlan
from lakekeeper_dagster.failures import engine_failures
from lakekeeper_dagster.managed import current_units
from lakekeeper_dagster.partitions import sync_partitions
from lakekeeper_dagster.translator import HiveTableTranslator
from spark_resources.resource import HiveSparkResource

OBSERVE_JOB = "observe_partitions_job"
FILE_COUNT = "file_count"
NEEDS_COMPACTION = "needs_compaction"


def observation_metadata(plan: UnitPlan) -> dict:
    """Numeric figures (plotted by the UI over time) and the plan's decision for one unit."""
    return {
        FILE_COUNT: plan.file_count,
        "total_bytes": plan.total_bytes,
        "average_bytes": float(plan.average_bytes),
        "median_bytes": float(plan.median_bytes),
        "target_files": plan.target_files,
        "threshold_bytes": float(plan.threshold_bytes),
        "small_files": plan.small_files,
        "small_bytes": plan.small_bytes,
        "large_files": plan.large_files,
        NEEDS_COMPACTION: plan.needs_compaction,
        "status": str(plan.status),
        "reason": plan.reason,
    }


def build_observe_job(
    settings: LakekeeperConfig, tables: list[TableInfo], translator: HiveTableTranslator
) -> dg.JobDefinition:
    """One op: sync dynamic partitions, list every managed unit in one Spark job, log one observation per unit."""

    @dg.op(out={})
    def observe_partitions(context: dg.OpExecutionContext, spark: HiveSparkResource):
        """Record each partition's (or unpartitioned table's) data file count, bytes, average and median size."""
        with engine_failures():
            session = spark.spark_session
            units = current_units(session, tables, context.log.warning)
        observed = [info for info in tables if info.qualified_name in units]
        for info in observed:
            if info.is_partitioned:
                hive = [unit.partition for unit in units[info.qualified_name]]
                added, removed = sync_partitions(context.instance, translator.partitions_def_name(info), hive)
                if added or removed:
                    context.log.info(f"{info.qualified_name}: {len(added)} partition(s) added, {len(removed)} removed")
        locations = [unit.location for table in units.values() for unit in table]
        thresholds = settings.thresholds()
        with engine_failures():
            what = f"observe {len(tables)} table(s)"
            listing = list_directories(session, locations, what, thresholds.min_file_bytes)
        for info in observed:
            plans = plan_listed(units[info.qualified_name], listing, thresholds)
            key = translator.asset_key(info)
            for plan in plans:
                yield dg.AssetObservation(asset_key=key, partition=plan.partition, metadata=observation_metadata(plan))
            missing = [u.partition or u.location for u in units[info.qualified_name] if u.location in listing.missing]
            context.log.info(
                f"{info.qualified_name}: {len(plans)} unit(s) observed, {sum(p.needs_compaction for p in plans)} "
                f"need compaction, {sum(p.file_count for p in plans)} data files"
                + (f"; location missing for {len(missing)}: {', '.join(missing[:5])}" if missing else "")
            )

    @dg.job(
        name=OBSERVE_JOB,
        description="Record every managed partition's file count and sizes (asset observations); new Hive "
        "partitions become dynamic partitions and vanished ones are removed.",
    )
    def observe_partitions_job() -> None:
        observe_partitions()

    return observe_partitions_job


def observe_schedule(job: dg.JobDefinition, settings: LakekeeperConfig) -> dg.ScheduleDefinition:
    """The observation job on `observation.cron_schedule`; off until turned on."""
    return dg.ScheduleDefinition(
        name="observe_partitions_schedule",
        job=job,
        cron_schedule=settings.observation.cron_schedule,
        default_status=dg.DefaultScheduleStatus.STOPPED,
    )
