"""One asset per managed Hive table; materializing a partition compacts it with the engine."""

import dagster as dg
from pydantic import Field

from lakekeeper_dagster.config import LakekeeperConfig, run_owner
from lakekeeper_dagster.engine.hive.model import TableInfo, validated_name, validated_partition
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.diff import diff_run, render_diff
from lakekeeper_dagster.engine.ops.options import UnitResult
from lakekeeper_dagster.engine.protocol.history import recorded
from lakekeeper_dagster.engine.protocol.suspension import resume_table
from lakekeeper_dagster.engine.rewrite.codec import validated_codec
from lakekeeper_dagster.engine.rewrite.schema import resolve_sort_columns
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster.surface.failures import engine_failures, fail_on_failed_units
from lakekeeper_dagster.surface.figures import (
    checksum_check_metadata,
    files_after,
    files_check_metadata,
    history_metadata,
    rows_check_metadata,
    unit_metadata,
)
from lakekeeper_dagster.surface.metadata import DIFF, FORCE_TAG
from lakekeeper_dagster.surface.table_files import keep_compacted, table_files
from lakekeeper_dagster.surface.tables import current_table
from lakekeeper_dagster.surface.translator import HiveTableTranslator
from spark_resources.py4j import java_cause
from spark_resources.resource import HiveSparkResource

ROW_COUNT = "row_count_preserved"
CHECKSUM = "content_checksum_matches"
WITHIN_TARGET = "files_within_target"


class CompactConfig(dg.Config):
    """Launchpad settings of a compaction run; the defaults compact what the plan says needs it."""

    force: bool = Field(
        default=False, description="compact even the partitions the plan would skip (few or already large files)"
    )
    sort_columns: list[str] = Field(
        default=[], description="sort the rewritten rows by these data columns; empty: the table's SORTED BY, if any"
    )
    partitions: list[str] = Field(
        default=[], description="only these partitions of the run (the sensor's request); empty: all of them"
    )
    codec: str | None = Field(
        default=None,
        description="recompress into this codec (e.g. zstd), partitions in another codec too; "
        "empty: the codec setting, else the table's",
    )
    resume: bool = Field(
        default=False,
        description="first forget the failed runs of this run's partitions, so that the suspended ones (failed "
        "suspend_after_failures runs in a row) are compacted again",
    )


def check_results(key: dg.AssetKey, results: list[UnitResult]) -> list[dg.AssetCheckResult]:
    """The evidence of the engine's verification: each check's figures before/after at the top of its metadata."""
    verified = [r for r in results if r.rows_before is not None]
    unreadable = [r for r in results if r.status == UnitStatus.FAILED and r.rows_before is None]
    return [
        dg.AssetCheckResult(
            asset_key=key,
            check_name=ROW_COUNT,
            passed=all(r.row_count_preserved for r in verified) and not unreadable,
            metadata=rows_check_metadata(results),
        ),
        dg.AssetCheckResult(
            asset_key=key,
            check_name=CHECKSUM,
            passed=all(r.checksum_matches for r in verified) and not unreadable,
            metadata=checksum_check_metadata(results),
        ),
        dg.AssetCheckResult(
            asset_key=key,
            check_name=WITHIN_TARGET,
            passed=all(r.files_after <= r.target_files for r in results if r.status == UnitStatus.COMPACTED),
            severity=dg.AssetCheckSeverity.WARN,
            metadata=files_check_metadata(results),
        ),
    ]


def check_config(config: CompactConfig, info: TableInfo) -> None:
    """Refuse, before anything starts Spark, run-config partitions that are empty, blank or malformed (an empty name
    must never widen a run) or given for a table that has no partitions, and sort columns the table does not have."""
    with engine_failures():
        for name in config.partitions:
            validated_partition(name, "an entry of config.partitions")
        for column in config.sort_columns:
            validated_name(column, "an entry of config.sort_columns")
        resolve_sort_columns(info, tuple(config.sort_columns))
        validated_codec(config.codec, info.file_format, "config.codec")
    if config.partitions and not info.is_partitioned:
        raise dg.Failure(description=f"config.partitions is set but {info.qualified_name} has no partitions; remove it")


def partitions_to_compact(context: dg.AssetExecutionContext, config: CompactConfig, info: TableInfo) -> list[str]:
    """The partitions this run compacts: the run's partitions, narrowed to `config.partitions` when given."""
    keys = list(context.partition_keys)
    wanted = set(config.partitions)
    if not wanted:
        return keys
    outside = sorted(wanted - set(keys))
    if outside:
        raise dg.Failure(
            description=f"config.partitions names partition(s) of {info.qualified_name} that this run does not "
            f"cover: {', '.join(outside[:5])}; choose a partition range that includes them"
        )
    return [k for k in keys if k in wanted]


