"""Publishing one merged period, journaled: the steps after its copy is verified, and their recovery.

A period's unit (`live`: the merged partition's directory, `incoming`: the verified copy beside it; `details`: the
view, its three texts, the merged table and the planned fine partitions with their files) goes WRITTEN ->
PENDING (view: the merged side hides the period; readers see no change) -> REGISTERED (the copy renamed into place
and registered) -> SWITCHED (view: the period read from the merged table, its planned fine partitions hidden from
the source side; one metastore call) -> CLEARED (the planned files moved away; a fine partition holding nothing
else unregistered too) -> MERGED (view unfiltered again). After each view change that precedes a data change the
run pauses `settle` seconds, so a query that read the view just before has listed its partitions.

Recovery rolls a unit back before SWITCHED (view pending, merged partition unregistered, the copy removed, view
unfiltered) and forward from SWITCHED (the same steps again: each is idempotent). At every step the view shows each
row exactly once.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import OperationError, StorageError, UnitFailure
from lakekeeper_dagster.engine.faults import kill_point
from lakekeeper_dagster.engine.fs.locations import child, is_hidden, split_location
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.catalog import (
    list_partitions,
    partition_identity,
    read_table,
    unregister_partition,
)
from lakekeeper_dagster.engine.hive.model import TableInfo, Unit, partition_clause, sql_string
from lakekeeper_dagster.engine.hive.placement import taken_directories
from lakekeeper_dagster.engine.plan.retention import shares_location
from lakekeeper_dagster.engine.protocol.history import record_run
from lakekeeper_dagster.engine.protocol.journal import Journal, UnitRecord
from lakekeeper_dagster.engine.protocol.writers import find_writers
from lakekeeper_dagster.engine.statuses import TERMINAL, Recovery, RunStep, UnitState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

FORWARD = frozenset({UnitState.SWITCHED, UnitState.CLEARED})


def set_view(spark: SparkSession, journal: Journal, unit: UnitRecord, state: str) -> None:
    """Point the view at one of its texts (`base`, `pending`, `switched`): one `ALTER VIEW ... AS`."""
    journal.fence(f"setting the view {unit.details['view']} {state}")
    spark.sql(f"ALTER VIEW {unit.details['view']} AS {unit.details['texts'][state]}")


def _settle(unit: UnitRecord) -> None:
    time.sleep(float(unit.details.get("settle", 0)))


def _merged(spark: SparkSession, unit: UnitRecord) -> TableInfo:
    return read_table(spark, *unit.details["merged"])


def _register(spark: SparkSession, storage: Storage, journal: Journal, i: int) -> None:
    unit = journal.units[i]
    merged = _merged(spark, unit)
    journal.fence(f"installing {unit.live}")
    storage.mkdirs(split_location(unit.live)[0])
    storage.rename_strict(unit.incoming, unit.live)
    spark.sql(f"ALTER TABLE {merged.sql_name} ADD {partition_clause(unit.spec or {})} LOCATION {sql_string(unit.live)}")
    journal.record(storage, UnitState.REGISTERED, i)
    kill_point(UnitState.REGISTERED)


def _remove(storage: Storage, location: str, skip_trash: bool) -> None:
    if skip_trash:
        storage.delete(location)
    elif not storage.move_to_trash(location):
        raise OperationError(f"{location} could not be moved to the Trash; configure fs.trash.interval, then `recover`")


def _is_marker(name: str, names: list[str]) -> bool:
    """A finished job's `_SUCCESS`, or a checksum of a marker or of a file no longer there (local filesystems)."""
    if name.startswith(".") and name.endswith(".crc"):
        return name[1:-4] not in names or _is_marker(name[1:-4], names)
    return name == "_SUCCESS"


def _leftovers(storage: Storage, location: str) -> list[str]:
    """Everything in a directory but markers: files (data or a writer's hidden ones) and subdirectories."""
    names = storage.list_names(location, directories=False)
    return [n for n in names if not _is_marker(n, names)] + storage.list_names(location, directories=True)


def _remove_empty(storage: Storage, location: str) -> bool:
    """Delete a directory holding only markers, not recursively: a file that lands at the last moment makes it fail
    (False), not vanish."""
    names = storage.list_names(location, directories=False)
    for name in names:
        if _is_marker(name, names):
            storage.delete(child(location, name), recursive=False)
    return storage.delete_empty_dir(location)


