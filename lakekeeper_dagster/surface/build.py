"""The code location's definitions from the managed tables' state: assets, checks, jobs, schedules, sensors."""

from __future__ import annotations

import dagster as dg

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.surface.assets import build_table_asset
from lakekeeper_dagster.surface.checks import build_backup_check, build_merge_check
from lakekeeper_dagster.surface.jobs.archive import ARCHIVE_JOB, ArchiveConfig, build_archive_job
from lakekeeper_dagster.surface.jobs.compaction import (
    build_jobs,
    build_refresh_job,
    cleanup_schedule,
    compaction_job,
    refresh_schedule,
)
from lakekeeper_dagster.surface.jobs.merge import MERGE_JOB, MergeConfig, build_merge_job, merge_asset_specs
from lakekeeper_dagster.surface.jobs.observe import build_observe_job, observe_schedule
from lakekeeper_dagster.surface.jobs.policy import policy_schedule
from lakekeeper_dagster.surface.jobs.retention import RETENTION_JOB, RetentionConfig, build_retention_job
from lakekeeper_dagster.surface.metadata import NOTICE_KEY
from lakekeeper_dagster.surface.observations import OBSERVE_JOB
from lakekeeper_dagster.surface.sensors.file_count import build_file_count_sensor
from lakekeeper_dagster.surface.sensors.partitions import build_partitions_sensor
from lakekeeper_dagster.surface.state import LocationState
from lakekeeper_dagster.surface.tables import ManagedTables, load_managed_tables
from lakekeeper_dagster.surface.translator import translator_for
from spark_resources.resource import HiveSparkResource, code_location_resource

# Job metadata key of the location's notice ("0 tables managed: ...", "the metastore is unreachable: ..."): shown
# on every job's page, where an operator looks for rollback, cleanup and recover.


def spark_resource_for(config: LakekeeperConfig, **overrides) -> HiveSparkResource:
    return HiveSparkResource(
        metastore_uri=config.metastore.uri,
        warehouse_dir=config.metastore.resolved_warehouse_dir(),
        spark_submit=config.spark_submit.model_dump(exclude_none=True),
        **overrides,
    )


def read_managed_tables(config: LakekeeperConfig, resource: HiveSparkResource | None = None) -> ManagedTables:
    """The managed tables as the metastore lists them now, through `resource` (default: the runs' own resource, its
    Kerberos login included); the session it starts is stopped afterwards. No session at all when the config selects
    no table."""
    if not config.tables.databases and not config.tables.tables:
        return ManagedTables()
    with dg.build_resources({"spark": resource or spark_resource_for(config)}) as resources:
        return load_managed_tables(resources.spark.spark_session, config)


def build_definitions(
    config: LakekeeperConfig, spark=None, resource: HiveSparkResource | None = None
) -> dg.Definitions:
    """The definitions for the tables the config manages as the metastore lists them now: read through `spark` when
    given, else through `read_managed_tables` with `resource` (the code location builds from its stored state)."""
    managed = load_managed_tables(spark, config) if spark is not None else read_managed_tables(config, resource)
    return definitions_from_state(config, LocationState(managed, read_at=None), resource)


def definitions_from_state(
    config: LakekeeperConfig, state: LocationState, resource: HiveSparkResource | None = None
) -> dg.Definitions:
    """Assets, checks, jobs, schedules and the sensor of the state's tables; its notice on every job's page."""
    tables = state.managed.tables
    translator = translator_for(config, tables)
    jobs = [
        *build_jobs(config, tables, translator),
        build_observe_job(config, tables, translator),
        build_refresh_job(config, translator),
        build_archive_job(config, tables, translator),
        build_retention_job(config),
        build_merge_job(config, tables, translator),
    ]
    if state.notice:
        jobs = [job.with_metadata({**job.metadata, NOTICE_KEY: dg.MetadataValue.text(state.notice)}) for job in jobs]
    by_name = {job.name: job for job in jobs}
    compaction = [compaction_job(info, translator) for info in tables]
    return dg.Definitions(
        assets=[
            *(build_table_asset(info, config, translator) for info in tables),
            *merge_asset_specs(tables, translator),
        ],
        asset_checks=[
            *(build_backup_check(info, translator) for info in tables),
            *(check for info in tables if (check := build_merge_check(info, config, translator))),
        ],
        jobs=[*compaction, *jobs],
        schedules=[
            cleanup_schedule(by_name["cleanup_job"]),
            observe_schedule(by_name[OBSERVE_JOB], config),
            refresh_schedule(by_name["refresh_tables_job"]),
            policy_schedule(by_name[ARCHIVE_JOB], config, tables, ArchiveConfig),
            policy_schedule(by_name[RETENTION_JOB], config, tables, RetentionConfig),
            policy_schedule(by_name[MERGE_JOB], config, tables, MergeConfig),
        ],
        sensors=[
            build_file_count_sensor(config, tables, translator, compaction),
            build_partitions_sensor(config, tables, translator),
        ],
        resources={"spark": code_location_resource(resource or spark_resource_for(config))},
        executor=dg.in_process_executor,
    )
