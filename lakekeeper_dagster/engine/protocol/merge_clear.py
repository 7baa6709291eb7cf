"""Clearing a merged period's planned fine partitions (step 5 of `protocol/merge.py`), in two halves.

Taking, undoable: each fine partition is checked against the copy (its identity; each planned file's size and
modification time, in place or already taken), then its planned files are renamed, each while it is still the planned
one, into a hidden sibling (`.lk-held-<run>-<name>`). A partition found overwritten, dropped or moved since the copy
(before or while its files are taken) stops the taking, journaled (`undoing`): the partitions unchanged since their
files were taken get them back, the caller rolls the period back; the others' taken files (that partition's too)
stay held, named.

Dropping, once every planned file is taken (journaled `held`): a fine partition holding nothing else (markers aside)
has its directory removed, not recursively, and is unregistered; one a writer added files to keeps them, registered;
the held files go to the Trash (`--skip-trash`: deleted). A write into a fine partition after its files were taken
is a late partition of the period, as one after the merge: shown beside the merged copy.

Journals of a release before the taking (no `hold` in their details) that began clearing finish the way they began:
file by file, moved away from the partition directory (`clear_in_place`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import OperationError, StorageError
from lakekeeper_dagster.engine.faults import kill_point
from lakekeeper_dagster.engine.fs.locations import child, is_hidden, is_marker
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.fs.trash import move_to_trash
from lakekeeper_dagster.engine.hive.catalog import partition_identity, unregister_partition
from lakekeeper_dagster.engine.hive.model import TableInfo, Unit
from lakekeeper_dagster.engine.hive.placement import taken_directories
from lakekeeper_dagster.engine.plan.retention import shares_location
from lakekeeper_dagster.engine.protocol.journal import HELD_ROLE, Journal, UnitRecord, sibling
from lakekeeper_dagster.engine.protocol.writers import find_writers
from lakekeeper_dagster.engine.statuses import UnitState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def held_location(fine: dict, run_id: str) -> str:
    """Where the taking puts a fine partition's planned files: a hidden sibling of its directory."""
    return sibling(fine["location"], HELD_ROLE, run_id)


def _remove(storage: Storage, location: str, skip_trash: bool) -> None:
    if skip_trash:
        storage.delete(location)
    elif not move_to_trash(storage, location):
        raise OperationError(f"{location} could not be moved to the Trash; configure fs.trash.interval, then `recover`")


def _leftovers(storage: Storage, location: str) -> list[str]:
    """Everything in a directory but markers: files (data or a writer's hidden ones) and subdirectories."""
    names = storage.list_names(location, directories=False)
    return [n for n in names if not is_marker(n, names)] + storage.list_names(location, directories=True)


def _remove_empty(storage: Storage, location: str) -> bool:
    """Delete a directory holding only markers, not recursively: a file that lands at the last moment makes it fail
    (False), not vanish."""
    names = storage.list_names(location, directories=False)
    for name in names:
        if is_marker(name, names):
            storage.delete(child(location, name), recursive=False)
    return storage.delete_empty_dir(location)


def _listing(storage: Storage, location: str) -> dict[str, list[int]]:
    if not storage.exists(location):
        return {}
    return {f.name: [f.size, f.modification_time] for f in storage.list_data_files(location)}


def _replaced_since_copied(spark: SparkSession, storage: Storage, info: TableInfo, fine: dict, held: str) -> str | None:
    """What replaced a planned fine partition's data since the copy, or None: the partition dropped, moved or
    re-created, a planned file gone or rewritten (an `INSERT OVERWRITE`), counting a file already taken into `held`
    as in place. Files added beside the planned ones are not: they stay registered."""
    now = partition_identity(spark, info, fine["spec"])
    if now is None or list(now) != list(fine["identity"]):
        return f"{fine['partition']} was dropped, moved or re-created"
    in_place, taken = _listing(storage, fine["location"]), _listing(storage, held)
    for name, planned in fine["files"].items():
        if list(planned) not in (in_place.get(name), taken.get(name)):
            return f"{fine['partition']}'s file {name} was removed or rewritten (an overwrite)"
    return None


def _stat_of(storage: Storage, location: str) -> list[int] | None:
    found = storage.stat(location)
    return None if found is None else [found.size, found.modification_time]


def _take(storage: Storage, fine: dict, held: str) -> str | None:
    """Rename the planned files still in place into `held`, each right after checking it is still the planned file
    (and checked again once moved: a writer's file renamed in the instant between goes back); what changed when one
    is not (the partition is then replaced), else None. A rename the filesystem refuses while the file is still the
    planned one is an error (the run fails; `recover` takes again), not a change."""
    storage.mkdirs(held)
    replaced = f"{fine['partition']}'s file {{}} was removed or rewritten (an overwrite) as it was taken"
    for name, planned in fine["files"].items():
        source, target = child(fine["location"], name), child(held, name)
        if _stat_of(storage, target) is not None:
            continue  # taken before a crash
        if _stat_of(storage, source) != list(planned):
            return replaced.format(name)
        try:
            storage.rename_strict(source, target)
        except StorageError:
            if _stat_of(storage, target) is None:
                if _stat_of(storage, source) == list(planned):
                    raise
                return replaced.format(name)
        if _stat_of(storage, target) != list(planned):  # not the planned file: the writer's, back where it was
            with contextlib.suppress(StorageError):
                storage.rename_strict(target, source)
            return replaced.format(name)
    return None


