"""The write step of a batch: each unit's inputs checked against their footers, what qualifies concatenated at the byte
level (`rewrite/concat.py`: each concatenation proven or checked as it is written, its inputs fingerprinted), the
rest rewritten by Spark into the unit's hidden staging sibling. What proves Spark's output is the batch's
verification read (`ops/batch.py`).

The units of a partitioned table are written together, in one Spark job per set of write settings and codec
(`batching.write_mode: one_job`, the default; `rewrite/onejob.py`), except a unit of several output files with sort
columns, which is written alone to be sorted by range across its files; with `per_unit`, each unit is written in a
Spark job of its own, `concurrent_jobs` at a time.
"""

from __future__ import annotations

import logging
import re
import time
from concurrent.futures import ThreadPoolExecutor, wait

from lakekeeper_dagster.engine.errors import UnitFailure
from lakekeeper_dagster.engine.faults import wants
from lakekeeper_dagster.engine.fs.locations import child
from lakekeeper_dagster.engine.hive.eligibility import COPIED_FORMATS
from lakekeeper_dagster.engine.ops.run import BatchItem, CompactionRun
from lakekeeper_dagster.engine.plan.thresholds import WriteMode
from lakekeeper_dagster.engine.protocol.guards import refuse_owner_change, refuse_subdirectories, refuse_unswappable
from lakekeeper_dagster.engine.protocol.recovery import write_root
from lakekeeper_dagster.engine.rewrite.avroappend import append_unit
from lakekeeper_dagster.engine.rewrite.codec import choose_codec
from lakekeeper_dagster.engine.rewrite.concat import ConcatOutcome, concat_unit
from lakekeeper_dagster.engine.rewrite.encodings import READER_SETTINGS, format_options, input_encodings, write_settings
from lakekeeper_dagster.engine.rewrite.footers import read_footers
from lakekeeper_dagster.engine.rewrite.onejob import COLUMN_PREFIX, UnitWrite, output, write_units
from lakekeeper_dagster.engine.rewrite.schema import arrange, read_files, refuse_undeclared
from lakekeeper_dagster.engine.rewrite.textconcat import concatenate_unit
from lakekeeper_dagster.engine.statuses import ProgressStep
from spark_resources.py4j import isolated_session, java_cause, java_messages

log = logging.getLogger(__name__)

SPARK_REPORT_SECONDS = 30.0  # while a batch's Spark writes run, say so this often


def _spark_inputs(run: CompactionRun, item: BatchItem) -> list[str]:
    """The unit's files the Spark write reads (the one place it takes them), once their footers are checked.

    The footers give their row count (checked against what Spark reads, so a file the read skips or cuts short
    fails the unit), their columns (undeclared ones refused) and their encodings, which the write keeps.
    """
    label = run.label(run.journal.units[item.index])
    refuse_subdirectories(item.snapshot.directories, label)
    live = run.journal.units[item.index].live
    refuse_unswappable(run.storage, live, label)  # before any work is done for it
    if not run.options.accept_owner_change:
        refuse_owner_change(run.spark, live, item.snapshot.files, label)
    if run.info.file_format in COPIED_FORMATS:  # no Spark write (`rewrite/textconcat.py`, `rewrite/avroappend.py`)
        item.concatenated = _copy(run, item, label)
        item.footer_rows = item.concatenated.before.rows  # no footers: the check is the fingerprint and the copy's own
        return []
    paths = [f.path for f in item.inputs]
    footers = read_footers(run.spark, run.info.file_format, paths, label)
    item.result.dropped_columns = refuse_undeclared(run.info, footers, label, run.options.drop_undeclared_columns)
    item.encodings = input_encodings(footers, label)
    item.footer_rows = sum(f.rows for f in footers)
    if wants("drop-input-file"):  # a file deleted between its footer and Spark's read
        run.storage.delete(paths[0])
    item.codec = choose_codec(run.info, footers[0], run.codec_for(item))
    item.concatenated = _concatenate(run, item, footers, label)  # what qualifies first; the rest goes to Spark
    item.spark_inputs = item.concatenated.rewrite
    return item.spark_inputs


