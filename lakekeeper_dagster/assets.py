"""One asset per managed Hive table; materializing a partition compacts it with the engine."""

import dagster as dg
from pydantic import Field

from lakekeeper_dagster.config import LakekeeperConfig, run_owner
from lakekeeper_dagster.engine.hive.model import TableInfo, validated_name, validated_partition
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.options import UnitResult
from lakekeeper_dagster.engine.rewrite.schema import resolve_sort_columns
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster.failures import engine_failures
from lakekeeper_dagster.translator import HiveTableTranslator
from spark_resources.resource import HiveSparkResource

ROW_COUNT = "row_count_preserved"
CHECKSUM = "content_checksum_matches"
WITHIN_TARGET = "files_within_target"
FORCE_TAG = "lakekeeper/force"
ROW_COUNT_METADATA = "dagster/row_count"  # Dagster's documented key (its TableMetadataSet is not exported in 1.13)


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


def unit_metadata(results: list[UnitResult]) -> dict:
    """Numeric totals (plotted by the UI) and, per partition, what happened and why."""
    compacted = [r for r in results if r.status == UnitStatus.COMPACTED]
    metadata = {
        "files_before": sum(r.files_before for r in results),
        "files_after": sum(r.files_after for r in results),
        "bytes_before": sum(r.bytes_before for r in results),
        "bytes_after": sum(r.bytes_after for r in results),
        "rows": sum(r.rows_after or 0 for r in compacted),
        "target_files": sum(r.target_files for r in results),
        "seconds": round(sum(r.seconds for r in results), 3),
        "partitions_compacted": len(compacted),
        "partitions_skipped": sum(r.status == UnitStatus.SKIPPED for r in results),
        "partitions_failed": sum(r.status == UnitStatus.FAILED for r in results),
        "backup_table": next((r.backup_table for r in compacted if r.backup_table), "") or "",
        "reason": "; ".join(f"{r.partition or '(table)'}: {r.status}: {r.reason}" for r in results)[:4000],
        "details": dg.MetadataValue.json([r.to_dict() for r in results]),
    }
    if compacted:
        metadata[ROW_COUNT_METADATA] = metadata["rows"]
    if len(results) == 1:
        metadata["location"] = dg.MetadataValue.path(results[0].location)
    return metadata


def check_results(key: dg.AssetKey, results: list[UnitResult]) -> list[dg.AssetCheckResult]:
    """The evidence of the engine's verification, per partition, in the checks' metadata."""
    verified = [r for r in results if r.rows_before is not None]
    partitions = [r.partition or "(table)" for r in verified]

    def figures(attr_before: str, attr_after: str) -> dict:
        return {
            "partitions": ", ".join(partitions) or "(none compacted)",
            "before": dg.MetadataValue.json(
                {p: getattr(r, attr_before) for p, r in zip(partitions, verified, strict=True)}
            ),
            "after": dg.MetadataValue.json(
                {p: getattr(r, attr_after) for p, r in zip(partitions, verified, strict=True)}
            ),
        }

    unreadable = [r for r in results if r.status == UnitStatus.FAILED and r.rows_before is None]
    return [
        dg.AssetCheckResult(
            asset_key=key,
            check_name=ROW_COUNT,
            passed=all(r.row_count_preserved for r in verified) and not unreadable,
            metadata={**figures("rows_before", "rows_after"), "unreadable": len(unreadable)},
        ),
        dg.AssetCheckResult(
            asset_key=key,
            check_name=CHECKSUM,
            passed=all(r.checksum_matches for r in verified) and not unreadable,
            metadata=figures("checksum_before", "checksum_after"),
        ),
        dg.AssetCheckResult(
            asset_key=key,
            check_name=WITHIN_TARGET,
            passed=all(r.files_after <= r.target_files for r in results if r.status == UnitStatus.COMPACTED),
            severity=dg.AssetCheckSeverity.WARN,
            metadata={
                "files_after": sum(r.files_after for r in results),
                "target": sum(r.target_files for r in results),
            },
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
    if config.partitions and not info.is_partitioned:
        raise dg.Failure(description=f"config.partitions is set but {info.qualified_name} has no partitions; remove it")


def run_units(context: dg.AssetExecutionContext, config: CompactConfig, info: TableInfo) -> list[str]:
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
        options = settings.compaction_options(
            info.database,
            info.name,
            owner=run_owner(context.run_id),
            sort_columns=config.sort_columns or None,
            force=config.force or context.run.tags.get(FORCE_TAG) == "true",
        )
        keys = run_units(context, config, info) if spec.partitions_def else None
        with engine_failures():
            results = compact_table(spark.spark_session, info.database, info.name, options, keys)
        for result in results:
            context.log.info(f"{result.partition or info.qualified_name}: {result.status}: {result.reason}")
        yield dg.MaterializeResult(metadata=unit_metadata(results), check_results=check_results(key, results))
        failed = [r for r in results if r.status == UnitStatus.FAILED]
        if failed:  # the run fails, so the sensor backs these partitions off
            raise dg.Failure(
                description=f"{len(failed)} unit(s) of {info.qualified_name} failed: "
                + "; ".join(f"{r.partition or '(table)'}: {r.reason}" for r in failed)[:4000]
            )

    return _compact
