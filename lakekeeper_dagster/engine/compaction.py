"""Compaction of Hive external tables: plan, execute into temporary places, verify, then commit by a swap.

Units (partitions, or a whole unpartitioned table) go through the protocol in batches, under the table's lease and
with every step journaled: snapshot the data files -> write each unit, read with the table's schema, into a hidden
staging sibling (input fingerprint observed in the same pass; several units' Spark jobs at once) -> verify every
staged output (rows and content checksum) in one Spark job -> register the originals in the zero-copy backup (one
statement) -> per unit: re-list (the snapshot must be intact) and swap directories, carrying late files over -> point
the backup at the retired originals (one metastore call), refresh caches and statistics, mark the batch committed.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine import backup as backups
from lakekeeper_dagster.engine.catalog import find_partitions, list_partitions, read_table
from lakekeeper_dagster.engine.commit import commit_swapped, finish_run, swap_unit
from lakekeeper_dagster.engine.errors import CompactionError
from lakekeeper_dagster.engine.faults import kill_point, wants
from lakekeeper_dagster.engine.fingerprint import (
    Fingerprint,
    combine,
    fingerprints_by_file,
    from_observation,
    observed,
)
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
from lakekeeper_dagster.engine.planning import Batching, PartitionPlan, Thresholds, batches, plan_unit
from lakekeeper_dagster.engine.recovery import recover_table, refuse_leftovers
from lakekeeper_dagster.engine.session_conf import session_conf
from lakekeeper_dagster.engine.storage import DataFile, DirEntries, DirStats, Storage, StorageError, child, is_hidden

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
    batching: Batching = Batching()


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

    def label(self, unit: UnitRecord) -> str:
        return self.info.qualified_name + (f" partition {unit.partition}" if unit.partition else "")


@dataclass
class _Item:
    """One unit of a batch on its way through the protocol."""

    index: int
    plan: PartitionPlan
    snapshot: DirEntries
    result: UnitResult
    before: Fingerprint | None = None
    failure: str | None = None


def read_files(spark: SparkSession, info: TableInfo, schema: StructType, paths: list[str]) -> DataFrame:
    """Exactly these data files, read with the table's schema (columns missing from old files come out null)."""
    return spark.read.schema(schema).format(info.file_format).load(paths)


# Parquet as Hive's readers expect it: decimals as fixed-length binaries, lists and maps in the legacy layout.
HIVE_COMPATIBLE_WRITES = {"spark.sql.parquet.writeLegacyFormat": "true"}


def _arrange(df: DataFrame, sort_columns: tuple[str, ...], target: int) -> DataFrame:
    if sort_columns:
        return df.repartitionByRange(target, *sort_columns).sortWithinPartitions(*sort_columns)
    return df.coalesce(target)


def _write_unit(run: _Run, item: _Item) -> None:
    """Write one compacted unit into its staging directory, its input fingerprint observed in the same pass.

    Runs in a worker thread (several units' Spark jobs at once); a failure is kept on the item, never raised.
    """
    unit = run.journal.units[item.index]
    try:
        _refuse_subdirectories(item.snapshot.directories, run.label(unit))
        codec = choose_codec(run.spark, run.info, item.snapshot.files)
        df, observation = observed(
            read_files(run.spark, run.info, run.schema, [f.path for f in item.snapshot.files]),
            f"lk-in-{run.journal.run_id}-{item.index}",
        )
        writer = _arrange(df, run.sort_columns, unit.target_files).write.mode("errorifexists")
        writer.format(run.info.file_format).option("compression", codec).save(unit.incoming)
        run.storage.delete(child(unit.incoming, "_SUCCESS"))
        if wants("drop-staged-file"):
            run.storage.delete(run.storage.list_data_files(unit.incoming)[0].path)
        item.before = from_observation(observation)
    except UnitFailure as failure:
        item.failure = str(failure)
    except Exception as error:
        run.storage.delete(unit.incoming)
        item.failure = (
            f"{run.label(unit)}: could not read or write its data ({java_cause(error)}); the original files are "
            "untouched. Check the files of this partition (a corrupt or unreadable file?) and retry."
        )


def _stage(run: _Run, items: list[_Item]) -> list[_Item]:
    """Write every unit of the batch, `concurrent_jobs` Spark jobs at a time; the ones that wrote."""
    workers = min(run.options.batching.concurrent_jobs, len(items))
    with (
        session_conf(run.spark, HIVE_COMPATIBLE_WRITES),  # session-wide, so set once around all the writers
        ThreadPoolExecutor(workers, thread_name_prefix="lk-write") as pool,
    ):
        list(pool.map(lambda item: _write_unit(run, item), items))
    return _drop_failed(run, items)


