"""Jobs: sync Hive partitions into dynamic partitions, analyze, rollback, cleanup, recover, refresh the managed
tables; the cleanup and refresh schedules."""

from typing import Any

import dagster as dg
from pydantic import Field

from lakekeeper_dagster.config import LakekeeperConfig, run_owner
from lakekeeper_dagster.engine.errors import ConfigError
from lakekeeper_dagster.engine.hive.model import TableInfo, split_table_name, validated_name, validated_partition
from lakekeeper_dagster.engine.hive.selection import resolve_tables
from lakekeeper_dagster.engine.ops.analyze import analyze_tables
from lakekeeper_dagster.engine.ops.cleanup import cleanup_backups, parse_duration
from lakekeeper_dagster.engine.ops.rollback import rollback_table
from lakekeeper_dagster.engine.plan.report import render_report
from lakekeeper_dagster.engine.protocol.history import recorded
from lakekeeper_dagster.engine.protocol.recovery import recover
from lakekeeper_dagster.surface.failures import engine_failures
from lakekeeper_dagster.surface.partitions import sync_partitions
from lakekeeper_dagster.surface.state import (
    LOCATION_NAME,
    register_pool_limits,
    reload_location,
    state_key,
    store_state,
)
from lakekeeper_dagster.surface.tables import current_units, load_managed_tables
from lakekeeper_dagster.surface.translator import HiveTableTranslator
from spark_resources.resource import HiveSparkResource

# Run config: Dagster's schema checks what it can express (types, required fields, unknown keys) in the launchpad
# before a run starts; the ops check the rest (an empty or malformed name, a duration) first thing, under
# engine_failures, before anything starts Spark, so a bad value fails the run at once with the engine's ConfigError
# message. A pydantic pattern or validator on a dg.Config would fail it with a stack trace instead. A value given
# but empty is refused (it would select everything), never read as "not given". Table names are strings, not an
# Enum of the managed tables: rollback, cleanup and recover must also reach a table this location no longer manages
# (dropped from `tables:`, or refused after a crash), and a location managing no table must still load.


class AnalyzeConfig(dg.Config):
    """Which tables the dry-run report covers; both empty: the managed tables."""

    database: str | None = Field(default=None, description="every table of this database (default: none)")
    tables: list[str] = Field(default=[], description="these DB.TABLE names; empty: the managed tables")

    def selection(self) -> tuple[str | None, list[str] | None]:
        """(database, tables) as resolve_tables takes them; ConfigError for an empty or malformed value."""
        if self.database is not None:
            validated_name(self.database, "config.database")
        for name in self.tables:
            split_table_name(name, "an entry of config.tables")
        return self.database, self.tables or None


class RollbackConfig(dg.Config):
    """What to restore; `table` has no default: a rollback always names its table."""

    table: str = Field(description="DB.TABLE to restore (required)")
    partition: str | None = Field(
        default=None, description="only this Hive partition, e.g. date=2024-01-01; default: every partition backed up"
    )
    backup: str | None = Field(default=None, description="this backup table (default: the most recent)")

    def target(self) -> tuple[str, str, str | None, str | None]:
        """(database, table, partition, backup); ConfigError for an empty or malformed value."""
        database, table = split_table_name(self.table, "config.table")
        if self.partition is not None:
            validated_partition(self.partition, "config.partition")
        if self.backup is not None:
            validated_name(self.backup, "config.backup")
        return database, table, self.partition, self.backup


class CleanupConfig(dg.Config):
    """Opens as a dry run; a real run needs an age or an explicit confirmation (it cannot be undone)."""

    table: str | None = Field(default=None, description="backups of DB.TABLE (default: every managed database's)")
    database: str | None = Field(default=None, description="every backup in this database (default: the managed ones)")
    older_than: str | None = Field(default=None, description="only backups older than this: 7d, 12h, 30m")
    delete_all_backups: bool = Field(
        default=False, description="without older_than, confirm that every matching backup goes, however recent"
    )
    skip_trash: bool = Field(default=False, description="delete for good instead of moving the files to the Trash")
    dry_run: bool = Field(default=True, description="only list what would be deleted; false deletes (irreversible)")

    def older_than_seconds(self) -> int | None:
        """The age limit; ConfigError for an empty or malformed table, database or age, or for a real run that
        names neither an age nor `delete_all_backups` (it would delete every matching backup, however recent)."""
        if self.table is not None:
            split_table_name(self.table, "config.table")
        if self.database is not None:
            validated_name(self.database, "config.database")
        older = parse_duration(self.older_than, "config.older_than") if self.older_than is not None else None
        if not self.dry_run and older is None and not self.delete_all_backups:
            raise ConfigError(
                "cleanup with dry_run: false deletes backups irreversibly: set older_than (e.g. 7d) to delete "
                "only old backups, or delete_all_backups: true to delete every matching backup. Nothing was "
                "deleted."
            )
        return older


