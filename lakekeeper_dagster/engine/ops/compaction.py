"""Compaction of Hive external tables: plan, execute into temporary places, verify, then commit by a swap.

Units (partitions, or a whole unpartitioned table) go through the protocol in batches (`ops/batch.py`), under the
table's lease and with every step journaled: snapshot the data files -> write each unit into a hidden staging
sibling -> verify every staged output -> register the originals in the zero-copy backup -> per unit: re-list (the
snapshot must be intact) and swap directories, carrying late files over -> point the backup at the retired
originals, refresh caches and statistics, mark the batch committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import CatalogError, OperationError, StorageError, UnitFailure
from lakekeeper_dagster.engine.fs.access import hadoop_user, writable
from lakekeeper_dagster.engine.fs.dirstats import DirStats
from lakekeeper_dagster.engine.fs.locations import split_location
from lakekeeper_dagster.engine.fs.storage import DataFile, DirEntries, Storage
from lakekeeper_dagster.engine.hive.catalog import find_partitions, table_units
from lakekeeper_dagster.engine.hive.eligibility import load_compactable, refuse_copy_options
from lakekeeper_dagster.engine.hive.model import TableInfo, Unit
from lakekeeper_dagster.engine.hive.placement import placement_refusal
from lakekeeper_dagster.engine.ops.batch import compact_batch
from lakekeeper_dagster.engine.ops.options import CompactionOptions, UnitResult
from lakekeeper_dagster.engine.ops.run import BatchItem, CompactionRun
from lakekeeper_dagster.engine.plan.progress import Progress, ProgressEvent, no_progress, serialized
from lakekeeper_dagster.engine.plan.thresholds import batches
from lakekeeper_dagster.engine.plan.units import UnitPlan, plan_unit, recompressed, rewritten_files
from lakekeeper_dagster.engine.protocol.commit import finish_run
from lakekeeper_dagster.engine.protocol.guards import wait_for_open_files
from lakekeeper_dagster.engine.protocol.journal import Journal, UnitRecord, journal_root, new_run_id, sibling
from lakekeeper_dagster.engine.protocol.quotas import StagingQuotas
from lakekeeper_dagster.engine.protocol.recovery import exclusive, refuse_leftovers
from lakekeeper_dagster.engine.protocol.suspension import TABLE_UNIT, read_failures, record_outcomes, suspended_units
from lakekeeper_dagster.engine.rewrite.codec import recompression_reason, validated_codec
from lakekeeper_dagster.engine.rewrite.schema import data_schema, resolve_sort_columns
from lakekeeper_dagster.engine.statuses import Operation, PlanStatus, ProgressStep, RunKind, UnitStatus

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

Selection = Callable[[list[Unit]], list[Unit]]  # which of the table's units a run covers (e.g. the archive-aged)


def _targets(spark: SparkSession, info: TableInfo, partitions: list[str] | None) -> list[Unit]:
    if not info.is_partitioned:
        if partitions:
            raise CatalogError(
                f"table {info.qualified_name} is not partitioned, so it has no partition {partitions[0]!r}: run "
                "without --partition. Nothing was done"
            )
        return table_units(spark, info)
    if partitions:
        return find_partitions(spark, info, partitions)
    return table_units(spark, info)


def _selected(spark: SparkSession, info: TableInfo, partitions: list[str] | None, select: Selection | None):
    """The units a run covers: the table's (or the named partitions), kept by `select` when given."""
    targets = _targets(spark, info, partitions)
    return select(targets) if select is not None else targets


def _refuse_placement(
    spark: SparkSession, storage: Storage, info: TableInfo, targets: list[Unit], options: CompactionOptions
) -> None:
    refused = placement_refusal(spark, storage, info, targets, options.non_atomic_rename_schemes_accepted)
    if refused:
        raise OperationError(f"table {info.qualified_name} cannot be compacted: {refused}")


def _label(info: TableInfo, unit: Unit) -> str:
    return info.qualified_name + (f" partition {unit.partition}" if unit.partition else "")