def _verify(run: _Run, items: list[_Item]) -> list[_Item]:
    """Fingerprint every staged output in one Spark job, journal what was written, fail the units that differ."""
    if not items:
        return items
    storage, journal = run.storage, run.journal
    outputs = {item.index: storage.list_data_files(journal.units[item.index].incoming) for item in items}
    owner = {f.name: index for index, files in outputs.items() for f in files}
    if len(owner) != sum(len(files) for files in outputs.values()):
        raise CompactionError(f"{run.info.qualified_name}: two staged outputs hold files of the same name; retry")
    staged = read_files(run.spark, run.info, run.schema, [journal.units[item.index].incoming for item in items])
    per_file = fingerprints_by_file(staged, run.schema)
    unknown = sorted(set(per_file) - set(owner))
    if unknown:
        raise CompactionError(f"{run.info.qualified_name}: staged file {unknown[0]} was not written by this run")
    written = {}
    for item in items:
        files = outputs[item.index]
        output = combine([per_file[f.name] for f in files if f.name in per_file])
        result = item.result
        result.rows_before, result.checksum_before = item.before.rows, item.before.checksum
        result.rows_after, result.checksum_after = output.rows, output.checksum
        result.files_after, result.bytes_after = len(files), sum(f.size for f in files)
        written[item.index] = {
            "input": item.before.to_dict(),
            "output": output.to_dict(),
            "output_files": [f.name for f in files],
        }
        if item.before != output:
            item.failure = (
                f"{run.label(journal.units[item.index])}: verification failed: input {item.before.rows} rows / "
                f"checksum {item.before.checksum}, output {output.rows} rows / checksum {output.checksum}; the output "
                "was deleted and the original files are untouched"
            )
    journal.record_units(storage, WRITTEN, written)
    kill_point(WRITTEN)
    return _drop_failed(run, items)


def _back_up(run: _Run, items: list[_Item]) -> list[_Item]:
    """Register the batch's original directories in the run's zero-copy backup table (one statement)."""
    if not items:
        return items
    backup = run.ensure_backup()
    units = [run.journal.units[item.index] for item in items]
    backups.add_partitions(run.spark, run.backup_sql_name, [(u.spec, u.live) for u in units if u.spec])
    run.journal.record_units(run.storage, BACKED_UP, {item.index: {} for item in items})
    kill_point(BACKED_UP)
    for item in items:
        item.result.backup_table = backup
    return items


def _swap(run: _Run, item: _Item) -> int | None:
    """Check the unit right before its swap (writers done, snapshot intact, lease held), then swap it.

    The late files carried over, or None when the unit was failed by a check (nothing was changed).
    """
    storage, journal = run.storage, run.journal
    unit = journal.units[item.index]
    label = run.label(unit)
    try:
        _check_before_swap(storage, unit, item.snapshot.files, label)
    except UnitFailure as failure:
        item.failure = str(failure)
        _drop_failed(run, [item])
        return None
    run.lease.ensure_held(f"the swap of {label}")
    journal.record(storage, SWAPPING, item.index)
    kill_point(SWAPPING)
    try:
        return swap_unit(storage, journal, item.index)
    except Exception as error:
        raise _interrupted(run, label, error) from error


def _interrupted(run: _Run, label: str, error: Exception) -> CompactionError:
    return CompactionError(
        f"{label}: the swap was interrupted ({java_cause(error)}). Its journal holds every step: run "
        f"`lakekeeper-dagster recover --table {run.info.qualified_name}` (the next compaction does too)."
    )


def _drop_failed(run: _Run, items: list[_Item]) -> list[_Item]:
    """Undo what the failed items left (staged output, backup partition), journal and log them; the rest."""
    ok = []
    for item in items:
        if item.failure is None:
            ok.append(item)
            continue
        unit = run.journal.units[item.index]
        run.storage.delete(unit.incoming)
        if run.journal.backup_table and unit.spec and unit.state == BACKED_UP:
            backups.drop_partition(run.spark, run.backup_sql_name, unit.spec)
        run.journal.record(run.storage, FAILED, item.index, error=item.failure)
        item.result.status, item.result.reason = FAILED_STATUS, item.failure
        log.error("%s", item.failure)
    return ok


