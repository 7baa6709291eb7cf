"""archive_job: cold archive of one table (`engine/ops/archive.py`) from the launchpad, a dry run unless told
otherwise, and its schedule (off until turned on).

A real run's op output metadata says what was recompressed (partitions, files, bytes and rows before/after, the
per-partition table). On a managed table it also records, on the table's asset, a materialization of each archived
partition and the evaluations of the table's verification checks (`row_count_preserved`, `content_checksum_matches`,
`files_within_target`), logged from the op as `dg.AssetCheckEvaluation`s: the checks belong to the table's compaction
asset, and an op job cannot declare another asset's checks as its own through Dagster's public API (an op that
yields an `AssetCheckResult` for a check its job does not plan fails), while a logged evaluation lands in the same
check's history."""

from typing import ClassVar

import dagster as dg
from pydantic import Field

from lakekeeper_dagster.config import LakekeeperConfig, run_owner
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.ops.archive import archive_table, plan_archive
from lakekeeper_dagster.engine.ops.options import ArchiveRule, UnitResult
from lakekeeper_dagster.engine.protocol.history import recorded
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster.surface.assets import check_results
from lakekeeper_dagster.surface.checks import log_check_evaluations
from lakekeeper_dagster.surface.failures import engine_failures, fail_on_failed_units
from lakekeeper_dagster.surface.figures import history_metadata, unit_metadata
from lakekeeper_dagster.surface.jobs.policy import PolicyConfig
from lakekeeper_dagster.surface.metadata import OPERATION
from lakekeeper_dagster.surface.translator import HiveTableTranslator
from spark_resources.resource import HiveSparkResource

ARCHIVE_JOB = "archive_job"


class ArchiveConfig(PolicyConfig):
    """The dry run lists the archive-aged partitions and their codecs; a real run recompresses them. `table` has no
    default: an archive always names its table (a required field, unlike retention's and merge's)."""

    POLICY = "archive"
    CRON = "0 4 1 * *"  # monthly
    FLAGS: ClassVar[tuple[str, str]] = ("config.older_than", "config.codec")  # what the rule's errors name

    table: str = Field(description="DB.TABLE to archive (required)")
    codec: str | None = Field(
        default=None, description="the archive codec (gzip, zstd...); default: table_overrides.<db.table>.archive.codec"
    )

    def rule(self, settings: LakekeeperConfig, database: str, table: str) -> ArchiveRule:
        """The table's archive rule; ConfigError naming the config or policy key for an empty, bad or differing
        value (`LakekeeperConfig.archive_rule`)."""
        return settings.archive_rule(database, table, self.older_than, self.codec, self.FLAGS)

    def check_target(self, settings: LakekeeperConfig, database: str, table: str) -> None:
        """ConfigError for a table without the partition time, age or codec its archive needs."""
        self.rule(settings, database, table)


def archive_metadata(results: list[UnitResult], rule: ArchiveRule) -> dict:
    """What the run recompressed: the compaction figures (`unit_metadata`), bytes as numbers, codec and cutoff."""
    archived = [r for r in results if r.status == UnitStatus.COMPACTED]
    return {
        **unit_metadata(results),
        OPERATION: "archive",
        "codec": rule.codec,
        "cutoff": f"{rule.cutoff:%Y-%m-%d %H:%M} UTC",
        "partitions_archived": len(archived),
        "archived": ", ".join(r.partition or "" for r in archived),
        "bytes_before": sum(r.bytes_before for r in archived),
        "bytes_after": sum(r.bytes_after for r in archived),
    }


def _record(context: dg.OpExecutionContext, key: dg.AssetKey, results: list[UnitResult], rule: ArchiveRule) -> None:
    """On the table's asset: each archived partition's materialization, then the verification checks' evaluations."""
    for result in (r for r in results if r.status == UnitStatus.COMPACTED):
        metadata = {**unit_metadata([result]), OPERATION: "archive", "codec": rule.codec}
        context.log_event(dg.AssetMaterialization(asset_key=key, partition=result.partition, metadata=metadata))
    if any(r.status in (UnitStatus.COMPACTED, UnitStatus.FAILED) for r in results):  # something was verified
        log_check_evaluations(context, key, check_results(key, results))


def build_archive_job(
    settings: LakekeeperConfig, tables: list[TableInfo], translator: HiveTableTranslator
) -> dg.JobDefinition:
    """archive_job: the dry run or the archive of one table; its figures and checks on the table's asset."""
    keys = {info.qualified_name: translator.asset_key(info) for info in tables}

    @dg.op(name="archive")
    def archive(context: dg.OpExecutionContext, config: ArchiveConfig, spark: HiveSparkResource) -> None:
        """Recompress the table's partitions older than the age with the archive codec (compacting them), or, as a
        dry run, list them with their end, files, bytes and codecs."""
        with engine_failures(), recorded(settings.history_sink(context.run_id)):
            ((database, table),) = config.targets(settings)
            rule = config.rule(settings, database, table)
            session = spark.spark_session
            if config.dry_run:
                plan = plan_archive(session, database, table, rule)
                context.log.info("\n".join([*plan.lines(), "dry run: nothing was changed"]))
                todo = [c for c in plan.candidates if c.recompress]
                context.add_output_metadata(
                    {
                        OPERATION: "archive (dry run)",
                        "codec": plan.rule.codec,
                        "partitions_to_archive": len(todo),
                        "bytes_to_archive": sum(c.bytes for c in todo),
                        "report": "\n".join(plan.lines()),
                    }
                )
                return
            options = settings.compaction_options(database, table, owner=run_owner(context.run_id))
            rule, results = archive_table(
                session, database, table, options, rule, lambda event: context.log.info(event.describe())
            )
        for result in results:
            context.log.info(f"{result.partition}: {result.status}: {result.reason}")
        context.add_output_metadata(archive_metadata(results, rule) | history_metadata(settings.history.table, results))
        key = keys.get(f"{database}.{table}")
        if key is not None:
            _record(context, key, results, rule)
        fail_on_failed_units(results, f"partition(s) of {database}.{table} failed to archive")

    @dg.job(
        name=ARCHIVE_JOB,
        description="Cold archive: rewrite a table's old partitions with a heavier codec, safely (backup, "
        "verification, swap; rollback possible). Opens as a dry run.",
    )
    def archive_job() -> None:
        archive()

    return archive_job
