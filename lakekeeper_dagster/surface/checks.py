"""The independent re-counts: live partitions against the originals their most recent backup kept, and merged
partitions against the figures their merge verified."""

from collections.abc import Iterable, Iterator, Sequence

import dagster as dg

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.ops.audit import verify_against_backup
from lakekeeper_dagster.engine.ops.merge import PeriodCopy
from lakekeeper_dagster.engine.ops.merge_audit import verify_merged
from lakekeeper_dagster.surface.assets import CHECKSUM, ROW_COUNT
from lakekeeper_dagster.surface.failures import engine_failures
from lakekeeper_dagster.surface.figures import backup_check_metadata, copy_check_metadata
from lakekeeper_dagster.surface.translator import HiveTableTranslator
from spark_resources.resource import HiveSparkResource

LIVE_MATCHES_BACKUP = "live_matches_backup"


def build_backup_check(info: TableInfo, translator: HiveTableTranslator) -> dg.AssetChecksDefinition:
    """The table's `live_matches_backup` check."""

    key = translator.asset_key(info)

    @dg.multi_asset_check(  # the op named by the translator: apart for tables whose keys flatten alike
        name=f"{translator.op_name(info)}_{LIVE_MATCHES_BACKUP}",
        specs=[
            dg.AssetCheckSpec(
                LIVE_MATCHES_BACKUP,
                asset=key,
                description="Re-reads every partition of the most recent backup and the live partition: the "
                "originals (the files the backup kept, plus the large files the compaction left in place) and the "
                "live files hold the same rows, same content checksum (catches anything that changed the rewritten "
                "files or the originals after the compaction).",
            )
        ],
    )
    def _check(spark: HiveSparkResource) -> dg.AssetCheckResult:
        with engine_failures():
            comparisons = verify_against_backup(spark.spark_session, info.database, info.name)
        return dg.AssetCheckResult(
            asset_key=key,
            check_name=LIVE_MATCHES_BACKUP,
            passed=all(c.matches for c in comparisons),
            metadata=backup_check_metadata(comparisons),
        )

    return _check


def copy_checks(key: dg.AssetKey, copies: Sequence[PeriodCopy]) -> list[dg.AssetCheckResult]:
    """A merged table's `row_count_preserved` and `content_checksum_matches` over its partitions' copies."""
    return [
        dg.AssetCheckResult(
            asset_key=key,
            check_name=ROW_COUNT,
            passed=all(c.before.rows == c.after.rows for c in copies),
            metadata=copy_check_metadata(copies, "rows"),
        ),
        dg.AssetCheckResult(
            asset_key=key,
            check_name=CHECKSUM,
            passed=all(c.before.checksum == c.after.checksum for c in copies),
            metadata=copy_check_metadata(copies, "checksum"),
        ),
    ]


def build_merge_check(
    info: TableInfo, settings: LakekeeperConfig, translator: HiveTableTranslator
) -> dg.AssetChecksDefinition | None:
    """The checks of the table's merged table, when its merge policy gives it one: evaluated by each `merge_job` run
    on the copies it verified; executed alone, they re-read each merged partition against the rows and checksum
    the history records its merge verified."""
    keys = translator.merge_keys(info)
    if keys is None:
        return None
    key = keys[0]
    policies = settings.policies_for(info.database, info.name)

    @dg.multi_asset_check(
        name=f"{translator.op_name(info)}__merged_checks",
        specs=[
            dg.AssetCheckSpec(ROW_COUNT, asset=key, description="each merged partition holds its fine files' rows"),
            dg.AssetCheckSpec(CHECKSUM, asset=key, description="and their order-insensitive content checksum"),
        ],
    )
    def _check(spark: HiveSparkResource) -> Iterator[dg.AssetCheckResult]:
        with engine_failures():
            copies = verify_merged(spark.spark_session, info.database, info.name, policies, settings.history.table)
        yield from copy_checks(key, copies)

    return _check


def log_check_evaluations(
    context: dg.OpExecutionContext, key: dg.AssetKey, results: Iterable[dg.AssetCheckResult]
) -> None:
    """Log check results computed by a job's op (not the checks' own) as evaluations on `key`: the one conversion,
    passed, metadata and severity kept."""
    for check in results:
        evaluation = dg.AssetCheckEvaluation(
            asset_key=key,
            check_name=check.check_name,
            passed=check.passed,
            metadata=check.metadata,
            severity=check.severity,
        )
        context.log_event(evaluation)
