"""The directory swap that is the only step readers see: re-entrant from any state a crash can leave.

`live` moves to `retired`, the `kept` files (a compaction's large files, left as they are) move from `retired` into
`incoming`, `incoming` moves to `live`, and data files that arrived in `live` after the snapshot (`known` names) are
carried into the new `live` exactly once (each file by one atomic rename). The kept files move before the install,
so no reader sees the unit without them. Every rename refuses to land on an existing path, so HDFS never nests a
directory inside another.

A compaction unit's swap is verified (`verify=True`): the snapshot is compared (names, sizes, modification times)
with `live` right before the retire rename and with `retired` right after it, and the staged directory gets the
originals' attributes before the rename. Whatever differs, or fails, or when the staged data is gone, the swap is
undone (`restore_retired`) and `SwapAborted` raised: the caller aborts the unit, nothing is installed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import NamedTuple

from lakekeeper_dagster.engine.errors import StorageError, UnitFailure
from lakekeeper_dagster.engine.faults import kill_point
from lakekeeper_dagster.engine.fs.attributes import copy_attributes
from lakekeeper_dagster.engine.fs.hdfs import is_hdfs, open_files
from lakekeeper_dagster.engine.fs.locations import child, is_hidden, is_marker
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.protocol.guards import changed_files
from lakekeeper_dagster.engine.protocol.journal import UnitRecord

INSTALL_ATTEMPTS = 10

ArrivalRecorder = Callable[[dict[str, str]], None]
# A unit's `owners` detail: its new files keep their own owner and group (a rollback's originals), never the live's.
ORIGINAL_OWNERS = "originals"

log = logging.getLogger(__name__)


class Swapped(NamedTuple):
    """How a swap ended: `carried` files that arrived after the snapshot moved into the new directory; the
    attributes (`owner X`, `group Y`) of the originals the new directory and files could not be given."""

    carried: int
    not_carried: list[str]


class SwapAborted(UnitFailure):
    """The unit's swap was undone (its originals are live again, as the last writer left them); abort the unit."""


def _move_data_files(storage: Storage, source: str, target: str, skip: set[str]) -> int:
    """Move the data files of `source` not named in `skip` into `target`; return how many moved."""
    moved = 0
    for name in storage.list_names(source, directories=False):
        if is_hidden(name) or name in skip:
            continue
        storage.rename_strict(child(source, name), child(target, name))
        moved += 1
    return moved


def _take_arrivals(storage: Storage, unit: UnitRecord, record_arrived: ArrivalRecorder) -> int:
    """Move the data files a writer left in a re-created `live` into `incoming`, journaled before the first one
    moves (name in `incoming` -> name in `live`), so an undone swap gives them back (`give_back_arrived`) and recovery
    finishes the install; return how many moved. A name `incoming` already holds (Hive names a partition's first file
    `000000_0` again) is taken as `<name>_copy_lk<k>`: a compacted table's file names carry no meaning."""
    names = [n for n in storage.list_names(unit.live, directories=False) if not is_hidden(n)]
    if not names:
        return 0
    present = set(storage.list_names(unit.incoming, directories=False))
    taken = {}
    for name in names:
        target = name
        for k in range(1, len(present) + 2):
            if target not in present:
                break
            target = f"{name}_copy_lk{k}"
        taken[target] = name
        present.add(target)
    record_arrived(taken)
    for target, name in taken.items():
        storage.rename_strict(child(unit.live, name), child(unit.incoming, target))
    return len(taken)


def give_back_arrived(storage: Storage, unit: UnitRecord) -> None:
    """Move the files an install took from a re-created `live` (journaled `arrived`) back into `live` under their
    names, `live` re-created when needed (re-entrant): a swap that is undone keeps nothing of another writer's, let
    alone deletes it. A name taken again in `live` meanwhile stops it with both files in place."""
    arrived: dict[str, str] = unit.details.get("arrived", {})
    if not arrived or not storage.exists(unit.incoming):
        return
    present = set(storage.list_names(unit.incoming, directories=False))
    back = {taken: name for taken, name in arrived.items() if taken in present}
    if back and not storage.exists(unit.live):
        storage.mkdirs(unit.live)
    for taken, name in back.items():
        storage.rename_strict(child(unit.incoming, taken), child(unit.live, name))


def _writer_at_work(directory: str, what: str) -> StorageError:
    return StorageError(
        f"{directory} was re-created during the swap and a writer is working in it ({what}): once the writer is "
        "done, run `lakekeeper-dagster recover` for the table to finish the swap (the writer's files taken so far "
        "wait in the staging directory, journaled; nothing is deleted)"
    )


