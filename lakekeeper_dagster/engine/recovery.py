"""Recovery: finish or undo runs a crash interrupted, from their journals; refuse leftovers no journal explains."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine import backup as backups
from lakekeeper_dagster.engine.catalog import read_table, table_exists
from lakekeeper_dagster.engine.commit import commit_units, finish_run
from lakekeeper_dagster.engine.errors import CompactionError, LeaseHeldError
from lakekeeper_dagster.engine.journal import (
    ABORTED,
    COMPACT,
    HIDDEN_PREFIX,
    PLANNED,
    SWAPPING,
    TERMINAL,
    Journal,
    journal_root,
    load_journals,
    new_run_id,
    state_dir,
)
from lakekeeper_dagster.engine.lease import TableLease
from lakekeeper_dagster.engine.model import TableInfo
from lakekeeper_dagster.engine.storage import Storage, child, split_location

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

ROLLED_FORWARD = "rolled forward"
ROLLED_BACK = "rolled back"


SWAP_BEGUN = (SWAPPING, "installed")  # "installed": a per-unit step of journals written before batched commits


def _recover_compaction(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal) -> list[str]:
    """Roll forward the units whose swap began (all committed together), roll back the others."""
    pending = [i for i, u in enumerate(journal.units) if u.state not in TERMINAL]
    forward = [i for i in pending if journal.units[i].state in SWAP_BEGUN]
    commit_units(spark, storage, info, journal, forward, analyze_stats=False)
    messages = []
    for i in pending:
        label = journal.units[i].partition or "(whole table)"
        if i in forward:
            messages.append(f"{label}: swap finished ({ROLLED_FORWARD})")
        else:
            messages.append(_roll_back_compaction_unit(spark, storage, info, journal, i))
    return messages


def _roll_back_compaction_unit(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal, i: int) -> str:
    unit = journal.units[i]
    label = unit.partition or "(whole table)"
    storage.delete(unit.incoming)
    backup_exists = journal.backup_table and table_exists(spark, info.database, journal.backup_table)
    if backup_exists and unit.spec:
        backups.drop_partition(spark, backups.table_sql(info.database, journal.backup_table), unit.spec)
    journal.record(storage, ABORTED, i, error="interrupted before the swap; undone by recover")
    return f"{label}: interrupted before the swap, temporary data removed ({ROLLED_BACK})"


def recover_journal(spark: SparkSession, storage: Storage, info: TableInfo, journal: Journal) -> list[str]:
    """Bring every unfinished unit of one run to a consistent state: forward once its swap began, else back."""
    from lakekeeper_dagster.engine.rollback import commit_rollback_unit, finish_rollback

    prefix = f"{info.qualified_name} run {journal.run_id} ({journal.kind})"
    if journal.kind == COMPACT:
        messages = [f"{prefix} {m}" for m in _recover_compaction(spark, storage, info, journal)]
        finish_run(spark, storage, info, journal)
        return messages
    messages = []
    for i, unit in enumerate(journal.units):
        if unit.state in TERMINAL:
            continue
        if unit.state == PLANNED:
            journal.record(storage, ABORTED, i, error="interrupted before the swap; nothing to undo")
            message = f"{unit.partition or '(whole table)'}: rollback had not started"
        else:
            commit_rollback_unit(spark, storage, info, journal, i)
            message = f"{unit.partition or '(whole table)'}: rollback finished ({ROLLED_FORWARD})"
        messages.append(f"{prefix} {message}")
    finish_rollback(spark, storage, info, journal)
    return messages


def recover_table(spark: SparkSession, storage: Storage, info: TableInfo) -> list[str]:
    """Recover every unfinished run of the table. The caller holds the table's lease."""
    messages = []
    for journal in load_journals(storage, info.location):
        if not journal.done:
            messages += recover_journal(spark, storage, info, journal)
    for message in messages:
        log.warning("recovered: %s", message)
    return messages


def refuse_leftovers(storage: Storage, info: TableInfo, unit_locations: list[str]) -> None:
    """Refuse to work beside hidden lakekeeper directories that no journal of the table records."""
    referenced = set()
    for journal in load_journals(storage, info.location):
        referenced |= journal.paths()
    strays = []
    units_by_parent: dict[str, set[str]] = {}
    for location in unit_locations:
        parent, name = split_location(location)
        units_by_parent.setdefault(parent, set()).add(name)
    for parent, unit_names in sorted(units_by_parent.items()):
        for name in storage.list_names(parent, directories=True):
            path = child(parent, name)
            ours = any(name.endswith(f"-{unit}") for unit in unit_names)  # not a neighbouring table's
            if name.startswith(HIDDEN_PREFIX) and ours and path not in referenced:
                strays.append(path)
    if strays:
        raise CompactionError(
            f"table {info.qualified_name}: found {len(strays)} lakekeeper director{'y' if len(strays) == 1 else 'ies'} "
            f"that no journal records: {', '.join(strays[:5])}. They may hold data: inspect them, move them away "
            "(or delete them if they are copies), then retry. Nothing was changed."
        )


def recover(spark: SparkSession, pairs: list[tuple[str, str]], owner: str = "") -> list[str]:
    """Recover the interrupted runs of these tables; a table whose lease a live process holds is left alone."""
    storage = Storage(spark)
    messages = []
    for database, table in pairs:
        info = read_table(spark, database, table)
        if info.skip_reason() or not storage.exists(journal_root(info.location)):
            continue
        try:
            with TableLease(storage, state_dir(info.location), info.qualified_name, new_run_id(), owner):
                messages += recover_table(spark, storage, info)
        except LeaseHeldError as held:
            messages.append(f"{info.qualified_name}: left alone: {held}")
    return messages