def _remainder(storage: Storage, fine: dict) -> dict[str, list[int] | None]:
    """What a fine partition holds besides its planned files: data files (size, mtime) and subdirectories (None)."""
    if not storage.exists(fine["location"]):
        return {}
    entries = storage.list_entries(fine["location"])
    found: dict[str, list[int] | None] = {f.name: [f.size, f.modification_time] for f in entries.files}
    found |= {f"{d}/": None for d in entries.directories if not is_hidden(d)}
    return {name: v for name, v in found.items() if name not in fine["files"]}


def _unchanged_since_taken(spark: SparkSession, storage: Storage, info: TableInfo, fine: dict, after: dict) -> bool:
    """Whether a fine partition holds what it held besides its planned files right before they were taken
    (`after`), not counting those given back already: the same partition, nothing added, rewritten or removed (a
    write during the taking counts as a change: its files then stay aside rather than risk rows shown twice)."""
    now = partition_identity(spark, info, fine["spec"])
    if now is None or list(now) != list(fine["identity"]):
        return False
    planned = {name: list(v) for name, v in fine["files"].items()}
    current = {**_remainder(storage, fine), **_listing(storage, fine["location"])}
    current = {name: v for name, v in current.items() if planned.get(name) != v}
    return current == {name: (None if v is None else list(v)) for name, v in after.items()}


def give_back(spark: SparkSession, storage: Storage, info: TableInfo, unit: UnitRecord, run_id: str) -> list[str]:
    """Undo the taking (re-entrant): each fine partition still holding exactly what it held when its files were
    taken gets them back under their names; one changed since (an overwrite or an append cannot be told apart
    there), or the one found replaced while it was taken, keeps them aside, named. What was left aside."""
    left = []
    for fine in unit.details["fine"]:
        held = held_location(fine, run_id)
        if not storage.list_names(held, directories=False):
            if storage.exists(held):
                storage.delete_empty_dir(held)
            continue
        after = unit.details.get("after_take", {}).get(fine["partition"])
        if after is None or not _unchanged_since_taken(spark, storage, info, fine, after):
            left.append(f"{held} (planned files of {fine['partition']}, which was replaced or written meanwhile)")
            continue
        for name in storage.list_names(held, directories=False):
            try:
                storage.rename_strict(child(held, name), child(fine["location"], name))
            except StorageError:
                left.append(child(held, name))
        if storage.exists(held) and not storage.delete_empty_dir(held):
            left.append(held)
    return left


def take_planned_files(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, i: int) -> str:
    """The taking half (re-entrant): "" once every planned file is taken (journaled `held`, with the partitions
    holding another table's data, whose files stay in place); else why a fine partition was replaced since the copy,
    journaled `undoing` before anything is given back (`give_back`; the caller rolls the period back). What each
    partition holds once its files are taken is journaled (`after_take`): `give_back` returns files only to a
    partition still holding exactly that."""
    unit = journal.units[i]
    fines = unit.details["fine"]
    shared = taken_directories(spark, storage, info, [Unit(f["spec"], f["location"]) for f in fines])
    after_take = dict(unit.details.get("after_take", {}))
    for fine in fines:
        held = held_location(fine, journal.run_id)
        replaced = _replaced_since_copied(spark, storage, info, fine, held)
        if replaced is None and fine["partition"] not in shared:
            if fine["partition"] not in after_take:  # what it must hold once taken, journaled before the first move
                after_take[fine["partition"]] = _remainder(storage, fine)
                journal.record(storage, UnitState.SWITCHED, i, after_take={**after_take})
            kill_point("clearing")
            journal.fence(f"taking the planned files of {fine['partition']}")
            replaced = _take(storage, fine, held)
            if replaced is None:
                kill_point("held")
        if replaced:
            journal.record(storage, UnitState.SWITCHED, i, undoing=replaced)
            kill_point("undoing")
            return replaced
    journal.record(storage, UnitState.SWITCHED, i, held=True, shared=shared)
    return ""