def _remove_if_no_data(storage: Storage, directory: str) -> bool:
    """Delete a directory holding only hidden files (markers, checksums); False when data arrived meanwhile.

    The final delete is not recursive, so a data file that lands at the last moment makes it fail, not vanish.
    """
    names = storage.list_names(directory, directories=False)
    for name in names:
        # Only markers go (a finished job's `_SUCCESS`, a moved data file's checksum); any other hidden file (a
        # writer's `.inprogress` or `.pending` file) is someone's work in progress.
        if is_hidden(name) and not is_marker(name, names):
            raise _writer_at_work(directory, name)
        if is_hidden(name):
            storage.delete(child(directory, name), recursive=False)
    subdirectories = storage.list_names(directory, directories=True)
    if subdirectories:
        raise _writer_at_work(directory, f"{subdirectories[0]}/")
    return storage.delete_empty_dir(directory)


def _carry_kept(storage: Storage, unit: UnitRecord, source: str, target: str) -> None:
    """Move the unit's kept files still in `source` into `target`, each by one atomic rename (re-entrant: a file
    already moved stays where it is)."""
    if not unit.kept:
        return
    present = set(storage.list_names(source, directories=False))  # one listing, not one call per kept file
    for name in unit.kept:
        if name in present:
            storage.rename_strict(child(source, name), child(target, name))
            kill_point("carrying_kept")


def restore_retired(storage: Storage, unit: UnitRecord) -> str | None:
    """Put the retired originals back as `live` (re-entrant; nothing to do when they were never retired). The kept
    files already carried into `incoming` go back into `retired` first, so none is left behind with the new data.

    When a writer re-created `live` meanwhile, the originals are NOT moved into it: an overwrite's new directory
    and an append cannot be told apart, and moving them in would bring back rows an overwrite deleted. They stay in
    `retired`, untouched, and the returned note says where; None when nothing was left aside.
    """
    live, retired = unit.live, unit.retired
    if not storage.exists(retired):
        return None
    _carry_kept(storage, unit, unit.incoming, retired)
    if not storage.exists(live):
        try:
            storage.rename_strict(retired, live)
            return None
        except StorageError:
            if not storage.exists(live):
                raise  # not a writer re-creating `live`: a real failure
    log.warning("%s was re-created by another writer; the files it held before are kept in %s", live, retired)
    return (
        f"another writer re-created {live} meanwhile, so the files it held before were left untouched in {retired}: "
        "compare the two and move what you need back (lakekeeper-dagster refuses to work beside that directory "
        "once no journal records it)"
    )


def _snapshot(unit: UnitRecord) -> dict[str, tuple[int, int] | None]:
    """The unit's snapshot; an old journal without sizes and times is compared by names."""
    return {name: unit.snapshot.get(name) for name in unit.known}


def _abort(storage: Storage, unit: UnitRecord, why: str) -> SwapAborted:
    aside = restore_retired(storage, unit)
    give_back_arrived(storage, unit)
    return SwapAborted(
        f"{unit.label}: {why}; the swap was undone, nothing of this run was installed and the directory is as the "
        "other job left it" + (f" ({aside})" if aside else "")
    )


def _verified(storage: Storage, unit: UnitRecord, directory: str, when: str, carried_into: str | None = None) -> None:
    """The snapshot compared with `directory`, plus the kept files already carried into `carried_into`."""
    files = storage.list_data_files(directory) if storage.exists(directory) else []  # deleted: every file is gone
    if carried_into is not None and unit.kept and storage.exists(carried_into):
        kept = set(unit.kept)
        files += [f for f in storage.list_data_files(carried_into) if f.name in kept]
    changed = changed_files(_snapshot(unit), files)
    if changed:
        raise _abort(
            storage,
            unit,
            f"{len(changed)} of its files (e.g. {changed[0]}) were removed or rewritten {when}: another job wrote it",
        )


def _refuse_held_open(storage: Storage, unit: UnitRecord, retired: str) -> None:
    """Undo the swap when a writer opened one of the rewritten originals after the last check (HDFS: what it
    appends shows in neither size nor time until it closes the file, and its stream follows the file into
    `retired`, out of the table). Once retired, no new writer reaches them by their old name."""
    if not is_hdfs(storage, retired):
        return
    rewritten = set(unit.known) - set(unit.kept)
    held = open_files(storage, [f for f in storage.list_data_files(retired) if f.name in rewritten])
    if held:
        raise _abort(
            storage,
            unit,
            f"its file {held[0]} was opened by a writer while it was being swapped (what it appends would have left "
            "the table with the originals)",
        )


def _retire(storage: Storage, unit: UnitRecord, verify: bool) -> list[str]:
    """Give the staged data the originals' attributes, then retire `live` (the rename readers see first); what of
    the attributes this process may not set (`fs/attributes.copy_attributes`)."""
    live, incoming, retired = unit.live, unit.incoming, unit.retired
    if verify:
        _verified(storage, unit, live, "since the compaction read it")
    try:
        owners = unit.details.get("owners") != ORIGINAL_OWNERS
        not_carried = copy_attributes(storage, live, incoming, owners=owners)
    except Exception as error:
        if not verify:
            raise
        raise _abort(storage, unit, f"its attributes could not be given to the new files ({error})") from None
    if not_carried and verify and not unit.details.get("accept_owner_change"):
        # The check before writing found them settable; the owner or group changed since, or its guess missed.
        raise _abort(
            storage,
            unit,
            f"its new files could not be given the originals' {', '.join(not_carried)} (this process may not set "
            "them; set accept_owner_change: true to compact anyway)",
        )
    if not_carried:
        log.warning("%s: kept the new files' %s (this process may not change them)", live, ", ".join(not_carried))
    kill_point("retiring")
    storage.rename_strict(live, retired)
    kill_point("retired")
    return not_carried