def _unwritable_parents(spark: SparkSession, storage: Storage, info: TableInfo) -> Callable[[Unit], str | None]:
    """Why this user may not compact a unit: its parent directory, where its staging sibling is written and its
    directory swapped, is not writable (each parent asked once); None when it is."""
    answers: dict[str, bool] = {}

    def refusal(unit: Unit) -> str | None:
        parent = split_location(unit.location)[0]
        if parent not in answers:
            answers[parent] = not storage.exists(parent) or writable(spark, parent)
        if answers[parent]:
            return None
        return (
            f"{_label(info, unit)}: user {hadoop_user(spark)} may not write in {parent}, where a compaction stages its "
            "files and swaps the directory; run it as a user who may (the table's owner), or grant write there. "
            "Nothing was changed"
        )

    return refusal


def _result(info: TableInfo, plan: UnitPlan, status: UnitStatus, reason: str, **figures) -> UnitResult:
    return UnitResult(
        info.database,
        info.name,
        plan.partition,
        plan.location,
        status,
        reason,
        files_before=plan.file_count,
        bytes_before=plan.total_bytes,
        target_files=plan.target_files,
        **figures,
    )


def _refuse_bad_codecs(info: TableInfo, options: CompactionOptions) -> None:
    """The run's and the archive's codec must exist for the table's format, the archive's clock name partition
    columns of the table: refused before anything is touched."""
    validated_codec(options.codec, info.file_format, f"{info.qualified_name}: codec")
    refuse_copy_options(info, options.codec, options.recompress_only, options.sort_columns)
    if options.archive is not None:
        validated_codec(options.archive.codec_of(info.file_format), info.file_format, options.archive.setting)
        options.archive.clock.check_columns(info.partition_columns, info.qualified_name)


def _planned(spark: SparkSession, info: TableInfo, target: Unit, entries: DirEntries, options: CompactionOptions):
    """The unit's plan: the size rule; with a run `codec` or `recompress_only`, also the rewrite of its files holding
    rows in another codec than the unit's (`codec_for`) and of its small ones; with `recompress_only`, only that.
    The standing archive rule alone never starts a rewrite: it chooses the codec of those decided here. With
    `recompress_only`, an unreadable footer raises its UnitFailure (the unit fails, never looks done)."""
    stats = DirStats.of(target.location, entries.files, options.thresholds.min_file_bytes)
    plan = plan_unit(target.partition, target.location, stats, options.thresholds, force=options.force)
    codec = options.codec_for(target.spec, info.file_format)
    if codec is None or not (options.codec or options.recompress_only):
        return plan
    found = recompression_reason(spark, info, entries.files, codec, strict=options.recompress_only)
    if found:
        return recompressed(plan, found[0], entries.files, found[1], options.thresholds)
    if options.recompress_only and plan.file_count:
        reason = f"no file holding rows to recompress: already {codec}"
        return replace(plan, status=PlanStatus.OK, reason=reason, target_files=plan.file_count, write_files=0)
    return plan


def _settled(spark: SparkSession, storage: Storage, info: TableInfo, target: Unit, entries: DirEntries,
             plan: UnitPlan, options: CompactionOptions, report: Callable[..., None]):  # fmt: skip
    """The unit's listing and plan once no file of it is held open by a writer (HDFS), listed and planned again
    after a wait (reported); a UnitFailure naming the file still open after `writers.WRITER_WAIT_SECONDS`."""
    label, waiting = _label(info, target), lambda what: report(ProgressStep.WAITING, target.partition, detail=what)
    settled = wait_for_open_files(storage, target.location, entries, label, waiting=waiting)
    return (entries, plan) if settled is entries else (settled, _planned(spark, info, target, settled, options))


def _kept(files: list[DataFile], plan: UnitPlan, options: CompactionOptions) -> list[str]:
    """The names of the unit's files left alone (large), carried by the swap."""
    rewritten = {f.name for f in rewritten_files(files, plan, options.thresholds)}
    return [f.name for f in files if f.name not in rewritten]