def drop_taken(
    spark: SparkSession,
    storage: Storage,
    info: TableInfo,
    fine: dict,
    used: list[str],
    skip: bool,
    unit: UnitRecord,
    run_id: str,
) -> str:
    """The dropping half for one fine partition whose planned files are taken: its directory and entry go when
    nothing else is left in it and it is still the partition planned on (unless shared or outside the table's);
    then its taken files go to the Trash (or are deleted). A partition holding another table's data is unregistered,
    its files left in place."""
    location, held = fine["location"], held_location(fine, run_id)
    taken = unit.details["shared"].get(fine["partition"])
    if taken and storage.exists(location):
        outcome = _unregister_shared(spark, storage, info, fine, taken)
        if storage.list_names(held, directories=False):  # taken before another table came to read the directory
            return f"{outcome}; its planned files, taken before that, wait in {held}"
        return outcome
    moved = len(_listing(storage, held))  # only planned files: `_take` checks each once it is moved
    stays = f"{fine['partition']}: its {moved} merged file(s) moved away; it stays"
    exists = storage.exists(location)
    outcome = _drop_directory(spark, storage, info, fine, used, stays) if exists else _gone(spark, info, fine)
    if storage.exists(held):
        _remove(storage, held, skip)
    return outcome


def _gone(spark: SparkSession, info: TableInfo, fine: dict) -> str:
    """A fine partition whose directory is gone: unregistered when it is still the partition planned on (its
    directory was removed right before a crash, `dropped`)."""
    now = partition_identity(spark, info, fine["spec"])
    if now is not None and list(now) == list(fine["identity"]):
        unregister_partition(spark, info, fine["spec"])
        return f"{fine['partition']}: dropped"
    return f"{fine['partition']}: already gone"


def _drop_directory(
    spark: SparkSession, storage: Storage, info: TableInfo, fine: dict, used: list[str], stays: str
) -> str:
    now = partition_identity(spark, info, fine["spec"])
    location = fine["location"]
    others = _leftovers(storage, location)  # a writer's newer files, `_temporary`, in-progress files
    others += [w.path for w in find_writers(storage, info.location or "", location)]
    if others or (now is not None and now != fine["identity"]):
        return f"{stays} with {len(others)} other(s)" if others else f"{stays}: it was re-created meanwhile"
    # its directory goes too (before the entry) when it lies inside the table's and no other partition uses it
    table = storage.qualify(info.location or "").rstrip("/")
    inside = location.startswith(table + "/") and not any(shares_location(location, other) for other in used)
    if inside and not _remove_empty(storage, location):
        return f"{stays}: a file arrived as its directory was removed"
    kill_point("dropped")
    now = partition_identity(spark, info, fine["spec"])  # read again: re-added meanwhile, it is someone else's
    if now is not None and now != fine["identity"]:
        return f"{stays}: it was re-created meanwhile"
    if now is not None:
        unregister_partition(spark, info, fine["spec"])
    if inside:
        return f"{fine['partition']}: dropped"
    return f"{stays.removesuffix('; it stays')}; unregistered, its directory left in place"


def _unregister_shared(spark: SparkSession, storage: Storage, info: TableInfo, fine: dict, taken: str) -> str:
    """Another table reads these files: unregistered (the merged copy shows them), files left in place."""
    planned = fine["files"]
    entries = storage.list_entries(fine["location"])
    ours = [f for f in entries.files if planned.get(f.name) == [f.size, f.modification_time]]
    others = [f.name for f in entries.files if f not in ours] + entries.directories
    if others:
        raise OperationError(
            f"{fine['partition']} holds another table's data ({taken}) and files written since the copy "
            f"({others[0]}): neither can be moved away nor kept registered without showing rows twice; move one "
            "of them elsewhere, then run `lakekeeper-dagster recover`"
        )
    now = partition_identity(spark, info, fine["spec"])
    if now is not None and now == fine["identity"]:
        unregister_partition(spark, info, fine["spec"])
    return f"{fine['partition']}: unregistered; its files left in place: another table's data ({taken})"


def clear_in_place(
    spark: SparkSession, storage: Storage, info: TableInfo, fine: dict, used: list[str], skip: bool
) -> str:
    """A journal of a release before the taking: a planned fine partition's files moved away one by one, each while
    still the planned file; then its directory and entry as in the dropping half."""
    location, planned = fine["location"], fine["files"]
    if not storage.exists(location):
        return _gone(spark, info, fine)
    taken = taken_directories(spark, storage, info, [Unit(fine["spec"], location)]).get(fine["partition"])
    if taken:
        return _unregister_shared(spark, storage, info, fine, taken)
    moved = 0
    for name, size_mtime in planned.items():
        still = storage.stat(child(location, name))
        if still is not None and [still.size, still.modification_time] == list(size_mtime):
            _remove(storage, child(location, name), skip)
            checksum = child(location, f".{name}.crc")  # local filesystems: not always moved with the file
            if storage.exists(checksum):
                _remove(storage, checksum, skip)
            moved += 1
    stays = f"{fine['partition']}: its {moved} merged file(s) moved away; it stays"
    return _drop_directory(spark, storage, info, fine, used, stays)
