"""Publishing one merged period, journaled: the steps after its copy is verified, and their recovery.

A period's unit (`live`: the merged partition's directory, `incoming`: the verified copy beside it; `details`: the
view, its three texts, the merged table and the planned fine partitions with their files) goes WRITTEN ->
PENDING (view: the merged side hides the period; readers see no change) -> REGISTERED (the copy renamed into place
and registered) -> SWITCHED (view: the period read from the merged table, its planned fine partitions hidden from
the source side; one metastore call) -> CLEARED (the planned files taken aside, then moved away; a fine partition
holding nothing else unregistered too: `protocol/merge_clear.py`) -> MERGED (view unfiltered again). After each
view change that precedes a data change the run pauses `settle` seconds, so a query that read the view just before
has listed its partitions.

Recovery rolls a unit back before SWITCHED (view pending, merged partition unregistered, the copy removed, view
unfiltered) and forward from SWITCHED (the same steps again: each is idempotent; a fine partition replaced since
the copy, found while the files are taken, still rolls it back). At every step the view shows each
row exactly once.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import StorageError, UnitFailure
from lakekeeper_dagster.engine.faults import kill_point
from lakekeeper_dagster.engine.fs.locations import is_hidden, split_location
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.catalog import (
    list_partitions,
    partition_identity,
    read_table,
    unregister_partition,
)
from lakekeeper_dagster.engine.hive.model import TableInfo, partition_clause, sql_string
from lakekeeper_dagster.engine.protocol.history import record_run
from lakekeeper_dagster.engine.protocol.journal import Journal, UnitRecord
from lakekeeper_dagster.engine.protocol.merge_clear import clear_in_place, drop_taken, give_back, take_planned_files
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


def _clear(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, i: int) -> list[str]:
    """Step 5 (`protocol/merge_clear.py`): every planned file taken aside (journaled `held`), then each fine
    partition dropped. One overwritten (or dropped, moved) since the copy, found before or while its files are taken,
    would have its old rows shown again from the merged copy beside its new ones: `undoing` is journaled, the
    partitions unchanged since taken get their files back and the period is rolled back instead (a UnitFailure), as
    the switched view still allows."""
    unit = journal.units[i]
    # A journal of a release before the taking that began clearing (`clearing`, or no recheck at all) ends in place.
    taking = unit.details.get("hold") or (unit.details.get("recheck") and not unit.details.get("clearing"))
    if taking and not unit.details.get("held"):
        replaced = unit.details.get("undoing") or take_planned_files(spark, storage, info, journal, i)
        if replaced:
            journal.fence(f"giving back the planned files of {unit.partition}")
            left = give_back(spark, storage, info, unit, journal.run_id)
            roll_back(spark, storage, journal, i)
            aside = f"; left aside, compare them with the partitions: {', '.join(left)}" if left else ""
            raise UnitFailure(
                f"{replaced} after the switch; this period's merge is undone, the source unchanged{aside}"
            )
    planned = {f["partition"] for f in unit.details["fine"]}
    used = [u.location for u in list_partitions(spark, info) if u.partition not in planned]
    journal.fence(f"clearing the fine partitions of {unit.partition}")
    skip = unit.details["skip_trash"]
    if taking:
        done = [drop_taken(spark, storage, info, f, used, skip, unit, journal.run_id) for f in unit.details["fine"]]
    else:
        done = [clear_in_place(spark, storage, info, f, used, skip) for f in unit.details["fine"]]
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
    """Undo a period before SWITCHED, or after it once its taken files are given back (`_clear`): the merged side hides
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