def _pending(run: _Run, plan: PartitionPlan, files: list[DataFile]) -> UnitResult:
    return UnitResult(
        run.info.database,
        run.info.name,
        plan.partition,
        plan.location,
        FAILED_STATUS,
        plan.reason,
        files_before=len(files),
        bytes_before=sum(f.size for f in files),
        target_files=plan.target_files,
        run_id=run.journal.run_id,
    )


def _compact_batch(run: _Run, items: list[_Item]) -> None:
    """Write, verify, back up, swap and commit one batch of units; each item's result says how it ended."""
    started = time.monotonic()
    live = _back_up(run, _verify(run, _stage(run, items)))
    carried = {}
    for item in live:
        moved = _swap(run, item)
        if moved is not None:
            carried[item.index] = moved
    try:
        commit_swapped(run.spark, run.storage, run.info, run.journal, carried, run.options.analyze_stats)
    except Exception as error:
        raise _interrupted(run, f"{run.info.qualified_name} ({len(carried)} swapped unit(s))", error) from error
    for item in live:
        if item.index in carried:
            item.result.carried_files = carried[item.index]
            item.result.status, item.result.reason = COMPACTED, item.plan.reason
    share = round((time.monotonic() - started) / len(items), 3)
    for item in items:  # the units of a batch run together: each gets an equal share of its wall time
        item.result.seconds = share


def _check_before_swap(
    storage: Storage, unit: UnitRecord, files: list[DataFile], label: str, timeout: float = 30.0
) -> None:
    """Right before the swap, from one listing of the live directory: no writer at work in it (waited for), no
    subdirectories, and every snapshot file still there, unchanged."""
    deadline = time.monotonic() + timeout
    entries = storage.list_entries(unit.live)
    while busy := [n for n in entries.directories if is_hidden(n)]:
        # A writer committing straight into the directory keeps its work in hidden subdirectories (`_temporary`,
        # `.spark-staging-*`): swapping under it would strand its output, so wait for it to finish, or give up.
        if time.monotonic() > deadline:
            raise UnitFailure(
                f"{label}: a write into it is in progress ({', '.join(busy)}) and did not finish within "
                f"{timeout:.0f}s. Nothing was changed; retry when the writer is done."
            )
        time.sleep(0.5)
        entries = storage.list_entries(unit.live)
    _refuse_subdirectories(entries.directories, label)
    now = {f.name: f.size for f in entries.files}
    changed = [f.path for f in files if now.get(f.name) != f.size]
    if changed:
        raise UnitFailure(
            f"{label}: {len(changed)} of its files were removed or rewritten during compaction (e.g. {changed[0]}); "
            "another job overwrote it. Nothing was changed; retry when that job is done."
        )


def _refuse_subdirectories(directories: list[str], label: str) -> None:
    """Data in subdirectories (e.g. Hive's HIVE_UNION_SUBDIR_1) would move with the swap and never come back."""
    nested = [n for n in directories if not is_hidden(n)]
    if nested:
        raise UnitFailure(
            f"{label}: its directory holds subdirectories ({', '.join(nested[:3])}) whose files this compaction would "
            "not rewrite; nothing was changed. Move their files up into the partition directory first."
        )


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
        work: list[tuple[PartitionPlan, DirEntries, dict | None]] = []
        for target in targets:
            location = target.location if target else info.location
            name = target.name if target else None
            try:
                entries = storage.list_entries(location)  # the snapshot
            except StorageError:
                results.append(UnitResult(database, table, name, location, SKIPPED, f"location {location} is missing"))
                continue
            files = entries.files
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
            work.append((plan, entries, target.spec if target else None))
        if not work:
            return results
        units = [
            UnitRecord(
                partition=plan.partition,
                spec=spec,
                live=plan.location,
                incoming=sibling(plan.location, "staging", run_id),
                retired=sibling(plan.location, "old", run_id),
                known=[f.name for f in entries.files],
                target_files=plan.target_files,
            )
            for plan, entries, spec in work
        ]
        journal = Journal.new(info.location, info.database, info.name, run_id, COMPACT, options.owner, units)
        journal.start(storage)
        run = _Run(spark, storage, info, options, data_schema(info), sort_columns, journal, lease)
        items = [
            _Item(i, plan, entries, _pending(run, plan, entries.files)) for i, (plan, entries, _) in enumerate(work)
        ]
        for batch in batches([item.plan.total_bytes for item in items], options.batching):
            _compact_batch(run, [items[i] for i in batch])
        results += [item.result for item in items]
        finish_run(spark, storage, info, journal)
    return results
