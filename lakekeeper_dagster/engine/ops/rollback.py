"""Rollback: restore the exact pre-compaction files of a partition (or table) from its backup.

A rollback is a swap too, journaled like a compaction: the live directory is retired, the large files the
compaction left in place are carried into the backup's directory of originals, which then comes back in its place,
and files appended after the compaction (anything the compaction did not write or keep) are carried over, so no row
written since is lost. Right before each unit's swap it runs the same swap guards as a compaction
(writers waited for, subdirectories refused, the compaction's output unchanged), refuses hidden files it could not
carry, and refuses a partition the metastore no longer locates where the compaction left it. What it retires is only
the compaction's output (a copy of the originals): moved to the Trash where there is one, else deleted file by file.
The backup is dropped only once the restore is complete.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import OperationError, UnitFailure
from lakekeeper_dagster.engine.faults import kill_point
from lakekeeper_dagster.engine.fs.locations import is_hidden
from lakekeeper_dagster.engine.fs.storage import DataFile, Storage
from lakekeeper_dagster.engine.hive import backup as backups
from lakekeeper_dagster.engine.hive.catalog import current_location
from lakekeeper_dagster.engine.hive.eligibility import load_compactable
from lakekeeper_dagster.engine.hive.model import TableInfo, Unit
from lakekeeper_dagster.engine.hive.placement import placement_refusal
from lakekeeper_dagster.engine.plan.progress import Progress, ProgressEvent, no_progress, serialized
from lakekeeper_dagster.engine.protocol.commit import commit_restored, finish_restore
from lakekeeper_dagster.engine.protocol.guards import changed_files, guard_swap
from lakekeeper_dagster.engine.protocol.journal import Journal, UnitRecord, new_run_id, sibling
from lakekeeper_dagster.engine.protocol.recovery import exclusive
from lakekeeper_dagster.engine.protocol.swap import ORIGINAL_OWNERS
from lakekeeper_dagster.engine.protocol.writers import wait_for_writers
from lakekeeper_dagster.engine.statuses import ProgressStep, RunKind, UnitState

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


def _label(info: TableInfo, unit: UnitRecord) -> str:
    return info.qualified_name + (f" partition {unit.partition}" if unit.partition else "")


def _by_hand(unit: UnitRecord) -> str:
    """How to restore a unit by hand: the backup holds only the rewritten originals, not the large files left in
    the partition."""
    if not unit.kept:
        return "restore by hand from the backup table"
    names = ", ".join(unit.kept[:3]) + (f" and {len(unit.kept) - 3} more" if len(unit.kept) > 3 else "")
    return (
        "restore by hand from the backup table together with the large file(s) the compaction left in the partition "
        f"({names}; not in the backup table: keep them, they are part of the data)"
    )


def _refuse_moved_location(spark: SparkSession, storage: Storage, info: TableInfo, unit: UnitRecord) -> None:
    """Refuse a unit whose metastore location moved since the compaction (e.g. `ALTER TABLE ... SET LOCATION`)."""
    now = current_location(spark, info, unit.spec)
    if now is None or storage.qualify(now).rstrip("/") != storage.qualify(unit.live).rstrip("/"):
        what = f"partition {unit.partition} of {info.qualified_name}" if unit.partition else info.qualified_name
        where = f"now points at {now}" if now is not None else "no longer exists in the metastore"
        raise UnitFailure(
            f"{what} {where}, not at {unit.live} where the compaction left it; rollback would restore files "
            "readers no longer see. Nothing was changed. Point it back at that location (ALTER TABLE ... SET "
            f"LOCATION), or {_by_hand(unit)}."
        )


def _guard_unit(
    spark: SparkSession, storage: Storage, info: TableInfo, unit: UnitRecord, snapshot: list[DataFile]
) -> None:
    """The guards right before a rollback swap: location, writers, subdirectories, output unchanged, hidden files."""
    label = _label(info, unit)
    _refuse_moved_location(spark, storage, info, unit)
    wait_for_writers(storage, info.location, unit.live, label)  # in-progress files in the unit
    guard_swap(storage, unit.live, snapshot, label)
    names = storage.list_names(unit.live, directories=False)
    data = {n for n in names if not is_hidden(n)}
    # A data file's checksum (`.<name>.crc`, local filesystems) moves with it; any other hidden file would not.
    foreign = [n for n in names if is_hidden(n) and not (n.endswith(".crc") and n[1:-4] in data)]
    if foreign:
        raise UnitFailure(
            f"{label}: its directory holds hidden files this rollback would not carry back ({', '.join(foreign[:5])}). "
            "Nothing was changed. Move them out of the partition directory (or wait for their writer), then retry."
        )


def _wait_for_table_writers(storage: Storage, info: TableInfo) -> None:
    """No live writer staging at a partitioned table's root (one listing of the root)."""
    if info.is_partitioned:
        wait_for_writers(storage, info.location, None, info.qualified_name)


