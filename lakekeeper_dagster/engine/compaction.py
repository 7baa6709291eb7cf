"""Compaction of Hive external tables: plan, execute into temporary places, verify, then commit by a swap.

Per unit (a partition, or a whole unpartitioned table), under the table's lease and with every step journaled:
snapshot the data files -> write them, read with the table's schema, into a hidden staging sibling (input
fingerprint observed in the same pass) -> verify the staged output (rows and content checksum) -> register the
zero-copy backup -> re-list (the snapshot must be intact) -> swap directories, carrying late files over -> point the
backup at the retired originals, refresh caches and statistics.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine import backup as backups
from lakekeeper_dagster.engine.catalog import find_partitions, list_partitions, read_table
from lakekeeper_dagster.engine.commit import commit_unit, finish_run
from lakekeeper_dagster.engine.errors import CompactionError
from lakekeeper_dagster.engine.faults import kill_point, wants
from lakekeeper_dagster.engine.fingerprint import Fingerprint, fingerprint, from_observation, observed
from lakekeeper_dagster.engine.journal import (
    BACKED_UP,
    COMPACT,
    FAILED,
    SWAPPING,
    WRITTEN,
    Journal,
    UnitRecord,
    journal_root,
    new_run_id,
    sibling,
    state_dir,
)
from lakekeeper_dagster.engine.lease import TableLease
from lakekeeper_dagster.engine.model import PartitionInfo, TableInfo
from lakekeeper_dagster.engine.planning import PartitionPlan, Thresholds, plan_unit
from lakekeeper_dagster.engine.recovery import recover_table, refuse_leftovers
from lakekeeper_dagster.engine.session_conf import session_conf
from lakekeeper_dagster.engine.storage import DataFile, DirStats, Storage, StorageError, child, is_hidden

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

COMPACTABLE_FORMATS = ("parquet", "orc")
COMPACTED = "compacted"
SKIPPED = "skipped"
FAILED_STATUS = "failed"


@dataclass(frozen=True)
class CompactionOptions:
    thresholds: Thresholds
    sort_columns: tuple[str, ...] = ()
    analyze_stats: bool = False
    force: bool = False
    backup_prefix: str = "__bkp"
    owner: str = ""


@dataclass
class UnitResult:
    """What happened to one partition (or unpartitioned table)."""

    database: str
    table: str
    partition: str | None
    location: str
    status: str
    reason: str
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    rows_before: int | None = None
    rows_after: int | None = None
    checksum_before: str | None = None
    checksum_after: str | None = None
    target_files: int = 0
    seconds: float = 0.0
    backup_table: str | None = None
    carried_files: int = 0
    run_id: str | None = None

    @property
    def row_count_preserved(self) -> bool:
        return self.rows_before is not None and self.rows_before == self.rows_after

    @property
    def checksum_matches(self) -> bool:
        return self.checksum_before is not None and self.checksum_before == self.checksum_after

    def to_dict(self) -> dict:
        data = dict(self.__dict__)
        data["row_count_preserved"] = self.row_count_preserved
        data["checksum_matches"] = self.checksum_matches
        return data


class UnitFailure(Exception):
    """A unit could not be compacted; the live data is untouched."""


def java_cause(error: BaseException) -> str:
    """The most telling message of a Spark/py4j error (Spark's `[ERROR_CLASS] ...` where there is one)."""
    messages = []
    java = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    while java is not None and len(messages) < 20:
        message = java.getMessage()
        if message:
            messages.append(str(message))
        java = java.getCause()
    messages.append(str(error))
    best = next((m for m in messages if m.startswith("[")), messages[-1 if len(messages) == 1 else 0])
    return " ".join(best.split())[:600]


def data_schema(info: TableInfo) -> StructType:
    """The table's columns (not its partition columns), as the metastore defines them."""
    from pyspark.sql.types import StructType

    schema = StructType.fromJson(json.loads(info.schema_json))
    return StructType([f for f in schema.fields if f.name not in info.partition_columns])


def resolve_sort_columns(info: TableInfo, requested: tuple[str, ...]) -> tuple[str, ...]:
    """Sort columns to apply: the requested ones, else the table's SORTED BY; partition columns are dropped."""
    columns = tuple(requested) or info.sort_columns
    data = {c.name.lower() for c in info.data_columns}
    partition = {c.lower() for c in info.partition_columns}
    unknown = [c for c in columns if c.lower() not in data | partition]
    if unknown:
        raise CompactionError(
            f"sort column(s) {', '.join(unknown)} are not columns of {info.qualified_name} "
            f"(columns: {', '.join(sorted(data))}); fix sort_columns / --sort-columns"
        )
    dropped = [c for c in columns if c.lower() in partition]
    if dropped:
        log.info(
            "%s: partition column(s) %s are constant within a partition; not sorting by them",
            info.qualified_name,
            ", ".join(dropped),
        )
    return tuple(c for c in columns if c.lower() not in partition)


def normalize_codec(codec: str) -> str:
    codec = codec.strip().lower()
    return {"none": "none", "uncompressed": "uncompressed"}.get(codec, codec)


def existing_codec(spark: SparkSession, info: TableInfo, file: DataFile) -> str:
    """The codec of an existing data file, read from its footer (Parquet) or postscript (ORC)."""
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(file.path)
    if info.file_format == "parquet":
        reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(
            jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(path, conf)
        )
        try:
            blocks = reader.getFooter().getBlocks()
            if blocks.isEmpty() or blocks.get(0).getColumns().isEmpty():
                return "snappy"
            return str(blocks.get(0).getColumns().get(0).getCodec().name()).lower()
        finally:
            reader.close()
    reader = jvm.org.apache.orc.OrcFile.createReader(path, jvm.org.apache.orc.OrcFile.readerOptions(conf))
    try:
        return str(reader.getCompressionKind().name()).lower()
    finally:
        reader.close()


def choose_codec(spark: SparkSession, info: TableInfo, files: list[DataFile]) -> str:
    """TBLPROPERTIES' codec, else the codec the existing files use."""
    if info.codec_property:
        return normalize_codec(info.codec_property)
    return existing_codec(spark, info, files[0])


@dataclass
class _Run:
    """Everything one compaction run shares across its units."""

    spark: SparkSession
    storage: Storage
    info: TableInfo
    options: CompactionOptions
    schema: StructType
    sort_columns: tuple[str, ...]
    journal: Journal
    lease: TableLease

    def ensure_backup(self) -> str:
        if self.journal.backup_table is None:
            name = backups.backup_name(self.options.backup_prefix, self.info.name, self.journal.run_id)
            self.journal.record(self.storage, "backup", backup_table=name)
            backups.create_backup(self.spark, self.info, name, self.journal.run_id, self.journal.directory)
        return self.journal.backup_table

    @property
    def backup_sql_name(self) -> str:
        return backups.table_sql(self.info.database, self.journal.backup_table)


def read_files(spark: SparkSession, info: TableInfo, schema: StructType, paths: list[str]) -> DataFrame:
    """Exactly these data files, read with the table's schema (columns missing from old files come out null)."""
    return spark.read.schema(schema).format(info.file_format).load(paths)


# Parquet as Hive's readers expect it: decimals as fixed-length binaries, lists and maps in the legacy layout.
HIVE_COMPATIBLE_WRITES = {"spark.sql.parquet.writeLegacyFormat": "true"}


def _arrange(df: DataFrame, sort_columns: tuple[str, ...], target: int) -> DataFrame:
    if sort_columns:
        return df.repartitionByRange(target, *sort_columns).sortWithinPartitions(*sort_columns)
    return df.coalesce(target)


def _write_unit(run: _Run, index: int, unit: UnitRecord, files: list[DataFile]) -> tuple[Fingerprint, Fingerprint]:
    """Write the compacted unit into its staging directory and fingerprint input and output."""
    codec = choose_codec(run.spark, run.info, files)
    df, observation = observed(read_files(run.spark, run.info, run.schema, [f.path for f in files]), f"in-{index}")
    writer = _arrange(df, run.sort_columns, unit.target_files).write.mode("errorifexists")
    with session_conf(run.spark, HIVE_COMPATIBLE_WRITES):
        writer.format(run.info.file_format).option("compression", codec).save(unit.incoming)
    run.storage.delete(child(unit.incoming, "_SUCCESS"))
    if wants("drop-staged-file"):
        run.storage.delete(run.storage.list_data_files(unit.incoming)[0].path)
    before = from_observation(observation)
    after = fingerprint(read_files(run.spark, run.info, run.schema, [unit.incoming]))
    return before, after


def _compact_unit(run: _Run, index: int, plan: PartitionPlan, files: list[DataFile]) -> UnitResult:
    started = time.monotonic()
    storage, journal, unit = run.storage, run.journal, run.journal.units[index]
    result = UnitResult(
        run.info.database,
        run.info.name,
        plan.partition,
        plan.location,
        FAILED_STATUS,
        plan.reason,
        files_before=len(files),
        bytes_before=sum(f.size for f in files),
        target_files=plan.target_files,
        run_id=journal.run_id,
    )
    label = f"{run.info.qualified_name}" + (f" partition {plan.partition}" if plan.partition else "")
    try:
        _refuse_subdirectories(storage, unit, label)
        try:
            before, after = _write_unit(run, index, unit, files)
        except Exception as error:
            storage.delete(unit.incoming)
            raise UnitFailure(
                f"{label}: could not read or write its data ({java_cause(error)}); the original files are untouched. "
                "Check the files of this partition (a corrupt or unreadable file?) and retry."
            ) from None
        output = storage.list_data_files(unit.incoming)
        result.rows_before, result.checksum_before = before.rows, before.checksum
        result.rows_after, result.checksum_after = after.rows, after.checksum
        result.files_after, result.bytes_after = len(output), sum(f.size for f in output)
        journal.record(
            storage,
            WRITTEN,
            index,
            input=before.to_dict(),
            output=after.to_dict(),
            output_files=[f.name for f in output],
        )
        kill_point(WRITTEN)
        if before != after:
            storage.delete(unit.incoming)
            raise UnitFailure(
                f"{label}: verification failed: input {before.rows} rows / checksum {before.checksum}, "
                f"output {after.rows} rows / checksum {after.checksum}; the output was deleted and the original "
                "files are untouched"
            )
        backup = run.ensure_backup()
        result.backup_table = backup
        if unit.spec:
            backups.add_partition(run.spark, run.backup_sql_name, unit.spec, unit.live)
        journal.record(storage, BACKED_UP, index)
        kill_point(BACKED_UP)
        _wait_for_writers(storage, unit, label)
        _refuse_subdirectories(storage, unit, label)
        _check_snapshot_intact(storage, unit, files, label)
        run.lease.ensure_held(f"the swap of {label}")
        journal.record(storage, SWAPPING, index)
        kill_point(SWAPPING)
        try:
            commit_unit(run.spark, storage, run.info, journal, index, run.options.analyze_stats)
        except Exception as error:
            raise CompactionError(
                f"{label}: the swap was interrupted ({java_cause(error)}). Its journal holds every step: run "
                f"`lakekeeper-dagster recover --table {run.info.qualified_name}` (the next compaction does too)."
            ) from error
        result.carried_files = int(unit.details.get("carried", 0))
        result.status, result.reason = COMPACTED, plan.reason
    except UnitFailure as failure:
        result.reason = str(failure)
        _undo_backup_registration(run, unit)
        journal.record(storage, FAILED, index, error=str(failure))
        log.error("%s", failure)
    result.seconds = round(time.monotonic() - started, 3)
    return result


def _wait_for_writers(storage: Storage, unit: UnitRecord, label: str, timeout: float = 30.0) -> None:
    """A writer committing straight into the directory keeps its work in hidden subdirectories (`_temporary`,
    `.spark-staging-*`): swapping under it would strand its output, so wait for it to finish, or give up cleanly."""
    deadline = time.monotonic() + timeout
    while True:
        busy = [n for n in storage.list_names(unit.live, directories=True) if is_hidden(n)]
        if not busy:
            return
        if time.monotonic() > deadline:
            storage.delete(unit.incoming)
            raise UnitFailure(
                f"{label}: a write into it is in progress ({', '.join(busy)}) and did not finish within "
                f"{timeout:.0f}s. Nothing was changed; retry when the writer is done."
            )
        time.sleep(0.5)


def _refuse_subdirectories(storage: Storage, unit: UnitRecord, label: str) -> None:
    """Data in subdirectories (e.g. Hive's HIVE_UNION_SUBDIR_1) would move with the swap and never come back."""
    nested = [n for n in storage.list_names(unit.live, directories=True) if not is_hidden(n)]
    if nested:
        storage.delete(unit.incoming)
        raise UnitFailure(
            f"{label}: its directory holds subdirectories ({', '.join(nested[:3])}) whose files this compaction would "
            "not rewrite; nothing was changed. Move their files up into the partition directory first."
        )


def _check_snapshot_intact(storage: Storage, unit: UnitRecord, files: list[DataFile], label: str) -> None:
    """Re-list right before the swap: every snapshot file must still be there, unchanged."""
    now = {f.name: f.size for f in storage.list_data_files(unit.live)}
    changed = [f.path for f in files if now.get(f.name) != f.size]
    if changed:
        storage.delete(unit.incoming)
        raise UnitFailure(
            f"{label}: {len(changed)} of its files were removed or rewritten during compaction (e.g. {changed[0]}); "
            "another job overwrote it. Nothing was changed; retry when that job is done."
        )


def _undo_backup_registration(run: _Run, unit: UnitRecord) -> None:
    if run.journal.backup_table and unit.spec and unit.state == BACKED_UP:
        backups.drop_partition(run.spark, run.backup_sql_name, unit.spec)


def _targets(spark: SparkSession, info: TableInfo, partitions: list[str] | None) -> list[PartitionInfo | None]:
    if not info.is_partitioned:
        if partitions:
            raise CompactionError(f"table {info.qualified_name} is not partitioned; do not pass a partition")
        return [None]
    if partitions:
        return find_partitions(spark, info, partitions)
    return list_partitions(spark, info)


def _select(plan: PartitionPlan, force: bool) -> str | None:
    """None when the unit is to be compacted, else why it is skipped."""
    if plan.needs_compaction:
        return None
    if force and plan.file_count > max(1, plan.target_files):
        return None
    return plan.reason


def refusal(info: TableInfo) -> str | None:
    """Why the engine will not compact this table, or None."""
    reason = info.skip_reason()
    if reason is None and info.file_format not in COMPACTABLE_FORMATS:
        reason = f"{info.file_format} tables cannot be compacted yet (supported: {', '.join(COMPACTABLE_FORMATS)})"
    return reason


def load_compactable(spark: SparkSession, database: str, table: str) -> TableInfo:
    """The table's metadata, or a clear refusal when it cannot be compacted."""
    info = read_table(spark, database, table)
    reason = refusal(info)
    if reason:
        raise CompactionError(f"table {info.qualified_name} cannot be compacted: {reason}")
    return info


def compact_table(
    spark: SparkSession,
    database: str,
    table: str,
    options: CompactionOptions,
    partitions: list[str] | None = None,
) -> list[UnitResult]:
    """Compact the partitions of a table that need it (or the named ones); one result per unit."""
    info = load_compactable(spark, database, table)
    storage = Storage(spark)
    unreachable = CompactionError(
        f"table {info.qualified_name}: its location {info.location} is not reachable; check the path and "
        "your permissions"
    )
    if not storage.exists(info.location) and not storage.exists(journal_root(info.location)):
        raise unreachable
    sort_columns = resolve_sort_columns(info, options.sort_columns)
    targets = _targets(spark, info, partitions)
    run_id = new_run_id()
    with TableLease(storage, state_dir(info.location), info.qualified_name, run_id, options.owner) as lease:
        recover_table(spark, storage, info)  # a crashed run may have left the location mid-swap
        if not storage.exists(info.location):
            raise unreachable
        refuse_leftovers(storage, info, [t.location if t else info.location for t in targets])
        results: list[UnitResult] = []
        work: list[tuple[PartitionPlan, list[DataFile], dict | None]] = []
        for target in targets:
            location = target.location if target else info.location
            name = target.name if target else None
            try:
                files = storage.list_data_files(location)
            except StorageError:
                results.append(UnitResult(database, table, name, location, SKIPPED, f"location {location} is missing"))
                continue
            stats = DirStats.of(location, files)
            plan = plan_unit(
                name, location, stats.file_count, stats.total_bytes, stats.median_bytes, options.thresholds
            )
            skip = _select(plan, options.force)
            if skip is not None:
                results.append(
                    UnitResult(
                        database,
                        table,
                        name,
                        location,
                        SKIPPED,
                        skip,
                        files_before=len(files),
                        files_after=len(files),
                        bytes_before=plan.total_bytes,
                        bytes_after=plan.total_bytes,
                        target_files=plan.target_files,
                    )
                )
                continue
            work.append((plan, files, target.spec if target else None))
        if not work:
            return results
        units = [
            UnitRecord(
                partition=plan.partition,
                spec=spec,
                live=plan.location,
                incoming=sibling(plan.location, "staging", run_id),
                retired=sibling(plan.location, "old", run_id),
                known=[f.name for f in files],
                target_files=plan.target_files,
            )
            for plan, files, spec in work
        ]
        journal = Journal.new(info.location, info.database, info.name, run_id, COMPACT, options.owner, units)
        journal.start(storage)
        run = _Run(spark, storage, info, options, data_schema(info), sort_columns, journal, lease)
        for index, (plan, files, _spec) in enumerate(work):
            results.append(_compact_unit(run, index, plan, files))
        finish_run(spark, storage, info, journal)
    return results
