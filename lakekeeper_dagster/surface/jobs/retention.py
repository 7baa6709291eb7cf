"""`retention_job`: drop partitions older than an age (`table_overrides.<D.T>.retention`), and its schedule (off)."""

# No `from __future__ import annotations`: Dagster resolves the op's config annotation (RetentionConfig) at definition.

import dagster as dg
from pydantic import Field

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.ops.retention import retain_table
from lakekeeper_dagster.surface.failures import fail_for_tables
from lakekeeper_dagster.surface.jobs.policy import PolicyConfig, each_table
from spark_resources.resource import HiveSparkResource

RETENTION_JOB = "retention_job"


class RetentionConfig(PolicyConfig):
    """The dry run lists partition, time, files and bytes; a real run drops partitions, their data to the Trash."""

    POLICY = "retention"
    CRON = "30 2 * * *"  # nightly

    force: bool = Field(default=False, description="drop even more than retention.max_fraction of the partitions")
    skip_trash: bool = Field(default=False, description="delete the data instead of moving it to the Trash")


def build_retention_job(settings: LakekeeperConfig) -> dg.JobDefinition:
    """retention_job: one op over the named table, or every table with a retention policy."""

    @dg.op
    def retention(context: dg.OpExecutionContext, config: RetentionConfig, spark: HiveSparkResource) -> None:
        """Drop (or, as a dry run, list) the partitions older than the age, table by table: each table's outcome is
        logged at once; a failing table does not stop the others; the run fails at the end naming every one."""
        dropped, places, backups, failed, files, size = [], {}, [], {}, 0, 0
        options = {"force": config.force, "skip_trash": config.skip_trash}
        for name, outcome in each_table(context, config, settings, spark, retain_table, "dropped", failed, **options):
            backups += outcome.backups
            if config.dry_run:  # what would go
                dropped += [f"{name}/{i.candidate.partition}" for i in outcome.plan.drop]
                files, size = files + outcome.plan.files, size + outcome.plan.bytes
            else:
                dropped += [f"{name}/{p}" for p in outcome.dropped]
                places |= {f"{name}/{p}": where for p, where in outcome.places.items()}
                files, size = files + outcome.files, size + outcome.bytes
        metadata = {
            "dry_run": config.dry_run,
            "partitions": dg.MetadataValue.json(dropped),
            "partition_count": len(dropped),
            "files": files,
            "bytes": size,
            "where": dg.MetadataValue.json(places),  # where each dropped partition's directory went
            "backups_holding_dropped": dg.MetadataValue.json(backups),  # readable there until cleanup
            "failed": dg.MetadataValue.json(failed),
        }
        fail_for_tables(failed, metadata)  # the drops done before a table failed are in the failure's metadata
        context.add_output_metadata(metadata)

    @dg.job(
        name=RETENTION_JOB,
        description="Drop partitions older than an age (table_overrides.<DB.TABLE>.retention): metastore entry and "
        "data (to the Trash). Opens as a dry run.",
    )
    def retention_job() -> None:
        retention()

    return retention_job
