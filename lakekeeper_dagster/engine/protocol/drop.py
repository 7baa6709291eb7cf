"""Dropping a partition, journaled: the steps of a retention run's unit and their recovery.

Per partition: the intent is journaled (DROPPING, with the partition's identity: its location and create time in the
metastore) -> the metastore entry is removed, the data kept (UNREGISTERED) -> the directory is moved to the Trash, or
deleted with `skip_trash` (DROPPED). Recovery rolls a unit forward from DROPPING on, through the same steps, but never
removes a partition re-added since the crash (another identity under the same values), nor moves away a directory a
partition of the table uses again; a unit still PLANNED changed nothing and is aborted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import unquote

from lakekeeper_dagster.engine.errors import OperationError, UnitFailure
from lakekeeper_dagster.engine.faults import kill_point
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.fs.trash import move_to_trash, trash_location
from lakekeeper_dagster.engine.hive.catalog import list_partitions, partition_identity, unregister_partition
from lakekeeper_dagster.engine.hive.model import TableInfo, Unit
from lakekeeper_dagster.engine.hive.placement import taken_directories
from lakekeeper_dagster.engine.plan.retention import shares_location
from lakekeeper_dagster.engine.protocol.history import record_run
from lakekeeper_dagster.engine.protocol.journal import Journal, UnitRecord
from lakekeeper_dagster.engine.protocol.writers import wait_for_writers
from lakekeeper_dagster.engine.statuses import TERMINAL, Recovery, RunStep, UnitState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _same_place(storage: Storage, a: str, b: str) -> bool:
    return storage.qualify(a).rstrip("/") == storage.qualify(b).rstrip("/")


def _remove(storage: Storage, unit: UnitRecord) -> str:
    """Move the partition's directory to the Trash (or delete it with skip_trash); what happened, in words."""
    if not storage.exists(unit.live):
        return "its directory was already gone"
    if unit.details.get("skip_trash"):
        storage.delete(unit.live)
        return "deleted"
    place = trash_location(storage, unit.live)
    if not move_to_trash(storage, unit.live):
        raise OperationError(
            f"{unit.live} could not be moved to the Trash (none is configured for its filesystem any more); "
            "configure fs.trash.interval, then run `lakekeeper-dagster recover`. Its metastore entry is already gone"
        )
    return f"moved to the Trash ({place})"


def _unregister(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, i: int) -> str | None:
    """Remove the unit's metastore entry if it is still the partition the run planned on (UNREGISTERED); why not,
    otherwise (a partition re-added under the same values)."""
    unit = journal.units[i]
    now = partition_identity(spark, info, unit.spec or {})
    if now is not None and (now != unit.details["identity"] or not _same_place(storage, now[0], unit.live)):
        return f"re-added since (now at {now[0]}): left alone, and so is {unit.live}"
    if now is not None:
        existed = storage.exists(unit.live)
        journal.fence(f"unregistering partition {unit.partition}")
        unregister_partition(spark, info, unit.spec or {})
        if existed and not unit.details.get("skip_trash") and not storage.exists(unit.live):
            raise OperationError(
                f"the metastore deleted {unit.live} when {info.qualified_name} partition {unit.partition} was "
                "unregistered (external.table.purge?), instead of leaving it for the Trash; set the table's "
                "external.table.purge to false before the next retention run"
            )
    journal.record(storage, UnitState.UNREGISTERED, i)
    kill_point(UnitState.UNREGISTERED)
    return None


def _trash(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, i: int) -> str:
    """Move the unit's directory away unless a partition of the table uses it, a directory inside it or one around it
    (re-added, or pointed there since the plan: one listing right before the move), or another table's data lives in
    it (`taken_directories`, also right before the move); DROPPED, or ABORTED."""
    unit = journal.units[i]
    live = unquote(storage.qualify(unit.live))  # both unquoted: a location given as `dt%3D1` is the directory `dt=1`
    for other in list_partitions(spark, info):
        if shares_location(unquote(storage.qualify(other.location)), live):
            why = (
                f"re-added since at {other.location}: its directory is left in place"
                if other.partition == unit.partition
                else f"left in place: partition {other.partition} of the table uses {other.location} (pointed there "
                f"since the plan), so {unit.live} was not moved away"
            )
            journal.record(storage, UnitState.ABORTED, i, error=why)
            return why
    taken = taken_directories(spark, storage, info, [Unit(unit.spec, unit.live)]).get(unit.partition or "")
    if taken:  # another table created over it (or inside it) since the plan, or since a crash: its data stays
        why = f"left in place: another table's data would go with it ({taken}), so {unit.live} was not moved away"
        journal.record(storage, UnitState.ABORTED, i, error=why)
        return why
    journal.fence(f"removing {unit.live}")
    outcome = _remove(storage, unit)
    journal.record(storage, UnitState.DROPPED, i, outcome=outcome)
    kill_point(UnitState.DROPPED)
    return f"dropped; {unit.live} {outcome}"


def drop_unit(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, i: int) -> str:
    """Drop one planned partition: no write in progress in it, intent journaled, metastore entry removed (data
    kept), directory moved away; a write still in progress fails the unit with nothing changed."""
    unit = journal.units[i]
    try:
        wait_for_writers(storage, info.location, unit.live, f"{info.qualified_name} partition {unit.partition}")
    except UnitFailure as error:
        journal.record(storage, UnitState.FAILED, i, error=str(error))
        return f"not dropped: {error}"
    journal.record(storage, UnitState.DROPPING, i)
    kill_point(UnitState.DROPPING)
    return _finish(spark, storage, info, journal, i)


def _finish(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, i: int) -> str:
    if journal.units[i].state == UnitState.DROPPING:
        refused = _unregister(spark, storage, info, journal, i)
        if refused:
            journal.record(storage, UnitState.ABORTED, i, error=refused)
            return refused
    return _trash(spark, storage, info, journal, i)


def recover_retention(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal) -> list[str]:
    """Finish the drops a crash interrupted (from DROPPING on); partitions not yet begun were not touched."""
    messages = []
    for i, unit in enumerate(journal.units):
        if unit.state in TERMINAL:
            continue
        if unit.state == UnitState.PLANNED:
            journal.record(storage, UnitState.ABORTED, i, error="interrupted before its drop; nothing to undo")
            messages.append(f"{unit.label}: drop had not started, left as it was")
        else:
            done = _finish(spark, storage, info, journal, i)
            forward = journal.units[i].state == UnitState.DROPPED
            messages.append(f"{unit.label}: {done}" + (f" ({Recovery.ROLLED_FORWARD})" if forward else ""))
    finish_drops(spark, info, storage, journal)
    return messages


def finish_drops(spark: SparkSession, info: TableInfo, storage: Storage, journal: Journal) -> None:
    """Mark a retention run done, refresh the table's caches and remove its journal: nothing later needs it."""
    journal.record(storage, RunStep.DONE)
    record_run(spark, storage, journal)
    spark.catalog.refreshTable(info.sql_name)
    storage.delete(journal.directory)
