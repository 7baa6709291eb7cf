"""Rollback: restore the exact pre-compaction files of a partition (or table) from its backup.

A rollback is a swap too, journaled like a compaction: the live directory is retired, the backup's original files
come back in its place, and files appended after the compaction (anything the compaction did not write) are carried
over, so no row written since is lost. The backup is dropped only once the restore is complete.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import OperationError
from lakekeeper_dagster.engine.faults import kill_point
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive import backup as backups
from lakekeeper_dagster.engine.hive.eligibility import load_compactable
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.protocol.commit import commit_restored, finish_restore
from lakekeeper_dagster.engine.protocol.journal import Journal, UnitRecord, new_run_id, sibling
from lakekeeper_dagster.engine.protocol.recovery import exclusive
from lakekeeper_dagster.engine.statuses import RunKind, UnitState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _choose_backup(
    spark: SparkSession, storage: Storage, info: TableInfo, partition: str | None, name: str | None
) -> tuple[backups.Backup, Journal]:
    candidates = backups.find_backups(spark, info.database, info.qualified_name)
    if name is not None:
        candidates = [b for b in candidates if b.name == name]
        if not candidates:
            raise OperationError(f"{info.database}.{name} is not a backup of {info.qualified_name}")
    for backup in candidates:
        journal = Journal.load(storage, backup.journal)
        if any(
            u.state == UnitState.COMMITTED and (partition is None or u.partition == partition) for u in journal.units
        ):
            return backup, journal
    what = f"partition {partition} of {info.qualified_name}" if partition else info.qualified_name
    raise OperationError(f"no backup to roll back {what} from (none found, or already rolled back or cleaned up)")


def rollback_table(
    spark: SparkSession,
    database: str,
    table: str,
    partition: str | None = None,
    backup: str | None = None,
    owner: str = "",
) -> list[str]:
    """Restore the pre-compaction files from the most recent (or the named) backup; one line per restored unit."""
    info = load_compactable(spark, database, table)
    storage = Storage(spark)
    run_id = new_run_id()
    with exclusive(spark, storage, info, run_id, owner) as lease:
        chosen, compaction = _choose_backup(spark, storage, info, partition, backup)
        units = []
        for index, unit in enumerate(compaction.units):
            if unit.state != UnitState.COMMITTED or (partition is not None and unit.partition != partition):
                continue
            label = f"{info.qualified_name}" + (f" partition {unit.partition}" if unit.partition else "")
            if not storage.exists(unit.retired):
                raise OperationError(f"{label}: the original files ({unit.retired}) are gone; cannot roll back")
            written = set(unit.details.get("output_files", []))
            present = set(storage.list_names(unit.live, directories=False))
            if not written <= present:
                raise OperationError(
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
        journal = Journal.new(
            info.location, info.database, info.name, run_id, RunKind.ROLLBACK, owner, units, chosen.name
        )
        journal.start(storage)
        lines = []
        for i, unit in enumerate(units):
            lease.ensure_held(f"restoring {unit.partition or 'the table'}")
            journal.record(storage, UnitState.SWAPPING, i)
            kill_point(UnitState.SWAPPING)
            commit_restored(spark, storage, info, journal, i)
            carried = journal.units[i].details.get("carried", 0)
            lines.append(
                f"{info.qualified_name} {unit.partition or '(whole table)'}: restored from {chosen.name}"
                + (f", {carried} file(s) appended since the compaction kept" if carried else "")
            )
        finish_restore(spark, storage, info, journal)
    return lines
