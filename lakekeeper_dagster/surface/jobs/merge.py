"""`merge_job`: merge old fine partitions into coarse ones (`table_overrides.<D.T>.merge`), its schedule (off), and
the merged tables and union views as assets downstream of their source's.

A real run logs, on a managed table's merged table, the evaluations of its checks (`row_count_preserved`,
`content_checksum_matches`, `checks.build_merge_checks`) over each period whose copy it verified: the planned fine
files' rows and checksum against the copy's. They are logged as `dg.AssetCheckEvaluation`s, as `archive_job` does
(an op job cannot yield a result for a check it does not plan)."""

# No `from __future__ import annotations`: Dagster resolves the op's config annotation (MergeConfig) at definition.

import dagster as dg
from pydantic import Field

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.ops.merge import PeriodCopy, merge_table
from lakekeeper_dagster.engine.plan.merge import merge_names
from lakekeeper_dagster.surface.checks import copy_checks, log_check_evaluations
from lakekeeper_dagster.surface.failures import fail_for_tables
from lakekeeper_dagster.surface.jobs.policy import PolicyConfig, each_table
from lakekeeper_dagster.surface.translator import HiveTableTranslator
from spark_resources.resource import HiveSparkResource

MERGE_JOB = "merge_job"


class MergeConfig(PolicyConfig):
    """The dry run lists the periods and partitions; a real run copies them into the merged table, switches the
    view, and moves the fine data to the Trash."""

    POLICY = "merge"
    CRON = "45 3 * * *"  # nightly

    skip_trash: bool = Field(default=False, description="delete the merged fine data instead of the Trash")

    def check_target(self, settings: LakekeeperConfig, database: str, table: str) -> None:
        """ConfigError for a table without the partition time, age or view its merge needs."""
        super().check_target(settings, database, table)
        policies = settings.policies_for(database, table)
        merge_names(database, table, policies.merge.view, policies.merge.table)


def _log_checks(context: dg.OpExecutionContext, key: dg.AssetKey, copies: list[PeriodCopy]) -> None:
    """The merged table's checks, evaluated on the copies the run verified (see the module docstring)."""
    log_check_evaluations(context, key, copy_checks(key, copies))


def build_merge_job(
    settings: LakekeeperConfig, tables: list[TableInfo], translator: HiveTableTranslator
) -> dg.JobDefinition:
    """merge_job: one op over the named table, or every table with a merge policy; the checks of each managed
    table's merged table evaluated on the copies its run verified."""
    merged_keys = {info.qualified_name: keys[0] for info in tables if (keys := translator.merge_keys(info))}

    @dg.op
    def merge(context: dg.OpExecutionContext, config: MergeConfig, spark: HiveSparkResource) -> None:
        """Merge (or, as a dry run, list) the old periods, table by table: each table's outcome is logged at once;
        a failing table does not stop the others; the run fails at the end naming every one."""
        merged, failed, figures = [], {}, {"partition_count": 0, "files": 0, "bytes": 0, "rows": 0}
        options = {"skip_trash": config.skip_trash}
        for name, outcome in each_table(context, config, settings, spark, merge_table, "merged", failed, **options):
            if config.dry_run:  # what would be merged (rows are counted by the copy only)
                periods = outcome.plan.periods
                merged += [f"{outcome.plan.merged}/{p.partition}" for p in periods]
                figures["partition_count"] += sum(len(p.fine) for p in periods)
                figures["files"] += sum(p.files for p in periods)
                figures["bytes"] += sum(p.bytes for p in periods)
            else:
                merged += [f"{outcome.plan.merged}/{p}" for p in outcome.merged]
                figures["partition_count"] += outcome.partitions
                figures["files"] += outcome.files
                figures["bytes"] += outcome.bytes
                figures["rows"] += outcome.rows
                if outcome.copies and name in merged_keys:
                    _log_checks(context, merged_keys[name], outcome.copies)
        metadata = {
            "dry_run": config.dry_run,
            "merged_partitions": dg.MetadataValue.json(merged),  # the coarse partitions written (verified)
            **figures,  # of the fine partitions merged: how many, their files, bytes and rows
            "failed": dg.MetadataValue.json(failed),
        }
        fail_for_tables(failed, metadata)
        context.add_output_metadata(metadata)

    @dg.job(
        name=MERGE_JOB,
        description="Merge old fine partitions into coarse ones of a merged table, read through a union view "
        "(table_overrides.<DB.TABLE>.merge); never a row twice or missing. Opens as a dry run.",
    )
    def merge_job() -> None:
        merge()

    return merge_job


def merge_asset_specs(tables: list[TableInfo], translator: HiveTableTranslator) -> list[dg.AssetSpec]:
    """The merged table (downstream of its source) and the union view (of both) of each managed table whose policy
    names a view and `into`."""
    specs = []
    for info in tables:
        keys = translator.merge_keys(info)
        if keys is None:
            continue
        source, (merged, view) = translator.asset_key(info), keys
        specs.append(
            dg.AssetSpec(merged, deps=[source], description=f"{info.qualified_name}'s old periods, merged (merge_job)")
        )
        specs.append(
            dg.AssetSpec(
                view, deps=[source, merged], description=f"{info.qualified_name} and its merged table: query this"
            )
        )
    return specs
