"""One asset per managed Hive table; materializing a partition compacts it with the engine."""

import dagster as dg
from pydantic import Field

from lakekeeper_dagster.engine.config import LakekeeperConfig
from lakekeeper_dagster.engine.errors import OperationError
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.ops.analyze import batching_from, thresholds_from
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.options import CompactionOptions, UnitResult
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster.partitions import partitions_def_for
from spark_resources.resource import HiveSparkResource

ROW_COUNT = "row_count_preserved"
CHECKSUM = "content_checksum_matches"
WITHIN_TARGET = "files_within_target"
FORCE_TAG = "lakekeeper/force"


class CompactConfig(dg.Config):
    """Launchpad settings of a compaction run."""

    force: bool = False
    sort_columns: list[str] = []
    partitions: list[str] = Field(
        default=[], description="only these partitions of the run (the sensor's request); empty: all of them"
    )


def asset_key(database: str, table: str) -> dg.AssetKey:
    return dg.AssetKey(["hive", database, table])


def pool_name(info: TableInfo) -> str:
    """The concurrency pool of a table: runs compacting the same table queue behind each other."""
    return f"lakekeeper/{info.database}.{info.name}"


def table_metadata(info: TableInfo) -> dict:
    return {
        "location": dg.MetadataValue.path(info.location or ""),
        "format": info.file_format,
        "codec": info.codec_property or "(from the files)",
        "partition_columns": ", ".join(info.partition_columns) or "(none)",
        "dagster/column_schema": dg.TableSchema(
            columns=[dg.TableColumn(c.name, c.type) for c in info.columns if c.name not in info.partition_columns]
        ),
    }


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
        metadata["dagster/row_count"] = metadata["rows"]
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


def build_table_asset(info: TableInfo, settings: LakekeeperConfig) -> dg.AssetsDefinition:
    """The software-defined asset of one Hive table."""
    key = asset_key(info.database, info.name)
    partitions_def = partitions_def_for(info)

    @dg.asset(
        key=key,
        group_name=info.database,
        description=f"Hive external table {info.qualified_name} ({info.file_format}). Materializing a partition "
        "compacts its small files safely (backup, verify, journaled swap).",
        kinds={"spark", "hive", info.file_format},
        owners=settings.asset_owners or None,
        tags=settings.asset_tags or None,
        metadata=table_metadata(info),
        partitions_def=partitions_def,
        backfill_policy=dg.BackfillPolicy.single_run() if partitions_def else None,
        pool=pool_name(info),
        check_specs=[
            dg.AssetCheckSpec(ROW_COUNT, asset=key, blocking=True, description="rows out == rows in, per partition"),
            dg.AssetCheckSpec(CHECKSUM, asset=key, description="order-insensitive content checksum out == in"),
            dg.AssetCheckSpec(WITHIN_TARGET, asset=key, description="no more files than the plan's target"),
        ],
    )
    def _compact(context: dg.AssetExecutionContext, spark: HiveSparkResource, config: CompactConfig):
        options = CompactionOptions(
            thresholds=thresholds_from(settings),
            sort_columns=tuple(config.sort_columns or settings.sort_columns_for(info.database, info.name)),
            analyze_stats=settings.analyze_after_compaction,
            force=config.force or context.run.tags.get(FORCE_TAG) == "true",
            backup_prefix=settings.backup_prefix,
            owner=f"dagster run {context.run_id}",
            batching=batching_from(settings),
        )
        keys = run_units(context, config, info) if partitions_def else None
        try:
            results = compact_table(spark.spark_session, info.database, info.name, options, keys)
        except OperationError as error:
            raise dg.Failure(description=str(error)) from None
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