def _concatenate(run: CompactionRun, item: BatchItem, footers: list, label: str) -> ConcatOutcome:
    """Concatenate what qualifies among the unit's inputs into its staging directory (`rewrite/concat.py`).

    A concatenation whose output fails its check, or a unit that already failed verification after one (`fell_back`), is
    rewritten whole by Spark instead: the fast path never makes a unit fail on every run."""
    staging = (run.journal.units[item.index].incoming, f"lk-merged-{run.journal.run_id}-{item.index}")
    limits = (run.options.concat_min_row_group_bytes, run.options.thresholds.block_size_bytes)
    # only a rewrite sorts or drops columns
    rearranged = bool(run.sort_columns or item.result.dropped_columns or item.fell_back)

    def session():
        return isolated_session(run.spark, write_settings(item.encodings))

    codec = run.codec_for(item)
    try:
        outcome = concat_unit(session, run.info, run.schema, footers, staging, limits, codec, label, rearranged)
    except UnitFailure as failure:
        run.storage.delete(staging[0])  # the concatenations written so far: Spark writes the whole unit
        fall_back(item, str(failure))
        outcome = ConcatOutcome([f.path for f in footers])
    item.result.files_byte_merged = outcome.concatenated_files
    return outcome


def fall_back(item: BatchItem, failure: str) -> None:
    """Give up the unit's concatenation for a Spark rewrite, saying why."""
    item.fell_back = failure
    log.warning("%s; the whole partition is rewritten by Spark instead of concatenated", failure)


def _copy(run: CompactionRun, item: BatchItem, label: str) -> ConcatOutcome:
    """Concatenate a text unit's inputs, or append an Avro unit's blocks, into its staging directory, its inputs
    fingerprinted by the reader settings."""
    staging = (run.journal.units[item.index].incoming, f"lk-merged-{run.journal.run_id}-{item.index}")
    session = isolated_session(run.spark, READER_SETTINGS)
    block = run.options.thresholds.block_size_bytes
    if run.info.file_format == "avro":
        outcome = append_unit(session, item.inputs, staging, block, label)
    else:
        outcome = concatenate_unit(session, run.info, run.schema, item.inputs, staging, block, label)
    item.result.files_byte_merged = outcome.concatenated_files
    return outcome


def _spark_files(run: CompactionRun, item: BatchItem) -> int:
    """How many files the Spark write gives the unit: its planned count, or beside concatenated files its share's."""
    planned = run.journal.units[item.index].target_files
    return item.concatenated.targets(planned, item.inputs, run.options.thresholds.block_size_bytes)


def _quota_exceeded(error: Exception) -> str | None:
    """The NameNode's words when a write exceeded an HDFS quota (it names the directory, its quota and use)."""
    for line in java_messages(error):
        head, _, message = line.partition(": ")
        if re.search(r"\b\w*QuotaExceededException\b", head):  # DS, NS, by storage type
            return " ".join(message.split())[:400]
    return None


def _unwritable(run: CompactionRun, item: BatchItem, error: Exception, together: int = 1) -> str:
    run.storage.delete(run.journal.units[item.index].incoming)
    if quota := _quota_exceeded(error):  # a quota above the table, which the check before the write does not ask
        return (
            f"{run.label(run.journal.units[item.index])}: its staged copy exceeded an HDFS quota ({quota}); the staged "
            "files were deleted and the original files are untouched. Raise that quota or free space under that "
            "directory (a compaction needs room for a second copy of what it rewrites until cleanup), then retry."
        )
    shared = f", written in one Spark job with {together - 1} other partition(s)" if together > 1 else ""
    return (
        f"{run.label(run.journal.units[item.index])}: could not read or write its data{shared} ({java_cause(error)}); "
        "the original files are untouched. Check the files of this partition (a corrupt or unreadable file?) and "
        "retry" + (" (batching.write_mode: per_unit writes each partition alone)." if together > 1 else ".")
    )


