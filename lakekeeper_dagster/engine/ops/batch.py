"""One batch of a compaction run through the protocol: write -> verify -> back up -> swap -> commit.

A batch's units are written into hidden staging siblings (`ops/write.py`: those of a partitioned table in one Spark
job per set of write settings); then verified by one Spark job that reads every staged output but the concatenations
proven by their bytes, and every input Spark rewrote (concatenated inputs are fingerprinted when concatenated), each
file's fingerprint credited to its unit;
registered in the backup with one statement, swapped one
by one right after their swap guards, and committed together.
"""

from __future__ import annotations

import logging
import time

from lakekeeper_dagster.engine.errors import OperationError, UnitFailure
from lakekeeper_dagster.engine.faults import kill_point, wants
from lakekeeper_dagster.engine.fs.storage import DataFile
from lakekeeper_dagster.engine.hive import backup as backups
from lakekeeper_dagster.engine.hive.eligibility import COPIED_FORMATS
from lakekeeper_dagster.engine.ops.run import BatchItem, CompactionRun
from lakekeeper_dagster.engine.ops.write import fall_back, stage
from lakekeeper_dagster.engine.protocol.commit import abort_unit, commit_swapped, swap_unit
from lakekeeper_dagster.engine.protocol.guards import guard_swap
from lakekeeper_dagster.engine.protocol.swap import SwapAborted
from lakekeeper_dagster.engine.protocol.writers import wait_for_writers
from lakekeeper_dagster.engine.rewrite.content import path_fingerprints
from lakekeeper_dagster.engine.rewrite.encodings import (
    READER_SETTINGS,
    changed_encodings,
)
from lakekeeper_dagster.engine.rewrite.fingerprint import Fingerprint, combine
from lakekeeper_dagster.engine.rewrite.footers import FileFooter, read_footers
from lakekeeper_dagster.engine.rewrite.schema import listed_on_driver
from lakekeeper_dagster.engine.statuses import ProgressStep, UnitState, UnitStatus
from spark_resources.py4j import isolated_session, java_cause

log = logging.getLogger(__name__)

_COMMITTED_FIGURES = ("files_before", "files_after", "bytes_before", "bytes_after", "rows_before", "rows_after")


def _verify(run: CompactionRun, items: list[BatchItem]) -> list[BatchItem]:
    """Fingerprint every staged output (but those proven byte copies) and the inputs Spark rewrote in one Spark job,
    journal what was written, fail the units whose output differs from their input.

    Besides the fingerprints, the input's and the output's footers must count the rows Spark read, and the output
    must keep the input's encodings. A unit with concatenated files that fails is written again, whole, by Spark, and
    checked again: a fast path that cannot keep what the files hold (ORC's calendar flag, for one) never fails a unit
    on every run.
    """
    if not items:
        return items
    for item in items:  # a writer deleting an input between the write and its verification
        if item.spark_inputs and wants(f"drop-input-after-write@{run.journal.units[item.index].partition}"):
            run.storage.delete(item.spark_inputs[0])
    written = _check(run, items)
    rewritable = run.info.file_format not in COPIED_FORMATS  # text and Avro have no other path
    again = [item for item in items if rewritable and item.failure and item.concatenated.outputs and not item.fell_back]
    for item in again:
        run.storage.delete(run.journal.units[item.index].incoming)
        fall_back(item, item.failure)
        item.failure = None
        del written[item.index]
    if again:
        written.update(_check(run, [item for item in stage(run, again) if item.failure is None]))
    run.journal.record_units(run.storage, UnitState.WRITTEN, written)
    kill_point(UnitState.WRITTEN)
    return _drop_failed(run, items)