def _clear_fine(spark: SparkSession, storage: Storage, info: TableInfo, fine: dict, used: list[str], skip: bool) -> str:
    """Move a planned fine partition's files away, each on its own and only while it is still the planned file (size
    and modification time read right before its move); then, when nothing else is left in it (a writer's newer files,
    one at work: a subdirectory such as `_temporary`, an in-progress file) and it is still the partition planned on,
    unregister it and remove its directory (not recursively; unless shared or outside the table's). A file a writer
    adds at any moment stays, registered. A directory another table's data lives in (checked right before,
    `taken_directories`) keeps every file."""
    location, planned = fine["location"], fine["files"]
    if not storage.exists(location):
        return f"{fine['partition']}: already gone"
    now = partition_identity(spark, info, fine["spec"])
    taken = taken_directories(spark, storage, info, [Unit(fine["spec"], location)]).get(fine["partition"])
    entries = storage.list_entries(location)
    ours = [f for f in entries.files if planned.get(f.name) == [f.size, f.modification_time]]
    if taken:  # another table reads these files: unregistered (the merged copy shows them), files left in place
        others = [f.name for f in entries.files if f not in ours] + entries.directories
        if others:
            raise OperationError(
                f"{fine['partition']} holds another table's data ({taken}) and files written since the copy "
                f"({others[0]}): neither can be moved away nor kept registered without showing rows twice; move one "
                "of them elsewhere, then run `lakekeeper-dagster recover`"
            )
        if now is not None and now == fine["identity"]:
            unregister_partition(spark, info, fine["spec"])
        return f"{fine['partition']}: unregistered; its files left in place: another table's data ({taken})"
    kill_point("clearing")
    moved = 0
    for f in ours:
        still = storage.stat(f.path)
        if still is not None and [still.size, still.modification_time] == planned[f.name]:
            _remove(storage, f.path, skip)
            checksum = child(location, f".{f.name}.crc")  # local filesystems: not always moved with the file
            if storage.exists(checksum):
                _remove(storage, checksum, skip)
            moved += 1
    others = _leftovers(storage, location)  # a writer's newer files, `_temporary`, in-progress files
    others += [w.path for w in find_writers(storage, info.location or "", location)]
    stays = f"{fine['partition']}: its {moved} merged file(s) moved away; it stays"
    if others or (now is not None and now != fine["identity"]):
        return f"{stays} with {len(others)} other(s)" if others else f"{stays}: it was re-created meanwhile"
    # its directory goes too (before the entry) when it lies inside the table's and no other partition uses it
    table = storage.qualify(info.location or "").rstrip("/")
    inside = location.startswith(table + "/") and not any(shares_location(location, other) for other in used)
    if inside and not _remove_empty(storage, location):
        return f"{stays}: a file arrived as its directory was removed"
    now = partition_identity(spark, info, fine["spec"])  # read again: re-added meanwhile, it is someone else's
    if now is not None and now != fine["identity"]:
        return f"{stays}: it was re-created meanwhile"
    if now is not None:
        unregister_partition(spark, info, fine["spec"])
    if inside:
        return f"{fine['partition']}: dropped"
    return f"{fine['partition']}: its {moved} merged file(s) moved away; unregistered, its directory left in place"


def replaced_since_copied(spark: SparkSession, storage: Storage, info: TableInfo, unit: UnitRecord) -> str | None:
    """What replaced a planned fine partition's data since the copy, or None: the partition dropped, moved or
    re-created, a planned file gone or rewritten (an `INSERT OVERWRITE`). Files added beside the planned ones are
    not: they stay registered, shown once the view is unfiltered again."""
    for fine in unit.details["fine"]:
        now = partition_identity(spark, info, fine["spec"])
        if now is None or list(now) != list(fine["identity"]):
            return f"{fine['partition']} was dropped, moved or re-created"
        try:
            files = {f.name: [f.size, f.modification_time] for f in storage.list_entries(fine["location"]).files}
        except StorageError:
            return f"the directory of {fine['partition']} is gone"
        gone = [name for name, planned in fine["files"].items() if files.get(name) != list(planned)]
        if gone:
            return f"{fine['partition']}'s file {gone[0]} was removed or rewritten (an overwrite)"
    return None


def _clear(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, i: int) -> list[str]:
    """Move the planned fine partitions' files away. Before the first one moves (journaled `clearing`), they are
    checked once more: a partition overwritten (or dropped, moved) since the copy would have its old rows shown
    again from the merged copy beside its new ones, so the period is rolled back instead (a UnitFailure), as the
    switched view still allows: the merged side hidden, the source's partitions whole."""
    unit = journal.units[i]
    # A journal of a release before this check (no `recheck`) may have moved files without a `clearing` record.
    if unit.details.get("recheck") and not unit.details.get("clearing"):
        replaced = replaced_since_copied(spark, storage, info, unit)
        if replaced:
            roll_back(spark, storage, journal, i)
            raise UnitFailure(f"{replaced} after the switch; this period's merge is undone, the source unchanged")
        journal.record(storage, UnitState.SWITCHED, i, clearing=True)
    planned = {f["partition"] for f in unit.details["fine"]}
    used = [u.location for u in list_partitions(spark, info) if u.partition not in planned]
    journal.fence(f"clearing the fine partitions of {unit.partition}")
    done = [_clear_fine(spark, storage, info, f, used, unit.details["skip_trash"]) for f in unit.details["fine"]]
    spark.catalog.refreshTable(info.sql_name)
    journal.record(storage, UnitState.CLEARED, i)
    kill_point(UnitState.CLEARED)
    return done