class RecoverConfig(dg.Config):
    """Which tables' journals to settle; both empty: the managed tables."""

    table: str | None = Field(default=None, description="DB.TABLE; default: the managed tables")
    database: str | None = Field(default=None, description="every table of this database (default: none)")

    def selection(self) -> tuple[str | None, list[str] | None]:
        """(database, tables) as resolve_tables takes them; ConfigError for an empty or malformed value."""
        if self.database is not None:
            validated_name(self.database, "config.database")
        if self.table is None:
            return self.database, None
        split_table_name(self.table, "config.table")
        return self.database, [self.table]


class RefreshConfig(dg.Config):
    """Where the webserver that reloads the code location after the refresh answers."""

    webserver: str = Field(
        default="http://127.0.0.1:3000", description="the Dagster webserver's URL; empty: ask none to reload"
    )


def compaction_job(info: TableInfo, translator: HiveTableTranslator) -> Any:
    """The table's named compaction job (its asset and checks, its partitions): the job the UI's Materialize button,
    a backfill and the sensor launch, so its runs are filed under the table, not under Dagster's hidden
    `__ASSET_JOB`. Dagster does not export the type of an unresolved asset job, hence `Any`."""
    return dg.define_asset_job(
        name=translator.job_name(info),
        selection=dg.AssetSelection.assets(translator.asset_key(info)),
        description=f"Compact {info.qualified_name}: each selected partition is rewritten into fewer files, verified "
        "and swapped in, its originals kept in a backup table. Run config: the asset's op config (force, "
        "sort_columns, partitions); the Spark session comes from the code location's config.",
    )


def build_jobs(
    settings: LakekeeperConfig, tables: list[TableInfo], translator: HiveTableTranslator
) -> list[dg.JobDefinition]:
    """sync_partitions_job, analyze_job, rollback_job, cleanup_job and recover_job."""
    partitioned = [t for t in tables if t.is_partitioned]

    @dg.op
    def sync_hive_partitions(context: dg.OpExecutionContext, spark: HiveSparkResource) -> None:
        """Add new Hive partitions as dynamic partitions and remove the ones gone from the metastore (a table dropped
        or changed since the location loaded is skipped with a warning, as the observation job does)."""
        with engine_failures():
            units = current_units(spark.spark_session, partitioned, context.log.warning)
        for info in partitioned:
            if info.qualified_name not in units:
                continue
            hive = [unit.partition for unit in units[info.qualified_name]]
            added, removed = sync_partitions(context.instance, translator.partitions_def_name(info), hive)
            context.log.info(f"{info.qualified_name}: {len(added)} partition(s) added, {len(removed)} removed")

    @dg.op(name="analyze_tables")
    def analyze_op(context: dg.OpExecutionContext, config: AnalyzeConfig, spark: HiveSparkResource) -> None:
        """Log the dry-run report for the selected (or managed) tables."""
        with engine_failures():
            database, names = config.selection()
            session = spark.spark_session
            pairs = resolve_tables(session, settings.tables, database, names)
            report = render_report(
                analyze_tables(session, pairs, settings.thresholds(), settings.suspend_after_failures)
            )
        context.log.info("\n" + report)

    @dg.op
    def rollback(context: dg.OpExecutionContext, config: RollbackConfig, spark: HiveSparkResource) -> None:
        """Restore the pre-compaction files from a backup (appended files are kept)."""
        with engine_failures(), recorded(settings.history_sink(context.run_id)):
            database, table, partition, backup = config.target()
            lines = rollback_table(
                spark.spark_session,
                database,
                table,
                partition,
                backup,
                run_owner(context.run_id),
                settings.non_atomic_rename_schemes_accepted,
                progress=lambda event: context.log.info(event.describe()),
            )
        context.log.info("rollback done:\n" + "\n".join(lines))

    @dg.op
    def cleanup(context: dg.OpExecutionContext, config: CleanupConfig, spark: HiveSparkResource) -> None:
        """Delete the originals kept by backups and drop them (irreversible); lists them only unless dry_run is
        false, and then only with older_than or delete_all_backups."""
        with engine_failures(), recorded(settings.history_sink(context.run_id)):
            older = config.older_than_seconds()
            named = config.database is not None or config.table is not None
            databases = [config.database] if named else settings.tables.databases
            lines = []
            for database in databases or [None]:
                lines += cleanup_backups(
                    spark.spark_session,
                    database=database,
                    table=config.table,
                    older_than_seconds=older,
                    skip_trash=config.skip_trash,
                    dry_run=config.dry_run,
                    owner=run_owner(context.run_id),
                    progress=lambda event: context.log.info(event.describe()),
                )
        context.log.info("\n".join(lines) or "no backups matched")

    @dg.op(name="recover")
    def recover_op(context: dg.OpExecutionContext, config: RecoverConfig, spark: HiveSparkResource) -> None:
        """Finish or undo compactions and rollbacks a crash interrupted."""
        with engine_failures(), recorded(settings.history_sink(context.run_id)):
            database, tables = config.selection()
            session = spark.spark_session
            pairs = resolve_tables(session, settings.tables, database, tables)
            messages = recover(session, pairs, progress=lambda event: context.log.info(event.describe()))
        context.log.info("\n".join(messages) or "nothing to recover")

    @dg.job(description="Keep each table's dynamic partitions equal to its Hive partitions.")
    def sync_partitions_job() -> None:
        sync_hive_partitions()

    @dg.job(description="Dry-run report: which tables and partitions need compaction.")
    def analyze_job() -> None:
        analyze_op()

    @dg.job(description="Restore a table (or one partition) to its pre-compaction files from a backup.")
    def rollback_job() -> None:
        rollback()

    @dg.job(description="Delete the original files kept by old backups and drop the backups. Irreversible.")
    def cleanup_job() -> None:
        cleanup()

    @dg.job(description="Finish or undo runs a crash interrupted, from their journals.")
    def recover_job() -> None:
        recover_op()

    return [sync_partitions_job, analyze_job, rollback_job, cleanup_job, recover_job]