def _written(run: CompactionRun, item: BatchItem, started: float) -> None:
    """Report the unit written (its fingerprints are taken by the batch's verification)."""
    unit = run.journal.units[item.index]
    if wants("drop-staged-file") or wants(f"drop-staged-file@{unit.partition}"):
        run.storage.delete(run.storage.list_data_files(unit.incoming)[0].path)
    staged = run.storage.list_data_files(unit.incoming)
    figures = {"files_before": len(item.inputs), "files_after": len(staged), "bytes_before": item.input_bytes}
    figures.update(bytes_after=sum(f.size for f in staged), seconds=time.monotonic() - started)
    concatenated = item.concatenated
    if concatenated.outputs:
        figures.update(detail=f"{concatenated.concatenated_files} file(s) concatenated into {concatenated.outputs}")
    run.report(ProgressStep.WRITTEN, unit, **figures)


def _write_unit(run: CompactionRun, item: BatchItem, paths: list[str]) -> None:
    """Write one compacted unit into its staging directory in a Spark job of its own, in a clone of the session under
    the reader settings and the input's encodings.

    Runs in a worker thread (several Spark jobs at once); a failure is kept on the item, never raised.
    """
    unit = run.journal.units[item.index]
    started = time.monotonic()
    try:
        if not paths:  # every input was concatenated
            _written(run, item, started)
            return
        session = isolated_session(run.spark, write_settings(item.encodings))
        files = _spark_files(run, item)
        with run.spark_job(f"{run.label(unit)}: write {files} file(s)"):
            df = arrange(read_files(session, run.info, run.schema, paths), run.sort_columns, files)
            writer = df.write.mode(item.concatenated.write_mode)
            writer.format(run.info.file_format).options(**format_options(run.info))
            writer.option("compression", item.codec).save(unit.incoming)
        run.storage.delete(child(unit.incoming, "_SUCCESS"))
        _written(run, item, started)
    except Exception as error:
        item.failure = _unwritable(run, item, error)


def _write_together(run: CompactionRun, group: list[BatchItem], inputs: dict[int, list[str]]) -> None:
    """Write units sharing their write settings and codec in ONE Spark job (`rewrite/onejob.py`) under the run's
    write root, then move each unit's output to its staging sibling (one rename). When the Spark job fails, its
    output is deleted and each unit is written again in a job of its own (`concurrent_jobs` at a time), so one
    unreadable partition fails alone;
    a failure while moving the outputs fails every unit of the group, their outputs deleted."""
    units = [run.journal.units[item.index] for item in group]
    root = child(write_root(run.info.location, run.journal.run_id), str(group[0].index))  # groups run concurrently
    started = time.monotonic()
    try:
        session = isolated_session(run.spark, write_settings(group[0].encodings))
        files = sum(u.target_files for u in units)
        with run.spark_job(f"{run.info.qualified_name}: write {len(group)} partitions, {files} file(s), in one job"):
            writes = [UnitWrite(inputs[item.index], _spark_files(run, item)) for item in group]
            write_units(session, run.info, run.schema, writes, run.sort_columns, group[0].codec, root)
    except Exception as error:
        run.storage.delete(root)
        run.storage.delete_empty_dir(write_root(run.info.location, run.journal.run_id))
        names = ", ".join(u.partition or "the table" for u in units)
        cause = java_cause(error).splitlines()[0][:300]
        log.warning(
            "%s: the one-job write of %s failed (%s); writing each alone", run.info.qualified_name, names, cause
        )
        with ThreadPoolExecutor(run.options.batching.concurrent_jobs, thread_name_prefix="lk-write-alone") as pool:
            list(pool.map(lambda item: _write_unit(run, item, inputs[item.index]), group))  # never raises
        return
    try:
        for position, (item, unit) in enumerate(zip(group, units, strict=True)):
            written = output(root, position)
            if item.concatenated.outputs and run.storage.exists(written):  # beside its concatenated files: moved in
                for file in run.storage.list_data_files(written):
                    run.storage.rename_strict(file.path, child(unit.incoming, file.name))
            elif run.storage.exists(written):
                run.storage.rename_strict(written, unit.incoming)
            elif item.concatenated.outputs:
                continue  # no row beside the concatenated files
            else:  # no row: no directory written
                run.storage.mkdirs(unit.incoming)
    except Exception as error:
        for item in group:
            item.failure = _unwritable(run, item, error, len(group))
        return
    finally:
        run.storage.delete(root)
        run.storage.delete_empty_dir(write_root(run.info.location, run.journal.run_id))  # other groups may write
    for item in group:
        _written(run, item, started)