def _journal(info: TableInfo, options: CompactionOptions, run_id: str, work: list[tuple[UnitPlan, DirEntries, Unit]]):
    units = [
        UnitRecord(
            partition=plan.partition,
            spec=unit.spec,
            live=plan.location,
            incoming=sibling(plan.location, "staging", run_id),
            retired=sibling(plan.location, "old", run_id),
            known=[f.name for f in entries.files],
            kept=_kept(entries.files, plan, options),
            target_files=plan.write_files,
            snapshot={f.name: [f.size, f.modification_time] for f in entries.files},
            # read by the swap, the run's and a recovery's (`swap._retire`)
            details={"accept_owner_change": True} if options.accept_owner_change else {},
        )
        for plan, entries, unit in work
    ]
    journal = Journal.new(info.location, info.database, info.name, run_id, RunKind.COMPACT, options.owner, units)
    if options.recompress_only:
        journal.operation = Operation.ARCHIVE
    return journal


def compact_table(
    spark: SparkSession,
    database: str,
    table: str,
    options: CompactionOptions,
    partitions: list[str] | None = None,
    progress: Progress = no_progress,
    select: Selection | None = None,
) -> list[UnitResult]:
    """Compact the partitions of a table that need it (or the named ones, or those `select` keeps of them); one
    result per unit. Each unit is planned under the lease, after the recovery of interrupted runs.

    `progress` hears of the recovery of interrupted runs, the plan, each batch and each unit's steps as they happen.
    """
    info = load_compactable(spark, database, table)
    _refuse_bad_codecs(info, options)  # before anything is touched
    progress = serialized(progress)

    def report(step: ProgressStep, unit: str | None = None, **figures) -> None:
        progress(ProgressEvent(step, info.qualified_name, unit, info.is_partitioned, **figures))

    storage = Storage(spark)
    targets = _selected(spark, info, partitions, select)
    checked = {t.location for t in targets}
    _refuse_placement(spark, storage, info, targets, options)  # before any file is touched: maybe not reachable
    unreachable = OperationError(
        f"table {info.qualified_name}: its location {info.location} is not reachable; check the path and "
        "your permissions"
    )
    if not storage.exists(info.location) and not storage.exists(journal_root(info.location)):
        raise unreachable
    sort_columns = resolve_sort_columns(info, options.sort_columns)
    run_id = new_run_id()
    # a crashed run may have left the table mid-swap: recovered first, then the targets read again
    with exclusive(spark, storage, info, run_id, options.owner, progress) as lease:
        if not storage.exists(info.location):
            raise unreachable
        targets = _selected(spark, info, partitions, select)
        if moved := [t for t in targets if t.location not in checked]:  # (re)placed meanwhile
            _refuse_placement(spark, storage, info, moved, options)
        refuse_leftovers(storage, info, [t.location for t in targets])
        results: list[UnitResult] = []
        work: list[tuple[UnitPlan, DirEntries, Unit]] = []
        suspended = suspended_units(read_failures(storage, info.location), options.suspend_after)
        unwritable = _unwritable_parents(spark, storage, info)
        quotas = StagingQuotas(storage, info.location)
        for target in targets:
            try:
                entries = storage.list_entries(target.location)  # the snapshot
            except StorageError:
                results.append(
                    UnitResult(
                        database,
                        table,
                        target.partition,
                        target.location,
                        UnitStatus.SKIPPED,
                        f"location {target.location} is missing",
                    )
                )
                report(ProgressStep.SKIPPED, target.partition, detail=results[-1].reason)
                continue
            size = {"files_before": len(entries.files), "bytes_before": sum(f.size for f in entries.files)}
            if (failed := suspended.get(target.partition or TABLE_UNIT)) is not None:
                reason = failed.describe(target.partition, info.qualified_name)
                figures = {**size, "files_after": size["files_before"], "bytes_after": size["bytes_before"]}
                results.append(UnitResult(database, table, target.partition, target.location, UnitStatus.SUSPENDED,
                                          reason, **figures))  # fmt: skip
                report(ProgressStep.SKIPPED, target.partition, detail=reason)
                continue
            try:
                plan = _planned(spark, info, target, entries, options)
            except UnitFailure as failure:  # an archive run's unreadable footer: the unit fails, never looks done
                results.append(UnitResult(database, table, target.partition, target.location, UnitStatus.FAILED,
                                          str(failure), files_before=len(entries.files)))  # fmt: skip
                report(ProgressStep.FAILED, target.partition, detail=str(failure))
                continue
            if plan.needs_compaction:
                try:
                    entries, plan = _settled(spark, storage, info, target, entries, plan, options, report)
                except UnitFailure as failure:  # a writer at work: the next run may well succeed
                    results.append(_result(info, plan, UnitStatus.FAILED, str(failure), raced=True))
                    report(ProgressStep.FAILED, target.partition, detail=str(failure))
                    continue
            if not plan.needs_compaction:
                figures = {"files_after": plan.file_count, "bytes_after": plan.total_bytes}
                results.append(_result(info, plan, UnitStatus.SKIPPED, plan.reason, **figures))
                report(ProgressStep.SKIPPED, target.partition, detail=plan.reason)
                continue
            if denied := unwritable(target):
                results.append(_result(info, plan, UnitStatus.FAILED, denied))
                report(ProgressStep.FAILED, target.partition, detail=denied)
                continue
            inputs = sum(f.size for f in rewritten_files(entries.files, plan, options.thresholds))
            if refused := quotas.refusal(target.location, _label(info, target), inputs, plan.write_files):
                results.append(_result(info, plan, UnitStatus.FAILED, refused))
                report(ProgressStep.FAILED, target.partition, detail=refused)
                continue
            work.append((plan, entries, target))
        if work:
            journal = _journal(info, options, run_id, work)
            schema = data_schema(info)
            results += _run(
                CompactionRun(spark, storage, info, options, schema, sort_columns, journal, lease, progress), work
            )
        _count_failures(storage, info, results, options.suspend_after)
    return results