def _plan_unit(
    storage: Storage, info: TableInfo, compaction: Journal, index: int, run_id: str
) -> tuple[UnitRecord, list[DataFile]]:
    """The rollback unit undoing compaction unit `index`, and the compaction's output files as they are now."""
    unit = compaction.units[index]
    label = _label(info, unit)
    if not storage.exists(unit.retired):
        raise OperationError(f"{label}: the original files ({unit.retired}) are gone; cannot roll back")
    if not unit.details.get("output_files"):
        raise OperationError(
            f"{label}: compaction run {compaction.run_id}'s journal does not list the files it wrote (a record is "
            f"missing or damaged in {compaction.directory}); rollback cannot tell them from later data. Nothing was "
            f"changed; {_by_hand(unit)}."
        )
    written = set(unit.details["output_files"])
    kept = set(unit.kept)  # the large files the compaction left in place: back into the originals by the swap
    present = storage.list_data_files(unit.live)
    if not written <= {f.name for f in present}:
        raise OperationError(
            f"{label} no longer holds the files compaction run {compaction.run_id} wrote (it was compacted "
            "again or rewritten since); roll back the newer backup first. Nothing was changed."
        )
    rewritten = changed_files(unit.details.get("output_snapshot") or {}, present)  # older journals: names only
    if rewritten:
        raise OperationError(
            f"{label}: file(s) compaction run {compaction.run_id} wrote were rewritten under the same name since "
            f"({', '.join(rewritten[:3])}: another size or modification time); rolling back would delete that "
            f"data. Nothing was changed; {_by_hand(unit)}, keeping the rewritten file(s)."
        )
    changed = changed_files({name: unit.snapshot.get(name) for name in kept}, present)
    if changed:
        raise OperationError(
            f"{label}: file(s) compaction run {compaction.run_id} left in place are gone or changed since "
            f"({', '.join(changed[:3])}); the backup does not hold them, so rollback cannot restore the partition as "
            "it was. Nothing was changed; restore by hand from the backup table and those files as they are now."
        )
    late = {f.name for f in present} - written - kept
    clashes = sorted(late & set(storage.list_names(unit.retired, directories=False)))
    if clashes:
        raise OperationError(
            f"{label}: file(s) written since the compaction carry the names of original files ({', '.join(clashes[:3])}"
            "): restoring the originals would need to overwrite them. Nothing was changed; rename those files in "
            f"{unit.live} (keeping them visible), then retry."
        )
    # What the install puts in place (the originals, the kept files carried back): recovery after the install
    # carries late files back only while the partition still holds exactly these (`swap._replaced_since_installed`).
    restored = [*storage.list_data_files(unit.retired), *(f for f in present if f.name in kept)]
    record = UnitRecord(
        partition=unit.partition,
        spec=unit.spec,
        live=unit.live,
        incoming=unit.retired,
        retired=sibling(unit.live, "rolledback", run_id),
        known=sorted(written | kept),
        kept=sorted(kept),
        snapshot={f.name: [f.size, f.modification_time] for f in present if f.name in written | kept},
        details={
            "compaction_journal": compaction.directory,
            "compaction_unit": index,
            "output_snapshot": {f.name: [f.size, f.modification_time] for f in restored},
            "owners": ORIGINAL_OWNERS,  # the originals keep their own owner and group (`swap._retire`)
        },
    )
    return record, [f for f in present if f.name in written | kept]