def _read_back(
    run: CompactionRun, items: list[BatchItem], outputs: dict[int, list[DataFile]]
) -> dict[str, dict[str, Fingerprint]]:
    """The fingerprint of every staged output file but those proven by their bytes and of every input file Spark
    rewrote, by directory and name, in one Spark job (none when nothing is left to read); a directory read that is
    no unit's fails the run (a path spelled two ways)."""
    storage, journal = run.storage, run.journal
    paths = [p for item in items for p in _to_read(journal.units[item.index].incoming, item, outputs[item.index])]
    paths += [p for item in items for p in item.spark_inputs]
    if not paths:
        return {}
    with run.spark_job(f"{run.info.qualified_name}: verify {len(items)} staged unit(s) against their input"):
        reader = isolated_session(run.spark, {**READER_SETTINGS, **listed_on_driver(paths)})
        per_file = path_fingerprints(reader, run.info, run.schema, paths)
    found: dict[str, dict[str, Fingerprint]] = {}  # directory -> file name -> fingerprint
    for path, part in per_file.items():
        directory, name = path.rsplit("/", 1)
        found.setdefault(directory, {})[name] = part
    units = [journal.units[item.index] for item in items]
    claimed = {storage.qualify(u.incoming) for u in units} | {storage.qualify(u.live) for u in units}
    if stray := sorted(set(found) - claimed):
        raise OperationError(
            f"{run.info.qualified_name}: verification read files of {stray[0]}, which is no unit's staged or live "
            f"directory as the filesystem spells them ({sorted(claimed)[0]}, ...); nothing was swapped. Report this."
        )
    return found


def _to_read(staged: str, item: BatchItem, files: list[DataFile]) -> list[str]:
    """What verification reads of a unit's staged output: its directory, or its files but those proven by bytes."""
    proven = item.concatenated.proven
    return [f.path for f in files if f.name not in proven] if proven else [staged]


def _output_footers(run: CompactionRun, files: list[DataFile]) -> dict[str, FileFooter]:
    """The footers of a batch's staged files in one call, by path; none when a file cannot be read (each unit's are
    then read apart, so that only its unit fails) or the format has none."""
    if run.info.file_format in COPIED_FORMATS:
        return {}
    try:
        footers = read_footers(run.spark, run.info.file_format, [f.path for f in files], run.info.qualified_name)
    except UnitFailure:
        return {}
    return {f.path: f for f in footers}