def cleanup_schedule(cleanup_job: dg.JobDefinition) -> dg.ScheduleDefinition:
    """Nightly cleanup of backups older than 7 days in the managed databases; off until turned on."""
    return dg.ScheduleDefinition(
        name="cleanup_old_backups",
        job=cleanup_job,
        cron_schedule="0 3 * * *",
        run_config=dg.RunConfig(ops={"cleanup": CleanupConfig(older_than="7d", dry_run=False)}),
        default_status=dg.DefaultScheduleStatus.STOPPED,
    )


def build_refresh_job(settings: LakekeeperConfig, translator: HiveTableTranslator) -> dg.JobDefinition:
    """refresh_tables_job: new or dropped tables appear in the code location (see `surface/state.py`)."""

    @dg.op
    def refresh_tables(context: dg.OpExecutionContext, config: RefreshConfig, spark: HiveSparkResource) -> None:
        """Read the managed tables through the run's Spark session, store them as the code location's newest state
        in this instance, register their pools, then ask the webserver to reload the code location."""
        with engine_failures():
            managed = load_managed_tables(spark.spark_session, settings)
        version = store_state(context.instance, settings, managed)
        added = register_pool_limits(context.instance, [translator.pool(info) for info in managed.tables])
        context.log.info(
            f"{len(managed.tables)} table(s) ({len(managed.skipped)} skipped) stored as version {version} of "
            f"{state_key(settings)}; {len(added)} new pool(s) registered"
        )
        origin = context.dagster_run.remote_job_origin
        context.log.info(reload_location(config.webserver, origin.location_name if origin else LOCATION_NAME))

    @dg.job(description="Read the managed tables from the metastore and reload the code location with them.")
    def refresh_tables_job() -> None:
        refresh_tables()

    return refresh_tables_job


def refresh_schedule(refresh_job: dg.JobDefinition) -> dg.ScheduleDefinition:
    """Hourly refresh of the managed tables; off until turned on."""
    return dg.ScheduleDefinition(
        name="refresh_tables_schedule",
        job=refresh_job,
        cron_schedule="15 * * * *",
        default_status=dg.DefaultScheduleStatus.STOPPED,
    )