def _refused(done: list[str], error: Exception) -> OperationError:
    restored = f" Already restored: {', '.join(done)}." if done else ""
    return OperationError(f"{error}{restored}")


def rollback_table(
    spark: SparkSession,
    database: str,
    table: str,
    partition: str | None = None,
    backup: str | None = None,
    owner: str = "",
    accepted_schemes: Iterable[str] = (),
    progress: Progress = no_progress,
) -> list[str]:
    """Restore the pre-compaction files from the most recent (or the named) backup; one line per restored unit.

    `accepted_schemes`: filesystems without atomic rename the operator accepts (`non_atomic_rename_schemes_accepted`).
    `progress` hears of the recovery of interrupted runs and of each unit restored (its line).
    """
    info = load_compactable(spark, database, table)
    storage = Storage(spark)
    run_id = new_run_id()
    progress = serialized(progress)
    with exclusive(spark, storage, info, run_id, owner, progress) as lease:
        chosen, compaction = _choose_backup(spark, storage, info, partition, backup)
        chosen_units = [
            Unit(u.spec, u.live)
            for u in compaction.units
            if u.state == UnitState.COMMITTED and (partition is None or u.partition == partition)
        ]
        refused = placement_refusal(spark, storage, info, chosen_units, accepted_schemes)
        if refused:
            raise OperationError(f"table {info.qualified_name} cannot be rolled back: {refused}. Nothing was changed.")
        planned = [
            _plan_unit(storage, info, compaction, index, run_id)
            for index, unit in enumerate(compaction.units)
            if unit.state == UnitState.COMMITTED and (partition is None or unit.partition == partition)
        ]
        try:  # every unit checked before the first swap: a refusal changes nothing
            _wait_for_table_writers(storage, info)
            for unit, snapshot in planned:
                _guard_unit(spark, storage, info, unit, snapshot)
        except UnitFailure as failure:
            raise OperationError(str(failure)) from None
        units = [unit for unit, _ in planned]
        journal = Journal.new(
            info.location, info.database, info.name, run_id, RunKind.ROLLBACK, owner, units, chosen.name
        )
        journal.start(storage)
        lines: list[str] = []
        for i, (unit, snapshot) in enumerate(planned):
            try:
                if i == 0:
                    _wait_for_table_writers(storage, info)
                _guard_unit(spark, storage, info, unit, snapshot)  # again: right before this unit's swap
            except UnitFailure as failure:
                for rest in range(i, len(units)):
                    journal.record(storage, UnitState.ABORTED, rest, error=str(failure))
                finish_restore(spark, storage, info, journal)
                raise _refused([u.label for u in units[:i]], failure) from None
            lease.ensure_held(f"restoring {unit.label}")
            journal.record(storage, UnitState.SWAPPING, i)
            kill_point(UnitState.SWAPPING)
            undone = commit_restored(spark, storage, info, journal, i)
            if undone:
                for rest in range(i + 1, len(units)):
                    journal.record(storage, UnitState.ABORTED, rest, error=undone)
                finish_restore(spark, storage, info, journal)
                raise _refused([u.label for u in units[:i]], OperationError(undone))
            details = journal.units[i].details
            carried, left = details.get("carried", 0), details.get("left", [])
            lines.append(
                f"{info.qualified_name} {unit.label}: restored from {chosen.name}"
                + (f", {carried} file(s) appended since the compaction kept" if carried else "")
                + (
                    f"; {unit.retired} left in place: it holds files rollback did not write ({', '.join(left)})"
                    if left
                    else ""
                )
            )
            progress(ProgressEvent(ProgressStep.RESTORED, info.qualified_name, unit.partition, detail=lines[-1]))
        finish_restore(spark, storage, info, journal)
    return lines