def _check(run: CompactionRun, items: list[BatchItem]) -> dict[int, dict]:
    """What `_verify` journals for each staged unit; the units that differ get their `failure`. When the read fails
    (a file changed or gone since the write: another job at work), each unit is read again alone, so that one fails
    alone."""
    if not items:
        return {}
    storage, journal = run.storage, run.journal
    outputs = {item.index: storage.list_data_files(journal.units[item.index].incoming) for item in items}
    try:
        found = _read_back(run, items, outputs)
    except OperationError:
        raise
    except Exception as error:
        if len(items) > 1:
            return {index: done for item in items for index, done in _check(run, [item]).items()}
        (item,) = items
        item.result.raced = True  # a writer at work: the next run may well succeed
        item.failure = (
            f"{run.label(journal.units[item.index])}: verification could not read its files back "
            f"({java_cause(error).splitlines()[0][:300]}): one changed or vanished since the write (another job at "
            "work?); the output was deleted and the original files are untouched"
        )
        return {}
    written = {}
    copied = run.info.file_format in COPIED_FORMATS  # no footers to count rows by: checked by their bytes or headers
    read_together = _output_footers(run, [f for files in outputs.values() for f in files])
    for item in items:
        unit, files = journal.units[item.index], outputs[item.index]
        read = found.get(storage.qualify(unit.incoming), {})
        unknown = sorted(set(read) - {f.name for f in files})
        if unknown:
            raise OperationError(f"{run.info.qualified_name}: staged file {unknown[0]} was not written by this run")
        proven = item.concatenated.proven
        output = combine(list(read.values()) + [copy.fingerprint for copy in proven.values()])
        taken = {path.rsplit("/", 1)[1] for path in item.spark_inputs}
        source = found.get(storage.qualify(unit.live), {})
        item.before = combine([item.concatenated.before] + [part for name, part in source.items() if name in taken])
        result = item.result
        result.rows_before, result.checksum_before = item.before.rows, item.before.checksum
        result.rows_after, result.checksum_after = output.rows, output.checksum
        rewritten = {f.name for f in item.inputs}
        kept = [f for f in item.snapshot.files if f.name not in rewritten]  # large: left alone, carried by the swap
        result.files_after, result.bytes_after = len(files) + len(kept), sum(f.size for f in files + kept)
        written[item.index] = {
            "input": item.before.to_dict(),
            "output": output.to_dict(),
            "output_files": [f.name for f in files],
            # size and modification time: what tells rollback an output rewritten under its name since
            "output_snapshot": {f.name: [f.size, f.modification_time] for f in files},
        }
        label = run.label(unit)
        untouched = "; the output was deleted and the original files are untouched"
        sizes = {f.name: f.size for f in files}
        if changed := sorted(name for name, copy in proven.items() if sizes.get(name) != copy.size):
            item.failure = (
                f"{label}: verification failed: concatenated output {changed[0]} vanished or changed since it was "
                f"proven a byte copy of its inputs{untouched}"
            )
            continue
        if item.before.rows != item.footer_rows:
            item.failure = (
                f"{label}: verification failed: its {len(item.inputs)} file(s) hold {item.footer_rows} rows by their "
                f"own metadata but Spark read {item.before.rows} (a file skipped or read short){untouched}"
            )
            continue
        try:
            paths = [f.path for f in files]
            if copied:
                footers = []
            elif set(paths) <= set(read_together):
                footers = [read_together[p] for p in paths]
            else:
                footers = read_footers(run.spark, run.info.file_format, paths, label)
        except UnitFailure as failure:
            item.failure = str(failure)
            continue
        changed = changed_encodings(item.encodings, footers)
        if item.before != output:
            item.failure = (
                f"{label}: verification failed: input {item.before.rows} rows / checksum {item.before.checksum}, "
                f"output {output.rows} rows / checksum {output.checksum}{untouched}"
            )
        elif not copied and sum(f.rows for f in footers) != item.footer_rows:
            item.failure = (
                f"{label}: verification failed: the input files' metadata count {item.footer_rows} rows, the output "
                f"files' {sum(f.rows for f in footers)}{untouched}"
            )
        elif changed:
            item.failure = (
                f"{label}: verification failed: the output changed the files' encoding ({changed[0]}){untouched}"
            )
        else:
            run.report(
                ProgressStep.VERIFIED,
                journal.units[item.index],
                rows_before=item.before.rows,
                rows_after=output.rows,
                checksum_matches=result.checksum_matches,
            )
    return written


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
        guard_swap(storage, unit.live, item.snapshot.files, label)
    except UnitFailure as failure:
        item.failure, item.result.raced = str(failure), True
        _drop_failed(run, [item])
        return None
    run.lease.ensure_held(f"the swap of {label}")
    journal.record(storage, UnitState.SWAPPING, item.index)
    kill_point(UnitState.SWAPPING)
    try:
        moved, item.result.not_carried = swap_unit(storage, journal, item.index)
    except SwapAborted as undone:
        item.result.raced = True
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
            item.failure, item.result.raced = str(failure), True
    return _drop_failed(run, items)


def compact_batch(run: CompactionRun, items: list[BatchItem]) -> None:
    """Write, verify, back up, swap and commit one batch of units; each item's result says how it ended."""
    started = time.monotonic()
    live = _wait_for_table_writers(run, _back_up(run, _verify(run, _drop_failed(run, stage(run, items)))))
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
            reason = item.plan.reason
            if item.fell_back:
                reason += f"; rewritten by Spark, its byte merge given up ({item.fell_back.split('; the output')[0]})"
            if item.result.not_carried:
                missing = ", ".join(item.result.not_carried)
                reason += f"; {missing} not carried: this process may not set them, the new files keep the run's"
            item.result.status, item.result.reason = UnitStatus.COMPACTED, reason
            figures = {name: getattr(item.result, name) for name in _COMMITTED_FIGURES}
            run.report(ProgressStep.COMMITTED, run.journal.units[item.index], **figures)
    share = round((time.monotonic() - started) / len(items), 3)
    for item in items:  # the units of a batch run together: each gets an equal share of its wall time
        item.result.seconds = share
