"""Commit: the only steps readers see, for both kinds of run; shared by the operations and by recovery.

- A compact run replaces a unit's files: its rewritten copy is swapped in, the run's backup is pointed at the
  retired originals (one metastore call a batch), caches and statistics are refreshed, the units are marked
  committed. A run that committed nothing leaves no backup and no journal behind.
- A rollback run restores them: the originals are swapped back, the replaced copy (only the files the compaction
  wrote) goes to the Trash or is deleted, the compaction's journal marks the unit rolled back and its backup
  forgets it. The backup goes once nothing of it is left.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import StorageError
from lakekeeper_dagster.engine.faults import kill_point
from lakekeeper_dagster.engine.fs.locations import child
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.fs.trash import move_to_trash
from lakekeeper_dagster.engine.hive import backup as backups
from lakekeeper_dagster.engine.hive.catalog import table_exists
from lakekeeper_dagster.engine.hive.model import TableInfo, partition_clause
from lakekeeper_dagster.engine.hive.stats import parameters_of, set_file_stats
from lakekeeper_dagster.engine.protocol.history import record_run
from lakekeeper_dagster.engine.protocol.journal import Journal, UnitRecord
from lakekeeper_dagster.engine.protocol.swap import (
    ArrivalRecorder,
    SwapAborted,
    Swapped,
    finish_swap,
    give_back_arrived,
    restore_retired,
)
from lakekeeper_dagster.engine.statuses import SWAP_BEGUN, RunStep, UnitState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def refresh(spark: SparkSession, info: TableInfo) -> None:
    """Drop Spark's cached file listings and metadata of the table, so readers in this session see the swap."""
    spark.catalog.refreshTable(info.sql_name)


def arrival_recorder(storage: Storage, journal: Journal, index: int) -> ArrivalRecorder:
    """Journal the files a unit's install takes from a re-created partition directory (name in the staging
    directory -> name in the partition's; with those taken before), in the unit's current state, before they move."""

    def record(taken: dict[str, str]) -> None:
        unit = journal.units[index]
        journal.record(storage, unit.state, index, arrived={**unit.details.get("arrived", {}), **taken})

    return record


def swap_unit(storage: Storage, journal: Journal, index: int, recovering: bool = False) -> Swapped:
    """Swap one compaction unit, verified (re-entrant from any point a crash left it at); return the late files
    carried over and the attributes not carried (`finish_swap`). Raises `SwapAborted` once the swap is undone: the
    caller then calls `abort_unit`."""
    journal.fence(f"the swap of {journal.units[index].label}")
    record = arrival_recorder(storage, journal, index)
    swapped = finish_swap(storage, journal.units[index], record, verify=True, recovering=recovering)
    kill_point("installed")
    return swapped


def abort_unit(
    spark: SparkSession,
    storage: Storage,
    info: TableInfo,
    journal: Journal,
    index: int,
    reason: str,
    state: UnitState = UnitState.ABORTED,
) -> None:
    """Undo a compaction unit that must not be installed (re-entrant): originals back in place if they were retired,
    staged copy deleted, backup partition dropped, unit journaled `state`. The one path of a run that aborts a swap
    and of recovery rolling a unit back."""
    unit = journal.units[index]
    if unit.state not in SWAP_BEGUN and storage.exists(unit.retired):
        # Journaled before its swap, yet retired: the journal lost a record (damaged storage). Putting "originals"
        # back could duplicate every row; a person must look.
        raise StorageError(
            f"{unit.label}: the journal {journal.directory} says its swap never began, but {unit.retired} exists: "
            "the journal is missing a record. Nothing was changed; inspect the partition and that directory."
        )
    aside = restore_retired(storage, unit)
    give_back_arrived(storage, unit)  # a writer's files the install took: back into the partition, never deleted
    if aside:
        reason = f"{reason}; {aside}"
    stranded = [name for name in unit.kept if storage.exists(child(unit.incoming, name))]
    if stranded:  # never: `restore_retired` takes them back while the retired directory exists
        raise StorageError(
            f"{unit.label}: {unit.incoming} holds file(s) the run left as they were ({', '.join(stranded[:3])}) and "
            f"{unit.retired} is gone; nothing was deleted. Move them back into {unit.live}, then run recover."
        )
    storage.delete(unit.incoming)
    if journal.backup_table and unit.spec and table_exists(spark, info.database, journal.backup_table):
        backups.drop_partition(spark, backups.table_sql(info.database, journal.backup_table), unit.spec)
    journal.record(storage, state, index, error=reason)


def _set_file_stats(
    spark: SparkSession, storage: Storage, info: TableInfo, units: list[UnitRecord], baseline: list | None = None
) -> list[dict]:
    """Set each unit's `numFiles`/`totalSize` to the data files its live directory holds now (one listing each);
    the metastore parameters that changed, per unit (`stats.set_file_stats`)."""
    sizes = [(u.spec, [f.size for f in storage.list_data_files(u.live)]) for u in units]
    return set_file_stats(spark, info, [(spec, len(files), sum(files)) for spec, files in sizes], baseline)


