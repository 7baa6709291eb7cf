"""The directory swap that is the only step readers see: re-entrant from any state a crash can leave.

`live` moves to `retired`, `incoming` moves to `live`, and data files that arrived in `live` after the snapshot
(`known` names) are carried into the new `live` exactly once (each by one atomic rename). Every rename refuses to
land on an existing path, so HDFS never nests a directory inside another.
"""

from __future__ import annotations

from lakekeeper_dagster.engine.errors import StorageError
from lakekeeper_dagster.engine.faults import kill_point
from lakekeeper_dagster.engine.fs.storage import Storage, child, is_hidden
from lakekeeper_dagster.engine.protocol.journal import UnitRecord

INSTALL_ATTEMPTS = 10


def _move_data_files(storage: Storage, source: str, target: str, skip: set[str]) -> int:
    """Move the data files of `source` not named in `skip` into `target`; return how many moved."""
    moved = 0
    for name in storage.list_names(source, directories=False):
        if is_hidden(name) or name in skip:
            continue
        storage.rename_file(child(source, name), child(target, name))
        moved += 1
    return moved


def _remove_if_no_data(storage: Storage, directory: str) -> bool:
    """Delete a directory holding only hidden files (markers, checksums); False when data arrived meanwhile.

    The final delete is not recursive, so a data file that lands at the last moment makes it fail, not vanish.
    """
    for name in storage.list_names(directory, directories=False):
        if is_hidden(name):
            storage.delete(child(directory, name), recursive=False)
    if storage.list_names(directory, directories=True):
        raise StorageError(f"{directory} was re-created during the swap and a writer is working in it; run recover")
    return storage.delete_empty_dir(directory)


def finish_swap(storage: Storage, unit: UnitRecord) -> int:
    """Bring a unit from any point of its swap to the swapped state; return the number of files carried over."""
    live, incoming, retired = unit.live, unit.incoming, unit.retired
    carried = 0
    if not storage.exists(retired):
        if not storage.exists(incoming):
            raise StorageError(f"cannot swap {live}: neither the new data ({incoming}) nor the retired data exists")
        storage.rename_strict(live, retired)
        kill_point("retired")
    if storage.exists(incoming):
        storage.copy_permission(retired, incoming)
        for attempt in range(INSTALL_ATTEMPTS):
            if storage.exists(live):
                # A writer re-created the live directory after it was retired: its files are late arrivals.
                carried += _move_data_files(storage, live, incoming, skip=set())
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
    if not storage.exists(live):
        raise StorageError(
            f"cannot finish the swap of {live}: it is missing and neither {incoming} nor {retired} can replace it"
        )
    carried += _move_data_files(storage, retired, live, skip=set(unit.known))
    return carried