def diff_metadata(
    context: dg.AssetExecutionContext, spark, settings: LakekeeperConfig, info: TableInfo, results: list[UnitResult]
) -> dict:
    """The run's diff (`engine/ops/diff.py`) as a Markdown table, when it committed a unit; none (with a warning)
    when its history cannot be read: its records are not written yet (a failed history write: they come with the
    next run), or the history table fails to read. The data change is committed: its diff never fails the step."""
    run = next((r.run_id for r in results if r.status == UnitStatus.COMPACTED and r.run_id), None)
    if run is None:
        return {}
    try:
        diff = diff_run(spark, settings.history.table, info.database, info.name, run)
    except Exception as error:  # an engine error, or Spark failing to read the history table
        context.log.warning(f"no diff of run {run}: {java_cause(error)}")
        return {}
    return {DIFF: dg.MetadataValue.md(render_diff(diff))}


def scan_files(context: dg.AssetExecutionContext, key: dg.AssetKey) -> dict[str, int]:
    """Each unit's files before the run (`table_files.py`); none, with a warning, when they cannot be read: the
    run's data change is committed, its figures never fail the step."""
    try:
        return table_files(context.instance, key)
    except Exception as error:  # the instance's key-value store, or what it holds
        context.log.warning(f"what the run bought a scan of the table is not shown: {error}")
        return {}


def keep_scan_files(context: dg.AssetExecutionContext, key: dg.AssetKey, units: dict[str, int]) -> None:
    """Keep the files the run left (`table_files.py`); a warning when they cannot be kept (the next run's figures
    then count these units as last observed)."""
    try:
        keep_compacted(context.instance, key, units)
    except Exception as error:  # the instance's key-value store
        context.log.warning(f"the files this run left are not kept for the next run's figures: {error}")


def build_table_asset(
    info: TableInfo, settings: LakekeeperConfig, translator: HiveTableTranslator
) -> dg.AssetsDefinition:
    """The software-defined asset of one Hive table: the translator's spec, computed by the translator's op."""
    spec = translator.spec(info)
    key = spec.key

    @dg.multi_asset(
        name=translator.op_name(info),
        specs=[spec],
        backfill_policy=dg.BackfillPolicy.single_run() if spec.partitions_def else None,
        pool=translator.pool(info),
        check_specs=[
            dg.AssetCheckSpec(ROW_COUNT, asset=key, blocking=True, description="rows out == rows in, per partition"),
            dg.AssetCheckSpec(CHECKSUM, asset=key, description="order-insensitive content checksum out == in"),
            dg.AssetCheckSpec(WITHIN_TARGET, asset=key, description="no more files than the plan's target"),
        ],
    )
    def _compact(context: dg.AssetExecutionContext, spark: HiveSparkResource, config: CompactConfig):
        check_config(config, info)
        keys = partitions_to_compact(context, config, info) if spec.partitions_def else None
        with engine_failures(), recorded(settings.history_sink(context.run_id)):  # each step on the run's log
            options = settings.compaction_options(  # a table's bad archive policy fails the run with its key
                info.database,
                info.name,
                owner=run_owner(context.run_id),
                sort_columns=config.sort_columns or None,
                force=config.force or context.run.tags.get(FORCE_TAG) == "true",
                codec=config.codec,
            )
            current_table(spark.spark_session, info)
            if config.resume:
                for line in resume_table(spark.spark_session, info.database, info.name, keys):
                    context.log.info(line)
            results = compact_table(
                spark.spark_session, info.database, info.name, options, keys, lambda e: context.log.info(e.describe())
            )
        for result in results:
            context.log.info(f"{result.partition or info.qualified_name}: {result.status}: {result.reason}")
        files = scan_files(context, key)
        metadata = unit_metadata(results, files) | history_metadata(settings.history.table, results)
        metadata |= diff_metadata(context, spark.spark_session, settings, info, results)
        yield dg.MaterializeResult(metadata=metadata, check_results=check_results(key, results))
        if files:  # the next run's figures start from what this one left
            keep_scan_files(context, key, {r.partition or "": files_after(r) for r in results})
        fail_on_failed_units(results, f"unit(s) of {info.qualified_name} failed")  # the sensor backs them off

    return _compact
