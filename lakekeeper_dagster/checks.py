"""The independent re-count: live partitions against the originals their most recent backup kept."""

import dagster as dg

from lakekeeper_dagster.assets import asset_key
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.ops.audit import verify_against_backup
from spark_resources.resource import HiveSparkResource

LIVE_MATCHES_BACKUP = "live_matches_backup"


def build_backup_check(info: TableInfo) -> dg.AssetChecksDefinition:
    @dg.asset_check(
        asset=asset_key(info.database, info.name),
        name=LIVE_MATCHES_BACKUP,
        description="Re-reads every partition of the most recent backup and the live partition: same rows, same "
        "content checksum (catches anything that changed either after the compaction).",
    )
    def _check(spark: HiveSparkResource) -> dg.AssetCheckResult:
        comparisons = verify_against_backup(spark.spark_session, info.database, info.name)
        figures = {
            c.partition or "(table)": {"live_rows": c.live_rows, "backup_rows": c.backup_rows, "matches": c.matches}
            for c in comparisons
        }
        return dg.AssetCheckResult(
            passed=all(c.matches for c in comparisons),
            metadata={
                "backup_table": comparisons[0].backup_table if comparisons else "(no backup)",
                "partitions_compared": len(comparisons),
                "mismatches": sum(not c.matches for c in comparisons),
                "figures": dg.MetadataValue.json(figures),
            },
        )

    return _check
