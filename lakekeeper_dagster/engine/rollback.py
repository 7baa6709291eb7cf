"""Rollback: restore the exact pre-compaction files of a partition (or table) from its backup.

A rollback is a swap too, journaled like a compaction: the live directory is retired, the backup's original files
come back in its place, and files appended after the compaction (anything the compaction did not write) are carried
over, so no row written since is lost. The backup is dropped only once the restore is complete.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakekeeper_dagster.engine import backup as backups
from lakekeeper_dagster.engine.commit import refresh
from lakekeeper_dagster.engine.errors import CompactionError
from lakekeeper_dagster.engine.faults import kill_point
from lakekeeper_dagster.engine.journal import (
    COMMITTED,
    INSTALLED,
    ROLLBACK,
    ROLLED_BACK,
    SWAPPING,
    Journal,
    UnitRecord,
    new_run_id,
    sibling,
    state_dir,
)
from lakekeeper_dagster.engine.lease import TableLease
from lakekeeper_dagster.engine.model import TableInfo
from lakekeeper_dagster.engine.storage import Storage
from lakekeeper_dagster.engine.swap import finish_swap

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _choose_backup(
    spark: SparkSession, storage: Storage, info: TableInfo, partition: str | None, name: str | None
) -> tuple[backups.Backup, Journal]:
    candidates = backups.find_backups(spark, info.database, info.qualified_name)
    if name is not None:
        candidates = [b for b in candidates if b.name == name]
        if not candidates:
            raise CompactionError(f"{info.database}.{name} is not a backup of {info.qualified_name}")
    for backup in candidates:
        journal = Journal.load(storage, backup.journal)
        if any(u.state == COMMITTED and (partition is None or u.partition == partition) for u in journal.units):
            return backup, journal
    what = f"partition {partition} of {info.qualified_name}" if partition else info.qualified_name
    raise CompactionError(f"no backup to roll back {what} from (none found, or already rolled back or cleaned up)")


def commit_rollback_unit(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, i: int) -> None:
    """Swap the originals back (re-entrant), drop the compacted copy and the backup's pointer to the originals."""
    unit = journal.units[i]
    carried = finish_swap(storage, unit)
    journal.record(storage, INSTALLED, i, carried=carried)
    kill_point(INSTALLED)
    storage.delete(unit.retired)
    compaction = Journal.load(storage, unit.details["compaction_journal"])
    index = unit.details["compaction_unit"]
    if compaction.units[index].state != ROLLED_BACK:
        compaction.record(storage, ROLLED_BACK, index)
    if unit.spec and compaction.backup_table:
        backups.drop_partition(spark, backups.table_sql(info.database, compaction.backup_table), unit.spec)
    refresh(spark, info)
    journal.record(storage, COMMITTED, i)
    kill_point(COMMITTED)


def finish_rollback(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal) -> None:
    """Drop the backup (and the compaction's journal) once nothing of it is left to roll back."""
    journal.record(storage, "done")
    compaction = Journal.load(storage, journal.units[0].details["compaction_journal"]) if journal.units else None
    if compaction is not None and not compaction.committed_units():
        if compaction.backup_table:
            backups.drop_backup(spark, info.database, compaction.backup_table)
        storage.delete(compaction.directory)
    storage.delete(journal.directory)


def rollback_table(
    spark: SparkSession,
    database: str,
    table: str,
    partition: str | None = None,
    backup: str | None = None,
    owner: str = "",
) -> list[str]:
    """Restore the pre-compaction files from the most recent (or the named) backup; one line per restored unit."""
    from lakekeeper_dagster.engine.compaction import load_compactable
    from lakekeeper_dagster.engine.recovery import recover_table

    info = load_compactable(spark, database, table)
    storage = Storage(spark)
    run_id = new_run_id()
    with TableLease(storage, state_dir(info.location), info.qualified_name, run_id, owner) as lease:
        recover_table(spark, storage, info)
        chosen, compaction = _choose_backup(spark, storage, info, partition, backup)
        units = []
        for index, unit in enumerate(compaction.units):
            if unit.state != COMMITTED or (partition is not None and unit.partition != partition):
                continue
            label = f"{info.qualified_name}" + (f" partition {unit.partition}" if unit.partition else "")
            if not storage.exists(unit.retired):
                raise CompactionError(f"{label}: the original files ({unit.retired}) are gone; cannot roll back")
            written = set(unit.details.get("output_files", []))
            present = set(storage.list_names(unit.live, directories=False))
            if not written <= present:
                raise CompactionError(
                    f"{label} no longer holds the files compaction run {compaction.run_id} wrote (it was compacted "
                    "again or rewritten since); roll back the newer backup first. Nothing was changed."
                )
            units.append(
                UnitRecord(
                    partition=unit.partition,
                    spec=unit.spec,
                    live=unit.live,
                    incoming=unit.retired,
                    retired=sibling(unit.live, "rolledback", run_id),
                    known=sorted(written),
                    details={"compaction_journal": compaction.directory, "compaction_unit": index},
                )
            )
        journal = Journal.new(info.location, info.database, info.name, run_id, ROLLBACK, owner, units, chosen.name)
        journal.start(storage)
        lines = []
        for i, unit in enumerate(units):
            lease.ensure_held(f"restoring {unit.partition or 'the table'}")
            journal.record(storage, SWAPPING, i)
            kill_point(SWAPPING)
            commit_rollback_unit(spark, storage, info, journal, i)
            carried = journal.units[i].details.get("carried", 0)
            lines.append(
                f"{info.qualified_name} {unit.partition or '(whole table)'}: restored from {chosen.name}"
                + (f", {carried} file(s) appended since the compaction kept" if carried else "")
            )
        finish_rollback(spark, storage, info, journal)
    return lines