def finish_swap(
    storage: Storage,
    unit: UnitRecord,
    record_arrived: ArrivalRecorder,
    verify: bool = False,
    recovering: bool = False,
) -> Swapped:
    """Bring a unit from any point of its swap to the swapped state; return the number of files carried over and
    the attributes the new files could not be given (owner, group: this process may not set them).

    A `live` directory a writer re-created after the retire rename is taken in as late arrivals: `record_arrived`
    journals the names of its files before they move into `incoming`; a writer still at work there (a hidden file,
    a subdirectory) stops the swap, and the install is finished by recovery once the writer is done. With `verify`,
    raise `SwapAborted` after undoing the swap (the taken files given back) when the snapshot changed before or
    across the retire rename, when the attributes cannot be set, or when the staged data is gone. `recovering` (a
    run interrupted between the retire rename and the install, maybe days ago): a `live` directory found re-created,
    and not yet being taken in, is someone's newer write (an overwrite or an append, which cannot be told apart), so
    the swap is undone too, never mixed with it.
    """
    live, incoming, retired = unit.live, unit.incoming, unit.retired
    carried, not_carried = 0, []
    installing = storage.exists(incoming)  # False once the install rename happened (a run cut off after it)
    if not storage.exists(retired):
        if not storage.exists(incoming):
            if verify and storage.exists(live):
                raise _abort(storage, unit, f"its new data ({incoming}) is gone and the originals were never retired")
            raise StorageError(f"cannot swap {live}: neither the new data ({incoming}) nor the retired data exists")
        not_carried = _retire(storage, unit, verify)
    if storage.exists(incoming):
        if verify:
            # A writer that replaced or deleted a file between the last check and the rename is seen only here.
            _verified(storage, unit, retired, "while it was being swapped", carried_into=incoming)
            _refuse_held_open(storage, unit, retired)
            if recovering and storage.exists(live) and not unit.details.get("arrived"):
                raise _abort(storage, unit, f"{live} was written again while its swap was interrupted")
        _carry_kept(storage, unit, retired, incoming)
        kill_point("kept_carried")
        for attempt in range(INSTALL_ATTEMPTS):
            if storage.exists(live):
                # A writer re-created the live directory after it was retired: its files are late arrivals.
                carried += _take_arrivals(storage, unit, record_arrived)
                if not _remove_if_no_data(storage, live):
                    continue  # another file arrived meanwhile: move it too
            try:
                storage.rename_strict(incoming, live)
                break
            except StorageError:
                if attempt == INSTALL_ATTEMPTS - 1:
                    raise
        else:
            raise StorageError(
                f"could not install {incoming} as {live}: a writer kept re-creating {live}. Stop the writer, then "
                "run `lakekeeper-dagster recover` for the table (the new data is still in the staging directory)"
            )
        kill_point("installed_dir")
    elif verify and not storage.exists(live):
        # Retired, but the staged data is gone and nothing took the partition's place: the originals go back. (A
        # `live` that exists is taken as installed: undoing then could bring back rows a later overwrite deleted;
        # the originals stay in the backup either way.)
        raise _abort(storage, unit, f"its new data ({incoming}) is gone before it was installed")
    if not storage.exists(live):
        raise StorageError(
            f"cannot finish the swap of {live}: it is missing and neither {incoming} nor {retired} can replace it"
        )
    if recovering and not installing and _replaced_since_installed(storage, unit):
        # installed before the crash, overwritten since: files that arrived before the swap would bring back rows
        # the overwrite replaced. They stay with the originals (the backup's cleanup keeps that directory).
        log.warning(
            "%s was rewritten since its swap's install; the late files it would have carried back stay in %s",
            live,
            retired,
        )
        return Swapped(carried, not_carried)
    carried += _move_data_files(storage, retired, live, skip=set(unit.known))
    return Swapped(carried, not_carried)


def _replaced_since_installed(storage: Storage, unit: UnitRecord) -> bool:
    """Whether the files an installed unit put in place (a compaction's outputs, a rollback's originals: journaled
    with their size and modification time) are no longer all in `live` as they were: overwritten or re-created
    since."""
    written = unit.details.get("output_snapshot") or {}
    now = {f.name: [f.size, f.modification_time] for f in storage.list_data_files(unit.live)}
    return any(now.get(name) != list(v) for name, v in written.items())
