"""The code location's Definitions, built from the YAML config and the managed tables' state (read from the
metastore at the code server's load, inherited by its run workers, the last known one when the metastore is down:
see location_state)."""

from __future__ import annotations

import os

import dagster as dg

from lakekeeper_dagster.assets import build_table_asset
from lakekeeper_dagster.checks import build_backup_check
from lakekeeper_dagster.config import LakekeeperConfig, load_config
from lakekeeper_dagster.jobs import build_jobs, cleanup_schedule, compaction_job
from lakekeeper_dagster.location_state import LocationState, current_state
from lakekeeper_dagster.managed import ManagedTables, load_managed_tables
from lakekeeper_dagster.observations import OBSERVE_JOB, build_observe_job, observe_schedule
from lakekeeper_dagster.partition_sensor import build_partitions_sensor
from lakekeeper_dagster.sensors import build_file_count_sensor
from lakekeeper_dagster.translator import HiveTableTranslator
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


def read_managed_tables(config: LakekeeperConfig) -> ManagedTables:
    """The managed tables as the metastore lists them now, through the runs' own resource (its Kerberos login
    included); the session it starts is stopped afterwards. No session at all when the config selects no table."""
    if not config.tables.databases and not config.tables.tables:
        return ManagedTables()
    with dg.build_resources({"spark": spark_resource_for(config)}) as resources:
        return load_managed_tables(resources.spark.spark_session, config)


def build_definitions(
    config: LakekeeperConfig, spark=None, resource: HiveSparkResource | None = None
) -> dg.Definitions:
    """The definitions for the tables the config manages: read through `spark` when given, else from the location's
    state (the metastore when this process may and can read it; see `current_state`)."""
    if spark is not None:
        state = LocationState(load_managed_tables(spark, config), read_at=None)
    else:
        state = current_state(config, lambda: read_managed_tables(config))
    return definitions_from_state(config, state, resource)


def definitions_from_state(
    config: LakekeeperConfig, state: LocationState, resource: HiveSparkResource | None = None
) -> dg.Definitions:
    """Assets, checks, jobs, schedules and the sensor of the state's tables; its notice on every job's page."""
    tables = state.managed.tables
    translator = HiveTableTranslator(owners=config.asset_owners, tags=config.asset_tags)
    jobs = [*build_jobs(config, tables, translator), build_observe_job(config, tables, translator)]
    if state.notice:
        jobs = [job.with_metadata({**job.metadata, NOTICE_KEY: dg.MetadataValue.text(state.notice)}) for job in jobs]
    by_name = {job.name: job for job in jobs}
    compaction = [compaction_job(info, translator) for info in tables]
    return dg.Definitions(
        assets=[build_table_asset(info, config, translator) for info in tables],
        asset_checks=[build_backup_check(info, translator) for info in tables],
        jobs=[*compaction, *jobs],
        schedules=[
            cleanup_schedule(by_name["cleanup_job"]),
            observe_schedule(by_name[OBSERVE_JOB], config),
        ],
        sensors=[
            build_file_count_sensor(config, tables, translator, compaction),
            build_partitions_sensor(config, tables, translator),
        ],
        resources={"spark": code_location_resource(resource or spark_resource_for(config))},
        executor=dg.in_process_executor,
    )


def register_pools(instance: dg.DagsterInstance, definitions: dg.Definitions) -> list[str]:
    """Give every table's pool its limit row (at the instance's `default_limit`) before any of its runs is queued.

    Dagster 1.13 enforces a pool's default limit only from the dequeue tick after the first one that sees the pool:
    two runs of a new table queued before that tick would both start. Pools that already have a row (a limit set
    by `dagster instance concurrency set`, or registered before) are left as they are. Returns the pools added.
    """
    storage = instance.event_log_storage
    if instance.global_op_concurrency_default_limit is None:
        return []  # the instance sets no default limit: nothing to enforce (see dagster_instance.yaml)
    known = set(storage.get_concurrency_keys())
    pools = sorted({a.op.pool for a in definitions.assets if isinstance(a, dg.AssetsDefinition) and a.op.pool})
    added = [pool for pool in pools if pool not in known]
    for pool in added:
        storage.initialize_concurrency_limit_to_default(pool)
    return added


@dg.definitions
def defs() -> dg.Definitions:
    definitions = build_definitions(load_config())
    if os.environ.get("DAGSTER_HOME"):  # the code server, daemon and webserver share this instance
        with dg.DagsterInstance.get() as instance:
            register_pools(instance, definitions)
    return definitions
