"""The code location's Definitions, built from the YAML config and the managed tables' state.

`defs` loads the project's dg defs folder (`lakekeeper_dagster/defs`, `dg.load_from_defs_folder`), whose
`ManagedTablesComponent` is a `dg.StateBackedComponent` keeping the managed tables' metadata in the Dagster
instance's defs state storage (VERSIONED_STATE_STORAGE; see location_state). Chosen over
`Definitions.with_reconstruction_metadata` with a reconstruction branch: that branch spares the run workers only,
while every code-server initialization (the webserver's, the daemon's, each restart) would still start a JVM and read
the metastore; with versioned state only an explicit refresh (refresh_tables_job, `dg utils refresh-defs-state`,
`dagster dev` loads) reads it, every other load builds from a stored version, and a run worker from exactly the
version its run was planned with. The cost: the state lives in the instance (a shared `defs_state_storage` for
processes in other containers), and a production code server shows new tables only after a refresh."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import dagster as dg

from lakekeeper_dagster.assets import build_table_asset
from lakekeeper_dagster.checks import build_backup_check, build_merge_check
from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.jobs import build_jobs, build_refresh_job, cleanup_schedule, compaction_job, refresh_schedule
from lakekeeper_dagster.jobs_archive import ARCHIVE_JOB, archive_schedule, build_archive_job
from lakekeeper_dagster.jobs_merge import MERGE_JOB, build_merge_job, merge_asset_specs, merge_schedule
from lakekeeper_dagster.jobs_retention import RETENTION_JOB, build_retention_job, retention_schedule
from lakekeeper_dagster.location_state import LOCATION_NAME, LocationState
from lakekeeper_dagster.managed import ManagedTables, load_managed_tables
from lakekeeper_dagster.observations import OBSERVE_JOB, build_observe_job, observe_schedule
from lakekeeper_dagster.partition_sensor import build_partitions_sensor
from lakekeeper_dagster.sensors import build_file_count_sensor
from lakekeeper_dagster.translator import HiveTableTranslator, renamed_tables
from spark_resources.resource import HiveSparkResource, code_location_resource

# Job metadata key of the location's notice ("0 tables managed: ...", "the metastore is unreachable: ..."): shown
# on every job's page, where an operator looks for rollback, cleanup and recover.
NOTICE_KEY = "lakekeeper/location"


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
    translator = HiveTableTranslator(
        owners=config.asset_owners,
        tags=config.asset_tags,
        policies=config.table_overrides,
        renamed=renamed_tables(tables),
    )
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
            archive_schedule(by_name[ARCHIVE_JOB], config, tables),
            retention_schedule(by_name[RETENTION_JOB], config, tables),
            merge_schedule(by_name[MERGE_JOB], config, tables),
        ],
        sensors=[
            build_file_count_sensor(config, tables, translator, compaction),
            build_partitions_sensor(config, tables, translator),
        ],
        resources={"spark": code_location_resource(resource or spark_resource_for(config))},
        executor=dg.in_process_executor,
    )


def registered_under_another_name(record: logging.LogRecord) -> bool:
    """False for Dagster's warning that this module, loaded with `-m`, registers the location under its own name
    rather than LOCATION_NAME (kept: Dagster persists it): that name only finds app-managed components, and this
    location has none. A logging filter of the component tree's logger, matching the warning's exact words."""
    other = f"The code location name {LOCATION_NAME!r} configured on this project does not match the name {__name__!r} "
    return not record.getMessage().startswith(other)


@dg.definitions
def defs() -> dg.Definitions:
    """The project's defs folder: the managed tables' component, built from the stored state."""
    # The defs folder adds its metadata to every asset check, which turns our AssetChecksDefinitions into plain
    # AssetsDefinitions; Dagster turns them back when it reads the checks, passing the beta `execution_type`
    # parameter, and warns on every code-server load. That one warning is Dagster's own conversion, not a beta
    # feature this location uses: it is filtered, by its exact message.
    warnings.filterwarnings(
        "ignore", message="Parameter `execution_type` of function `AssetsDefinition.__init__`", category=dg.BetaWarning
    )
    logging.getLogger("dagster.components.core.component_tree").addFilter(registered_under_another_name)
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