def commit_swapped(
    spark: SparkSession,
    storage: Storage,
    info: TableInfo,
    journal: Journal,
    carried: dict[int, int],
    analyze_stats: bool,
) -> None:
    """After the swaps of a batch: point the backup at the retired originals (one metastore call), refresh the
    table's caches, refresh Spark's statistics when asked, always set each unit's file statistics (numFiles,
    totalSize) from the files it now holds (one metastore call), then mark the units committed in one record, with
    the metastore parameters that changed (for `diff`)."""
    if not carried:
        return
    units = [journal.units[i] for i in carried]
    backups.set_locations(spark, info.database, journal.backup_table, [(u.spec, u.retired) for u in units])
    baseline = parameters_of(spark, info, [u.spec for u in units]) if analyze_stats else None
    if analyze_stats:
        refresh(spark, info)  # ANALYZE sizes what Spark lists: the swapped directories, not its cached listing
        for unit in units:
            clause = f" {partition_clause(unit.spec)}" if unit.spec else ""
            spark.sql(f"ANALYZE TABLE {info.sql_name}{clause} COMPUTE STATISTICS NOSCAN")
    changes = dict(zip(carried, _set_file_stats(spark, storage, info, units, baseline), strict=True))
    refresh(spark, info)
    previously = {i: int(journal.units[i].details.get("carried", 0)) for i in carried}
    committed = {i: {"carried": n + previously[i], "parameters": changes[i]} for i, n in carried.items()}
    journal.record_units(storage, UnitState.COMMITTED, committed)
    kill_point(UnitState.COMMITTED)


def commit_units(
    spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, indices: list[int], analyze_stats: bool
) -> dict[int, str]:
    """Finish the swaps of these units (re-entrant, verified) and commit them: what recovery does for a run cut off
    mid-swap. A unit whose snapshot changed (or whose staged data is gone) is rolled back instead: the reasons, by
    unit index."""
    carried, aborted = {}, {}
    for i in indices:
        try:
            carried[i] = swap_unit(storage, journal, i, recovering=True).carried
        except SwapAborted as undone:
            aborted[i] = str(undone)
            abort_unit(spark, storage, info, journal, i, aborted[i])
    commit_swapped(spark, storage, info, journal, carried, analyze_stats)
    return aborted


def finish_run(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal) -> None:
    """Mark a compact run done; a run that committed nothing leaves no backup and no journal behind."""
    journal.record(storage, RunStep.DONE)
    record_run(spark, storage, journal)
    if not journal.committed_units():
        if journal.backup_table:
            backups.drop_backup(spark, info.database, journal.backup_table)
        storage.delete(journal.directory)


def commit_restored(
    spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, i: int, recovering: bool = False
) -> str | None:
    """Swap a rollback unit's originals back (re-entrant, verified like a compaction's swap), retire the compacted
    copy, drop the backup's pointer, set the file statistics. None once committed; the reason when the swap was undone
    because the compacted files changed meanwhile (the unit is then journaled aborted, its backup kept)."""
    unit = journal.units[i]
    journal.fence(f"restoring {unit.label}")
    if unit.state != UnitState.INSTALLED:  # once installed, the copy may already be retired: never swap again
        try:
            record = arrival_recorder(storage, journal, i)
            carried = finish_swap(storage, unit, record, verify=True, recovering=recovering).carried
        except SwapAborted as undone:
            journal.record(storage, UnitState.ABORTED, i, error=str(undone))
            return str(undone)
        journal.record(storage, UnitState.INSTALLED, i, carried=carried)
        kill_point(UnitState.INSTALLED)
    left = retire_copy(storage, unit)
    kill_point("copy_retired")
    compaction = Journal.load(storage, unit.details["compaction_journal"])
    index = unit.details["compaction_unit"]
    if compaction.units[index].state != UnitState.ROLLED_BACK:
        compaction.record(storage, UnitState.ROLLED_BACK, index)
    if unit.spec and compaction.backup_table:
        backups.drop_partition(spark, backups.table_sql(info.database, compaction.backup_table), unit.spec)
    _set_file_stats(spark, storage, info, [unit])
    refresh(spark, info)
    journal.record(storage, UnitState.COMMITTED, i, left=left)
    kill_point(UnitState.COMMITTED)
    return None


def retire_copy(storage: Storage, unit: UnitRecord) -> list[str]:
    """Remove the compacted copy a rollback swapped out, only the files the compaction wrote (`unit.known` but not
    `unit.kept`, the large files it left in place, which the swap carried back), each moved to the Trash where the
    filesystem has one, else deleted (with its checksum file); then the directory if nothing else is left in it.
    Re-entrant. Returns what was left there (files this run did not write)."""
    kept = set(unit.kept)
    for name in (n for n in unit.known if n not in kept):
        for path in (child(unit.retired, name), child(unit.retired, f".{name}.crc")):
            if storage.exists(path) and not move_to_trash(storage, path):
                storage.delete(path, recursive=False)
    if not storage.exists(unit.retired) or storage.delete_empty_dir(unit.retired):
        return []
    return storage.list_names(unit.retired, directories=True) + storage.list_names(unit.retired, directories=False)


def finish_restore(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal) -> None:
    """Mark a rollback run done; drop the backup (and the compaction's journal) once nothing of it is left."""
    journal.record(storage, RunStep.DONE)
    record_run(spark, storage, journal)
    compaction = Journal.load(storage, journal.units[0].details["compaction_journal"]) if journal.units else None
    if compaction is not None and not compaction.committed_units():
        if compaction.backup_table:
            backups.drop_backup(spark, info.database, compaction.backup_table)
        storage.delete(compaction.directory)
    storage.delete(journal.directory)
