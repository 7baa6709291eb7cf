"""Recovery: finish or undo the runs a crash interrupted, from their journals; refuse leftovers no journal explains.

Every operation changes a table only inside `exclusive`: the table's lease is taken and every interrupted run of
the table is brought to a consistent state first. Recovery is fenced like a run: before each journal it recovers,
before every record it writes and before every swap, it reads the lease back and stops if another process took it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import LeaseHeldError, OperationError
from lakekeeper_dagster.engine.fs.locations import child, split_location
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.catalog import read_table
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.plan.progress import Progress, ProgressEvent, no_progress, serialized
from lakekeeper_dagster.engine.protocol.commit import (
    abort_unit,
    commit_restored,
    commit_units,
    finish_restore,
    finish_run,
)
from lakekeeper_dagster.engine.protocol.drop import recover_retention
from lakekeeper_dagster.engine.protocol.journal import (
    HIDDEN_PREFIX,
    Journal,
    journal_root,
    load_journals,
    new_run_id,
    state_dir,
    unstarted_runs,
)
from lakekeeper_dagster.engine.protocol.lease import TableLease
from lakekeeper_dagster.engine.protocol.merge import recover_merge
from lakekeeper_dagster.engine.statuses import (
    SWAP_BEGUN,
    TERMINAL,
    Operation,
    ProgressStep,
    Recovery,
    RunKind,
    UnitState,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)


def write_root(table_location: str, run_id: str) -> str:
    """The hidden directory at a table's root where a run writes a batch's partitions in one Spark job, before each
    partition's output moves to its staging sibling (`ops/batch.py`); gone after each batch, removed by recovery."""
    return child(table_location, f"{HIDDEN_PREFIX}write-{run_id}")


def _recover_compaction(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal) -> list[str]:
    """Roll forward the units whose swap began (all committed together) once their snapshot is verified, roll back
    the others, and those whose snapshot changed since (a writer overwrote the partition meanwhile)."""
    storage.delete(write_root(info.location, journal.run_id))  # a batch's one-job write a crash interrupted
    pending = [i for i, u in enumerate(journal.units) if u.state not in TERMINAL]
    forward = [i for i in pending if journal.units[i].state in SWAP_BEGUN]
    aborted = commit_units(spark, storage, info, journal, forward, analyze_stats=False)
    messages = []
    for i in pending:
        if i in aborted:
            messages.append(f"{aborted[i]} ({Recovery.ROLLED_BACK})")
        elif i in forward:
            messages.append(f"{journal.units[i].label}: swap finished ({Recovery.ROLLED_FORWARD})")
        else:
            messages.append(_roll_back_compaction_unit(spark, storage, info, journal, i))
    finish_run(spark, storage, info, journal)
    return messages


def _roll_back_compaction_unit(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, i: int) -> str:
    unit = journal.units[i]
    journal.fence(f"undoing {unit.label}")
    abort_unit(spark, storage, info, journal, i, "interrupted before the swap; undone by recover")
    return f"{unit.label}: interrupted before the swap, temporary data removed ({Recovery.ROLLED_BACK})"


def _recover_rollback(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal) -> list[str]:
    """Finish every rollback unit whose swap began; the ones that had not started are marked aborted."""
    messages = []
    for i, unit in enumerate(journal.units):
        if unit.state in TERMINAL:
            continue
        if unit.state == UnitState.PLANNED:
            journal.record(storage, UnitState.ABORTED, i, error="interrupted before the swap; nothing to undo")
            messages.append(f"{unit.label}: rollback had not started")
        elif undone := commit_restored(spark, storage, info, journal, i, recovering=True):
            messages.append(f"{unit.label}: rollback undone, the compacted files changed meanwhile ({undone})")
        else:
            messages.append(f"{unit.label}: rollback finished ({Recovery.ROLLED_FORWARD})")
    finish_restore(spark, storage, info, journal)
    return messages


_RECOVER_BY_KIND = {
    RunKind.COMPACT: _recover_compaction,
    RunKind.ROLLBACK: _recover_rollback,
    RunKind.RETENTION: recover_retention,
    RunKind.MERGE: recover_merge,
}


