"""The code location's Definitions, built lazily from the YAML config."""

from __future__ import annotations

import dagster as dg

from lakekeeper_dagster.engine.analyze import analyze_tables, resolve_tables, thresholds_from
from lakekeeper_dagster.engine.config import LakekeeperConfig, load_config
from lakekeeper_dagster.engine.planning import render_report
from spark_resources.resource import HiveSparkResource


def spark_resource_for(config: LakekeeperConfig) -> HiveSparkResource:
    return HiveSparkResource(
        metastore_uri=config.metastore.uri,
        warehouse_dir=config.metastore.resolved_warehouse_dir(),
        spark_submit=config.spark_submit.model_dump(exclude_none=True),
    )


class AnalyzeConfig(dg.Config):
    database: str | None = None
    tables: list[str] = []


def build_analyze_job(config: LakekeeperConfig) -> dg.JobDefinition:
    @dg.op(name="analyze_tables")
    def analyze_op(context: dg.OpExecutionContext, op_config: AnalyzeConfig, spark: HiveSparkResource) -> None:
        """Log the dry-run report for the selected (or managed) tables."""
        session = spark.spark_session
        pairs = resolve_tables(session, config, op_config.database, op_config.tables or None)
        plans = analyze_tables(session, pairs, thresholds_from(config))
        context.log.info("\n" + render_report(plans))

    @dg.job(name="analyze_job", description="Dry-run report: which tables and partitions need compaction.")
    def analyze_job() -> None:
        analyze_op()

    return analyze_job


def build_definitions(config: LakekeeperConfig) -> dg.Definitions:
    return dg.Definitions(jobs=[build_analyze_job(config)], resources={"spark": spark_resource_for(config)})


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions(load_config())
