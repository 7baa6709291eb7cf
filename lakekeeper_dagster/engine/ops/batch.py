"""One batch of a compaction run through the protocol: write -> verify -> back up -> swap -> commit.

A batch's units are written by several Spark jobs at once into hidden staging siblings (each unit's input
fingerprint observed in the same pass), verified by one Spark job over all staged outputs, registered in the
backup with one statement, swapped one by one right after their pre-swap checks, and committed together.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import OperationError, UnitFailure
from lakekeeper_dagster.engine.faults import kill_point, wants
from lakekeeper_dagster.engine.fs.storage import DataFile, DirEntries, Storage, child
from lakekeeper_dagster.engine.hive import backup as backups
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.ops.options import CompactionOptions, UnitResult
from lakekeeper_dagster.engine.plan.progress import Progress, ProgressEvent, no_progress
from lakekeeper_dagster.engine.plan.units import UnitPlan
from lakekeeper_dagster.engine.protocol.checks import check_before_swap, refuse_subdirectories
from lakekeeper_dagster.engine.protocol.commit import abort_unit, commit_swapped, swap_unit
from lakekeeper_dagster.engine.protocol.journal import Journal, UnitRecord
from lakekeeper_dagster.engine.protocol.lease import TableLease
from lakekeeper_dagster.engine.protocol.swap import SwapAborted
from lakekeeper_dagster.engine.protocol.writers import wait_for_writers
from lakekeeper_dagster.engine.rewrite.codec import choose_codec
from lakekeeper_dagster.engine.rewrite.encodings import (
    READER_SETTINGS,
    changed_encodings,
    format_options,
    input_encodings,
    write_settings,
)
from lakekeeper_dagster.engine.rewrite.fingerprint import (
    Fingerprint,
    combine,
    fingerprints_by_file,
    from_observation,
    observed,
)
from lakekeeper_dagster.engine.rewrite.footers import read_footers
from lakekeeper_dagster.engine.rewrite.merge import MergeOutcome, byte_merge
from lakekeeper_dagster.engine.rewrite.schema import arrange, read_files, undeclared_columns
from lakekeeper_dagster.engine.statuses import ProgressStep, RunStep, UnitState, UnitStatus
from spark_resources.py4j import isolated_session, java_cause, job_description

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

SPARK_REPORT_SECONDS = 30.0  # while a batch's Spark writes run, say so this often
_COMMITTED_FIGURES = ("files_before", "files_after", "bytes_before", "bytes_after", "rows_before", "rows_after")


@dataclass
class CompactionRun:
    """Everything one compaction run shares across its units."""

    spark: SparkSession
    storage: Storage
    info: TableInfo
    options: CompactionOptions
    schema: StructType
    sort_columns: tuple[str, ...]
    journal: Journal
    lease: TableLease
    progress: Progress = no_progress  # `serialized`: the batch's writer threads report too

    def ensure_backup(self) -> str:
        if self.journal.backup_table is None:
            name = backups.backup_name(self.options.backup_prefix, self.info.name, self.journal.run_id)
            self.journal.record(self.storage, RunStep.BACKUP, backup_table=name)
            backups.create_backup(self.spark, self.info, name, self.journal.run_id, self.journal.directory)
        return self.journal.backup_table

    @property
    def backup_sql_name(self) -> str:
        return backups.table_sql(self.info.database, self.journal.backup_table)

    def label(self, unit: UnitRecord) -> str:
        return self.info.qualified_name + (f" partition {unit.partition}" if unit.partition else "")

    def report(self, step: ProgressStep, unit: UnitRecord | None = None, **figures) -> None:
        """Tell `progress` that `unit` (None: the run) went through `step`, with its figures."""
        partition = unit.partition if unit is not None else None
        self.progress(ProgressEvent(step, self.info.qualified_name, partition, self.info.is_partitioned, **figures))

    def waiting(self, unit: UnitRecord | None) -> Callable[[str], None]:
        """What `wait_for_writers` calls when a writer makes `unit` (None: the batch) wait."""
        return lambda what: self.report(ProgressStep.WAITING, unit, detail=what)

    def spark_job(self, what: str):
        """Label the Spark jobs started meanwhile in this thread: operation, table or partition, step."""
        return job_description(self.spark, f"lakekeeper compact {what}")


@dataclass
class BatchItem:
    """One unit of a batch on its way through the protocol."""

    index: int
    plan: UnitPlan
    snapshot: DirEntries
    result: UnitResult
    inputs: list[DataFile]  # the snapshot's files this run rewrites
    before: Fingerprint | None = None
    footer_rows: int = 0  # the input's rows as its files' own metadata count them
    encodings: dict | None = None  # what the input files use and the output keeps (`rewrite/encodings.py`)
    failure: str | None = None


def _refuse_undeclared(run: CompactionRun, item: BatchItem, footers: list, label: str) -> None:
    """Refuse files with columns the table does not declare, unless the run is set to drop them (then say so)."""
    extra = undeclared_columns(run.info, footers)
    if not extra:
        return
    listed = ", ".join(f"{column} (in {path})" for column, path in sorted(extra.items()))
    if not run.options.drop_undeclared_columns:
        raise UnitFailure(
            f"{label}: its files hold column(s) the table does not declare: {listed}; rewriting would drop them, "
            "so it is not compacted and nothing was changed. Declare them (ALTER TABLE ... ADD COLUMNS), or set "
            "drop_undeclared_columns: true to compact dropping them."
        )
    item.result.dropped_columns = sorted(extra)
    log.warning("%s: dropping column(s) the table does not declare (drop_undeclared_columns): %s", label, listed)


def _write_unit(run: CompactionRun, item: BatchItem) -> None:
    """Write one compacted unit into its staging directory, its input fingerprint observed in the same pass.

    First the input files' footers: their row count (checked against what Spark reads, so a file the read skips
    or cuts short fails the unit), their columns (undeclared ones refused) and their encodings, which the write
    keeps. The write runs in its own clone of the session, under the reader settings and those encodings.
    Runs in a worker thread (several units' Spark jobs at once); a failure is kept on the item, never raised.
    """
    unit = run.journal.units[item.index]
    label = run.label(unit)
    started = time.monotonic()
    try:
        refuse_subdirectories(item.snapshot.directories, label)
        paths = [f.path for f in item.inputs]
        footers = read_footers(run.spark, run.info.file_format, paths, label)
        _refuse_undeclared(run, item, footers, label)
        item.encodings = input_encodings(footers, label)
        item.footer_rows = sum(f.rows for f in footers)
        if wants("drop-input-file"):  # a file deleted between its footer and Spark's read
            run.storage.delete(paths[0])
        session = isolated_session(run.spark, write_settings(item.encodings))
        codec = choose_codec(run.spark, run.info, item.inputs, run.options.codec)
        merging = _byte_merge(run, item, session, footers, label)  # `rewrite/merge.py`; the rest goes to Spark
        item.before = merging.before
        if merging.rewrite:
            targets = merging.targets(unit.target_files, item.inputs, run.options.thresholds.block_size_bytes)
            with run.spark_job(f"{label}: write {targets} file(s)"):
                df = read_files(session, run.info, run.schema, merging.rewrite)
                df, observation = observed(df, f"lk-in-{run.journal.run_id}-{item.index}")
                writer = arrange(df, run.sort_columns, targets).write.mode(merging.write_mode)
                writer.format(run.info.file_format).options(**format_options(run.info))
                writer.option("compression", codec).save(unit.incoming)
            run.storage.delete(child(unit.incoming, "_SUCCESS"))
            item.before = combine([item.before, from_observation(observation)])
        if wants("drop-staged-file"):
            run.storage.delete(run.storage.list_data_files(unit.incoming)[0].path)
        if item.before.rows != item.footer_rows:
            raise UnitFailure(
                f"{label}: verification failed: its {len(footers)} file(s) hold {item.footer_rows} rows by their own "
                f"metadata but Spark read {item.before.rows} (a file skipped or read short); the output was deleted "
                "and the original files are untouched"
            )
        staged = run.storage.list_data_files(unit.incoming)
        run.report(
            ProgressStep.WRITTEN,
            unit,
            files_before=len(paths),
            files_after=len(staged),
            bytes_before=item.plan.total_bytes,
            bytes_after=sum(f.size for f in staged),
            seconds=time.monotonic() - started,
            detail=f"{merging.merged_files} file(s) byte-merged into {merging.outputs}" if merging.outputs else "",
        )
    except UnitFailure as failure:
        item.failure = str(failure)
    except Exception as error:
        run.storage.delete(unit.incoming)
        item.failure = (
            f"{label}: could not read or write its data ({java_cause(error)}); the original files are "
            "untouched. Check the files of this partition (a corrupt or unreadable file?) and retry."
        )


def _byte_merge(run: CompactionRun, item: BatchItem, session, footers: list, label: str) -> MergeOutcome:
    staging = (run.journal.units[item.index].incoming, f"lk-merged-{run.journal.run_id}-{item.index}")
    limits = (run.options.byte_merge_min_row_group_bytes, run.options.thresholds.block_size_bytes)
    rearranged = bool(run.sort_columns or item.result.dropped_columns)  # only a rewrite sorts or drops columns
    outcome = byte_merge(session, run.info, run.schema, footers, staging, limits, run.options.codec, label, rearranged)
    item.result.files_byte_merged = outcome.merged_files
    return outcome


def _stage(run: CompactionRun, items: list[BatchItem]) -> list[BatchItem]:
    """Write every unit of the batch, `concurrent_jobs` Spark jobs at a time; the ones that wrote.

    Each writer has its own session clone (`_write_unit`), so no setting of the run's session changes meanwhile.
    Every `SPARK_REPORT_SECONDS` the partitions whose Spark jobs still run are reported as waited for.
    """
    workers = min(run.options.batching.concurrent_jobs, len(items))
    started = time.monotonic()
    with ThreadPoolExecutor(workers, thread_name_prefix="lk-write") as pool:
        futures = {pool.submit(_write_unit, run, item): item for item in items}
        while pending := wait(futures, timeout=SPARK_REPORT_SECONDS).not_done:
            names = sorted(run.journal.units[futures[f].index].partition or "the table" for f in pending)
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            so_far = f"{time.monotonic() - started:.0f} s so far"
            run.report(ProgressStep.WAITING, detail=f"the Spark writes of {', '.join(names[:3])}{more} ({so_far})")
        for future in futures:
            future.result()
    return _drop_failed(run, items)


def _verify(run: CompactionRun, items: list[BatchItem]) -> list[BatchItem]:
    """Fingerprint every staged output in one Spark job, journal what was written, fail the units that differ.

    Besides the fingerprints, each output's footers must count the rows the input's footers counted and keep the
    input's encodings.
    """
    if not items:
        return items
    storage, journal = run.storage, run.journal
    outputs = {item.index: storage.list_data_files(journal.units[item.index].incoming) for item in items}
    owner = {f.name: index for index, files in outputs.items() for f in files}
    if len(owner) != sum(len(files) for files in outputs.values()):
        raise OperationError(f"{run.info.qualified_name}: two staged outputs hold files of the same name; retry")
    with run.spark_job(f"{run.info.qualified_name}: verify {len(items)} staged unit(s)"):
        reader = isolated_session(run.spark, READER_SETTINGS)
        staged = read_files(reader, run.info, run.schema, [journal.units[item.index].incoming for item in items])
        per_file = fingerprints_by_file(staged, run.schema)
    unknown = sorted(set(per_file) - set(owner))
    if unknown:
        raise OperationError(f"{run.info.qualified_name}: staged file {unknown[0]} was not written by this run")
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
        label = run.label(journal.units[item.index])
        kept = "; the output was deleted and the original files are untouched"
        try:
            footers = read_footers(run.spark, run.info.file_format, [f.path for f in files], label)
        except UnitFailure as failure:
            item.failure = str(failure)
            continue
        changed = changed_encodings(item.encodings, footers)
        if item.before != output:
            item.failure = (
                f"{label}: verification failed: input {item.before.rows} rows / checksum {item.before.checksum}, "
                f"output {output.rows} rows / checksum {output.checksum}{kept}"
            )
        elif sum(f.rows for f in footers) != item.footer_rows:
            item.failure = (
                f"{label}: verification failed: the input files' metadata count {item.footer_rows} rows, the output "
                f"files' {sum(f.rows for f in footers)}{kept}"
            )
        elif changed:
            item.failure = f"{label}: verification failed: the output changed the files' encoding ({changed[0]}){kept}"
        else:
            run.report(
                ProgressStep.VERIFIED,
                journal.units[item.index],
                rows_before=item.before.rows,
                rows_after=output.rows,
                checksum_matches=result.checksum_matches,
            )
    journal.record_units(storage, UnitState.WRITTEN, written)
    kill_point(UnitState.WRITTEN)
    return _drop_failed(run, items)


def _back_up(run: CompactionRun, items: list[BatchItem]) -> list[BatchItem]:
    """Register the batch's original directories in the run's zero-copy backup table (one statement)."""
    if not items:
        return items
    backup = run.ensure_backup()
    units = [run.journal.units[item.index] for item in items]
    backups.add_partitions(run.spark, run.backup_sql_name, [(u.spec, u.live) for u in units if u.spec])
    run.journal.record_units(run.storage, UnitState.BACKED_UP, {item.index: {} for item in items})
    kill_point(UnitState.BACKED_UP)
    for item in items:
        item.result.backup_table = backup
    return items


def _swap(run: CompactionRun, item: BatchItem) -> int | None:
    """Check the unit right before its swap (writers done, snapshot intact, lease held), then swap it.

    The late files carried over, or None when the unit was failed by a check: before the swap (nothing was
    changed), or during it (a file of the snapshot replaced or deleted: the swap was undone, nothing installed).
    """
    storage, journal = run.storage, run.journal
    unit = journal.units[item.index]
    label = run.label(unit)
    try:
        wait_for_writers(storage, run.info.location, unit.live, label, waiting=run.waiting(unit))  # files in the unit
        check_before_swap(storage, unit.live, item.snapshot.files, label)
    except UnitFailure as failure:
        item.failure = str(failure)
        _drop_failed(run, [item])
        return None
    run.lease.ensure_held(f"the swap of {label}")
    journal.record(storage, UnitState.SWAPPING, item.index)
    kill_point(UnitState.SWAPPING)
    try:
        moved = swap_unit(storage, journal, item.index)
    except SwapAborted as undone:
        item.failure = f"{run.info.qualified_name}{' partition' if unit.spec else ''} {undone}"
        abort_unit(run.spark, storage, run.info, journal, item.index, item.failure, UnitState.FAILED)
        item.result.status, item.result.reason = UnitStatus.FAILED, item.failure
        log.error("%s", item.failure)
        run.report(ProgressStep.FAILED, unit, detail=item.failure)
        return None
    except Exception as error:
        raise _interrupted(run, label, error) from error
    run.report(ProgressStep.SWAPPED, unit, detail=f"{moved} late file(s) carried over" if moved else "")
    return moved


def _interrupted(run: CompactionRun, label: str, error: Exception) -> OperationError:
    return OperationError(
        f"{label}: the swap was interrupted ({java_cause(error)}). Its journal holds every step: run "
        f"`lakekeeper-dagster recover --table {run.info.qualified_name}` (the next compaction does too)."
    )


def _drop_failed(run: CompactionRun, items: list[BatchItem]) -> list[BatchItem]:
    """Undo what the failed items left (staged output, backup partition), journal and log them; the rest."""
    ok = []
    for item in items:
        if item.failure is None:
            ok.append(item)
            continue
        unit = run.journal.units[item.index]
        run.storage.delete(unit.incoming)
        if run.journal.backup_table and unit.spec and unit.state == UnitState.BACKED_UP:
            backups.drop_partition(run.spark, run.backup_sql_name, unit.spec)
        run.journal.record(run.storage, UnitState.FAILED, item.index, error=item.failure)
        item.result.status, item.result.reason = UnitStatus.FAILED, item.failure
        log.error("%s", item.failure)
        run.report(ProgressStep.FAILED, unit, detail=item.failure)
    return ok


def _wait_for_table_writers(run: CompactionRun, items: list[BatchItem]) -> list[BatchItem]:
    """Before a partitioned table's swaps: no live writer staging at the table root (one listing a batch), else the
    batch's units fail with nothing changed."""
    if not items or not run.info.is_partitioned:
        return items
    try:
        wait_for_writers(run.storage, run.info.location, None, run.info.qualified_name, waiting=run.waiting(None))
    except UnitFailure as failure:
        for item in items:
            item.failure = str(failure)
    return _drop_failed(run, items)


def compact_batch(run: CompactionRun, items: list[BatchItem]) -> None:
    """Write, verify, back up, swap and commit one batch of units; each item's result says how it ended."""
    started = time.monotonic()
    live = _wait_for_table_writers(run, _back_up(run, _verify(run, _stage(run, items))))
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
            item.result.status, item.result.reason = UnitStatus.COMPACTED, item.plan.reason
            figures = {name: getattr(item.result, name) for name in _COMMITTED_FIGURES}
            run.report(ProgressStep.COMMITTED, run.journal.units[item.index], **figures)
    share = round((time.monotonic() - started) / len(items), 3)
    for item in items:  # the units of a batch run together: each gets an equal share of its wall time
        item.result.seconds = share