def _count_failures(storage: Storage, info: TableInfo, results: list[UnitResult], suspend_after: int) -> None:
    """Count each unit's failure in a row (not one a writer at work caused), forget those that compacted or had
    nothing to do; say which failure suspended a unit (`protocol/suspension.py`)."""
    outcomes = {
        r.partition or TABLE_UNIT: r.reason if r.status == UnitStatus.FAILED else None
        for r in results
        if r.status != UnitStatus.SUSPENDED and not r.raced  # a writer at work: the next run may well succeed
    }
    try:
        counts = record_outcomes(storage, info.location, outcomes)
    except Exception as error:  # the run's data changes stand: a lost count only delays a suspension
        log.warning("%s: the failed-run counts were not updated (%s)", info.qualified_name, error)
        return
    for unit, failed in suspended_units(counts, suspend_after).items():
        if failed.runs == suspend_after and outcomes.get(unit) is not None:
            log.warning(
                "%s %s",
                info.qualified_name + (f" partition {unit}:" if unit else ":"),
                failed.describe(unit, info.qualified_name),
            )


def _run(run: CompactionRun, work: list[tuple[UnitPlan, DirEntries, Unit]]) -> list[UnitResult]:
    """The journaled run of the planned units (`work`), batch after batch; their results."""
    options, run_id = run.options, run.journal.run_id
    run.journal.start(run.storage)
    items = [
        BatchItem(
            i,
            plan,
            entries,
            _result(run.info, plan, UnitStatus.FAILED, plan.reason, run_id=run_id),
            rewritten_files(entries.files, plan, options.thresholds),  # the large files are left alone
        )
        for i, (plan, entries, _) in enumerate(work)
    ]
    groups = batches([item.input_bytes for item in items], options.batching)  # what a batch stages
    files, size = sum(p.file_count for p, _, _ in work), sum(p.total_bytes for p, _, _ in work)
    run.report(ProgressStep.PLANNED, units=len(work), batches=len(groups), files_before=files, bytes_before=size)
    for number, batch in enumerate(groups, 1):
        size = sum(items[i].input_bytes for i in batch)
        run.report(ProgressStep.BATCH, batch=number, batches=len(groups), units=len(batch), bytes_before=size)
        compact_batch(run, [items[i] for i in batch])
    finish_run(run.spark, run.storage, run.info, run.journal)
    return [item.result for item in items]
