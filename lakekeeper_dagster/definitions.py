"""The code location's Definitions, built from the YAML config and the metastore's tables."""

from __future__ import annotations

import os

import dagster as dg

from lakekeeper_dagster.assets import build_table_asset
from lakekeeper_dagster.checks import build_backup_check
from lakekeeper_dagster.config import LakekeeperConfig, load_config
from lakekeeper_dagster.jobs import build_jobs, cleanup_schedule, compaction_job
from lakekeeper_dagster.managed import check_metastore, load_managed_tables
from lakekeeper_dagster.observations import build_observe_job, observe_schedule
from lakekeeper_dagster.partition_sensor import build_partitions_sensor
from lakekeeper_dagster.sensors import build_file_count_sensor
from lakekeeper_dagster.translator import HiveTableTranslator
from spark_resources.resource import HiveSparkResource, code_location_resource
from spark_resources.session import start_spark_session


def spark_resource_for(config: LakekeeperConfig, **overrides) -> HiveSparkResource:
    return HiveSparkResource(
        metastore_uri=config.metastore.uri,
        warehouse_dir=config.metastore.resolved_warehouse_dir(),
        spark_submit=config.spark_submit.model_dump(exclude_none=True),
        **overrides,
    )


def build_definitions(
    config: LakekeeperConfig, spark=None, resource: HiveSparkResource | None = None
) -> dg.Definitions:
    """Assets, checks, jobs, schedules and the sensor for the tables the config manages (read through `spark`)."""
    if spark is None:
        check_metastore(config)
        spark = start_spark_session(config.spark_conf())
    managed = load_managed_tables(spark, config)
    translator = HiveTableTranslator(owners=config.asset_owners, tags=config.asset_tags)
    jobs = build_jobs(config, managed.tables, translator)
    cleanup_job = next(j for j in jobs if j.name == "cleanup_job")
    observe_job = build_observe_job(config, managed.tables, translator)
    compaction = [compaction_job(info, translator) for info in managed.tables]
    return dg.Definitions(
        assets=[build_table_asset(info, config, translator) for info in managed.tables],
        asset_checks=[build_backup_check(info, translator) for info in managed.tables],
        jobs=[*compaction, *jobs, observe_job],
        schedules=[cleanup_schedule(cleanup_job), observe_schedule(observe_job, config)],
        sensors=[
            build_file_count_sensor(config, managed.tables, translator, compaction),
            build_partitions_sensor(config, managed.tables, translator),
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
        return []  # the instance sets no default limit: nothing to enforce (see dagster.yaml)
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