def _forward(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, i: int) -> list[str]:
    """From SWITCHED on: the planned fine partitions cleared, the view unfiltered (MERGED)."""
    unit = journal.units[i]
    done = _clear(spark, storage, info, journal, i) if unit.state == UnitState.SWITCHED else []
    set_view(spark, journal, unit, "base")
    journal.record(storage, UnitState.MERGED, i)
    kill_point(UnitState.MERGED)
    return done


def changed_since_listed(spark: SparkSession, storage: Storage, info: TableInfo, unit: UnitRecord) -> str | None:
    """What changed in a planned fine partition since it was listed for the copy, or None: re-created or moved
    elsewhere, a file added, changed or gone, a subdirectory (a writer's, read recursively). The switch would hide
    such a partition's new rows, or show rows the copy also holds once the view is unfiltered again."""
    for fine in unit.details["fine"]:
        now = partition_identity(spark, info, fine["spec"])
        if now is None or list(now) != list(fine["identity"]):
            return f"{fine['partition']} was dropped, moved or re-created"
        try:
            entries = storage.list_entries(fine["location"])
        except StorageError:
            return f"the directory of {fine['partition']} is gone"
        files = {f.name: [f.size, f.modification_time] for f in entries.files}
        if files != {name: list(v) for name, v in fine["files"].items()}:
            return f"the files of {fine['partition']} changed (added, rewritten or removed)"
        if [d for d in entries.directories if not is_hidden(d)]:
            return f"{fine['partition']} holds a subdirectory"
    return None


def publish(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, i: int) -> list[str]:
    """Publish a WRITTEN period: the merged partition in place, the view switched to it, the fine data gone. A
    period whose fine partitions changed since the copy is rolled back right before the switch (a UnitFailure)."""
    unit = journal.units[i]
    journal.record(storage, UnitState.PENDING, i)
    set_view(spark, journal, unit, "pending")
    kill_point(UnitState.PENDING)
    _settle(unit)
    _register(spark, storage, journal, i)
    changed = changed_since_listed(spark, storage, info, unit)
    if changed:
        roll_back(spark, storage, journal, i)
        raise UnitFailure(f"{changed} since the copy; this period's merge is undone, nothing changed")
    set_view(spark, journal, unit, "switched")
    journal.record(storage, UnitState.SWITCHED, i)
    kill_point(UnitState.SWITCHED)
    _settle(unit)
    return _forward(spark, storage, info, journal, i)


def copy_listing(storage: Storage, location: str) -> dict:
    """Every entry directly under a copy's directory: its data files (size, mtime) and all names, hidden too."""
    files = {f.name: [f.size, f.modification_time] for f in storage.list_data_files(location)}
    return {"files": files, "names": storage.list_names(location, False) + storage.list_names(location, True)}


def roll_back(spark: SparkSession, storage: Storage, journal: Journal, i: int) -> None:
    """Undo a period before SWITCHED, or after it while no planned file was moved (`_clear`): the merged side hides
    it, its partition and copy go (the merged partition's directory only when it holds exactly the copy the journal
    recorded), the view unfiltered."""
    unit, left = journal.units[i], ""
    if unit.state not in (UnitState.PLANNED, UnitState.WRITTEN):
        set_view(spark, journal, unit, "pending")
        _settle(unit)
        merged = _merged(spark, unit)
        now = partition_identity(spark, merged, unit.spec or {})
        if now is not None and storage.qualify(now[0]).rstrip("/") == storage.qualify(unit.live).rstrip("/"):
            unregister_partition(spark, merged, unit.spec or {})
        if not storage.exists(unit.incoming) and storage.exists(unit.live):
            if copy_listing(storage, unit.live) != unit.details.get("copy"):  # not (only) the copy this run wrote
                left = f"{unit.live} left in place: it is not the copy this run wrote; move it away, then retry"
            else:
                storage.delete(unit.live)
        set_view(spark, journal, unit, "base")
    storage.delete(unit.incoming)
    journal.record(storage, UnitState.ROLLED_BACK, i, **({"outcome": left} if left else {}))


def finish_merge(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal) -> None:
    """Mark a merge run done, refresh the source's caches and remove its journal."""
    journal.record(storage, RunStep.DONE)
    spark.catalog.refreshTable(info.sql_name)
    record_run(spark, storage, journal)
    storage.delete(journal.directory)


def recover_merge(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal) -> list[str]:
    """Roll each interrupted period back before its switch, forward from it."""
    messages = []
    for i, unit in enumerate(journal.units):
        if unit.state in TERMINAL:
            continue
        if unit.state in FORWARD:
            try:
                _forward(spark, storage, info, journal, i)
            except UnitFailure as undone:  # overwritten after the switch: rolled back
                messages.append(f"{unit.label}: {undone} ({Recovery.ROLLED_BACK})")
                continue
            messages.append(f"{unit.label}: merged ({Recovery.ROLLED_FORWARD})")
        else:
            roll_back(spark, storage, journal, i)
            left = unit.details.get("outcome")
            undone = f"{unit.label}: merge undone, the source unchanged ({Recovery.ROLLED_BACK})"
            messages.append(f"{undone}; {left}" if left else undone)
    finish_merge(spark, storage, info, journal)
    return messages
