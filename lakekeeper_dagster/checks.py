"""The independent re-count: live partitions against the originals their most recent backup kept."""

import dagster as dg

from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.ops.audit import verify_against_backup
from lakekeeper_dagster.failures import engine_failures
from lakekeeper_dagster.figures import backup_check_metadata
from lakekeeper_dagster.translator import HiveTableTranslator
from spark_resources.resource import HiveSparkResource

LIVE_MATCHES_BACKUP = "live_matches_backup"


def build_backup_check(info: TableInfo, translator: HiveTableTranslator) -> dg.AssetChecksDefinition:
    """The table's `live_matches_backup` check."""

    @dg.asset_check(
        asset=translator.asset_key(info),
        name=LIVE_MATCHES_BACKUP,
        description="Re-reads every partition of the most recent backup and the live partition: the originals (the "
        "files the backup kept, plus the large files the compaction left in place) and the live files hold the same "
        "rows, same content checksum (catches anything that changed the rewritten files or the originals after the "
        "compaction).",
    )
    def _check(spark: HiveSparkResource) -> dg.AssetCheckResult:
        with engine_failures():
            comparisons = verify_against_backup(spark.spark_session, info.database, info.name)
        return dg.AssetCheckResult(
            passed=all(c.matches for c in comparisons), metadata=backup_check_metadata(comparisons)
        )

    return _check