def recover_journal(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal) -> list[str]:
    """Bring every unfinished unit of one run to a consistent state: forward once its swap began, else back."""
    prefix = f"{info.qualified_name} run {journal.run_id} ({journal.kind})"
    journal.operation = Operation.RECOVER
    return [f"{prefix} {m}" for m in _RECOVER_BY_KIND[journal.kind](spark, storage, info, journal)]


def recover_table(
    spark: SparkSession, storage: Storage, info: TableInfo, lease: TableLease, progress: Progress = no_progress
) -> list[str]:
    """Recover every unfinished run of the table, fenced by `lease` (which the caller holds); `progress` hears of
    each unit recovered."""
    messages = []
    for directory in unstarted_runs(storage, info.location):  # killed before its plan record was in place
        lease.ensure_held(f"removing the journal {directory} of a run that never started")
        storage.delete(directory)
    for journal in load_journals(storage, info.location):
        if not journal.done:
            lease.ensure_held(f"the recovery of run {journal.run_id}")
            journal.fence = lease.ensure_held
            done = recover_journal(spark, storage, info, journal)
            for message in done:
                progress(ProgressEvent(ProgressStep.RECOVERED, info.qualified_name, detail=message))
            messages += done
    for message in messages:
        log.warning("recovered: %s", message)
    return messages


@contextmanager
def exclusive(
    spark: SparkSession, storage: Storage, info: TableInfo, run_id: str, owner: str, progress: Progress = no_progress
) -> Iterator[TableLease]:
    """Hold the table's lease, with every interrupted run of the table recovered first: where every change starts."""
    with TableLease(storage, state_dir(info.location), info.qualified_name, run_id, owner) as lease:
        recover_table(spark, storage, info, lease, progress)
        yield lease


def refuse_leftovers(storage: Storage, info: TableInfo, unit_locations: list[str]) -> None:
    """Refuse to work beside hidden lakekeeper directories that no journal of the table records."""
    referenced = set()
    for journal in load_journals(storage, info.location):
        referenced |= journal.paths()
    strays = []
    units_by_parent: dict[str, set[str]] = {}
    for location in unit_locations:
        parent, name = split_location(location)
        units_by_parent.setdefault(parent, set()).add(name)
    for parent, unit_names in sorted(units_by_parent.items()):
        for name in storage.list_names(parent, directories=True):
            path = child(parent, name)
            ours = any(name.endswith(f"-{unit}") for unit in unit_names)  # not a neighbouring table's
            if name.startswith(HIDDEN_PREFIX) and ours and path not in referenced:
                strays.append(path)
    if strays:
        raise OperationError(
            f"table {info.qualified_name}: found {len(strays)} lakekeeper director{'y' if len(strays) == 1 else 'ies'} "
            f"that no journal records: {', '.join(strays[:5])}. They may hold data: inspect them, move them away "
            "(or delete them if they are copies), then retry. Nothing was changed."
        )


def recover(
    spark: SparkSession, pairs: list[tuple[str, str]], owner: str = "", progress: Progress = no_progress
) -> list[str]:
    """Recover the interrupted runs of these tables; a table whose lease a live process holds is left alone.
    Every table with a journal is recovered, whatever kind it is now: retention and merge run on kinds compaction
    refuses (bucketed, other formats), and a table's kind can change after a crash; lakekeeper's own tables are not
    (a backup's location is its source's: the source's runs are recovered as the source's). `progress` hears of
    each unit recovered."""
    storage = Storage(spark)
    progress = serialized(progress)
    messages = []
    for database, table in pairs:
        info = read_table(spark, database, table)
        if info.lakekeeper_owned or not info.location or not storage.exists(journal_root(info.location)):
            continue
        try:
            with TableLease(storage, state_dir(info.location), info.qualified_name, new_run_id(), owner) as lease:
                messages += recover_table(spark, storage, info, lease, progress)
        except LeaseHeldError as held:
            messages.append(f"{info.qualified_name}: left alone: {held}")
    return messages