def _write_jobs(run: CompactionRun, items: list[BatchItem]) -> list[list[BatchItem]]:
    """The batch's Spark write jobs: with `write_mode` one_job, the units of a partitioned table staged under its
    location are grouped by their write settings and codec, a job a group; written alone: a unit of several files
    with sort columns (sorted by range across its files), a unit staged elsewhere, every unit of a table with a
    column named like the one-job write's own, and every unit with `per_unit`."""
    clash = any(c.name.lower().startswith(COLUMN_PREFIX) for c in run.schema.fields)  # the write's own columns
    if run.options.batching.write_mode != WriteMode.ONE_JOB or clash:
        return [[item] for item in items]
    groups: dict[tuple, list[BatchItem]] = {}
    for item in items:
        incoming = run.journal.units[item.index].incoming
        alone = not incoming.startswith(child(run.info.location, "")) or (
            run.sort_columns and _spark_files(run, item) > 1
        )
        key = (tuple(sorted(write_settings(item.encodings).items())), item.codec)
        groups.setdefault((item.index,) if alone else key, []).append(item)
    return list(groups.values())


def _prepared(run: CompactionRun, item: BatchItem) -> list[str]:
    try:
        return _spark_inputs(run, item)
    except UnitFailure as failure:
        item.failure = str(failure)
    except Exception as error:
        item.failure = _unwritable(run, item, error)
    return []


def stage(run: CompactionRun, items: list[BatchItem]) -> list[BatchItem]:
    """Write every unit of the batch, `concurrent_jobs` Spark jobs at a time (`_write_jobs`); a unit that could not
    be written keeps why in its `failure`.

    Each job has its own session clone, so no setting of the run's session changes meanwhile. Every
    `SPARK_REPORT_SECONDS` the partitions whose Spark jobs still run are reported as waited for.
    """
    workers = min(run.options.batching.concurrent_jobs, len(items))
    started = time.monotonic()
    with ThreadPoolExecutor(workers, thread_name_prefix="lk-write") as pool:
        inputs = dict(zip((item.index for item in items), pool.map(lambda i: _prepared(run, i), items), strict=True))
        jobs = _write_jobs(run, [item for item in items if item.failure is None and inputs[item.index]])
        for item in items:
            if item.failure is None and not inputs[item.index]:  # every input concatenated: no Spark write
                _write_unit(run, item, [])
        futures = {
            pool.submit(_write_unit, run, job[0], inputs[job[0].index])
            if len(job) == 1
            else pool.submit(_write_together, run, job, inputs): job
            for job in jobs
        }
        while pending := wait(futures, timeout=SPARK_REPORT_SECONDS).not_done:
            names = sorted(run.journal.units[i.index].partition or "the table" for f in pending for i in futures[f])
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            so_far = f"{time.monotonic() - started:.0f} s so far"
            run.report(ProgressStep.WAITING, detail=f"the Spark writes of {', '.join(names[:3])}{more} ({so_far})")
        for future in futures:
            future.result()
    return items
