"""Retention: drop a table's partitions older than an age, metastore entry and data (to the Trash).

Plan (`plan/retention.py`, printed as the dry run with every refusal) -> refuse before anything changes (the
max-fraction guard; without `skip_trash`: no Trash, or a table whose `external.table.purge` lets the metastore delete
the data) -> under the table's lease, with interrupted runs recovered first and no write staging at the table's root,
plan again and drop partition by partition through the journaled steps of `protocol/drop.py`. Compaction backups
still holding a dropped partition are reported: its data stays readable there until `cleanup`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import ConfigError, OperationError, StorageError
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.fs.trash import has_trash
from lakekeeper_dagster.engine.hive.backup import find_backups
from lakekeeper_dagster.engine.hive.catalog import list_partitions, partition_identity, read_table
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.hive.placement import taken_directories
from lakekeeper_dagster.engine.plan.partition_time import PartitionClock, utc_now
from lakekeeper_dagster.engine.plan.retention import RetentionCandidate, RetentionPlan, plan_retention
from lakekeeper_dagster.engine.policies import RETENTION_WITH_MERGE, TablePolicies, policy_age
from lakekeeper_dagster.engine.protocol.drop import drop_unit, finish_drops
from lakekeeper_dagster.engine.protocol.journal import Journal, UnitRecord, new_run_id
from lakekeeper_dagster.engine.protocol.recovery import exclusive
from lakekeeper_dagster.engine.protocol.writers import wait_for_writers
from lakekeeper_dagster.engine.statuses import RunKind, UnitState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class RetentionOutcome:
    """What a retention run did (or would do): its plan, a line per partition, what was dropped and where each
    partition's directory went, and the compaction backups still holding a dropped partition."""

    plan: RetentionPlan
    dry_run: bool
    lines: list[str]
    dropped: list[str] = field(default_factory=list)
    places: dict[str, str] = field(default_factory=dict)  # partition -> where its directory went
    backups: list[str] = field(default_factory=list)  # "db.backup: partition, ..."
    files: int = 0
    bytes: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # partition -> why it was not dropped


def _retainable(spark: SparkSession, database: str, table: str) -> TableInfo:
    """The table, unless retention may not drop from it (nothing is rewritten: bucketed, text or Avro tables are
    fine; views, backups, tables another system owns and tables without a location are not)."""
    info = read_table(spark, database, table)
    reason = info.unmanaged_reason() or (None if info.is_partitioned else "it is not partitioned")
    if reason:
        raise OperationError(f"table {info.qualified_name} cannot be managed by retention: {reason}")
    return info


def _plan(
    spark: SparkSession,
    storage: Storage,
    info: TableInfo,
    clock: PartitionClock,
    cutoff: datetime,
    policies: TablePolicies,
    force: bool,
) -> RetentionPlan:
    """The plan from the metastore's partitions, the older ones listed (files, bytes; None when missing) and checked
    against the other tables' directories."""
    candidates, older = [], []
    for unit in list_partitions(spark, info):
        spec = dict(unit.spec or {})
        files = size = None
        end = clock.end(spec)
        if end is not None and end <= cutoff:
            older.append(unit)
            try:
                entries = storage.list_entries(unit.location)
                files, size = len(entries.files), sum(f.size for f in entries.files)
            except StorageError:
                pass
        candidates.append(RetentionCandidate(unit.partition or "", spec, storage.qualify(unit.location), files, size))
    return plan_retention(
        info.qualified_name,
        storage.qualify(info.location),
        candidates,
        clock,
        cutoff,
        policies.retention.max_fraction,
        force,
        taken_directories(spark, storage, info, older),
    )


def _refusals(storage: Storage, info: TableInfo, plan: RetentionPlan, skip_trash: bool) -> list[str]:
    """Why the run may not go besides the plan's own guard: without `skip_trash`, what would put the data beyond
    the Trash."""
    return trash_refusals(storage, info) if plan.drop and not skip_trash else []


def trash_refusals(storage: Storage, info: TableInfo) -> list[str]:
    """What would put the data a run moves away beyond the Trash: no Trash, or `external.table.purge`."""
    refusals: list[str] = []
    name = info.qualified_name
    if not has_trash(storage, info.location):
        refusals.append(
            f"{name}: its filesystem has no Trash (fs.trash.interval is 0), so the dropped partitions could not "
            "be recovered; configure one, or pass --skip-trash (skip_trash: true in Dagster) to delete them. "
            "Nothing was changed"
        )
    if info.table_properties.get("external.table.purge", "false").strip().lower() == "true":
        refusals.append(
            f"{name}: its table property external.table.purge is true, so the metastore may delete a partition's "
            "data for good when retention unregisters it, instead of leaving it for the Trash; set it to false, "
            "or pass --skip-trash (skip_trash: true in Dagster) to delete the data. Nothing was changed"
        )
    return refusals


def _backups_holding(spark: SparkSession, info: TableInfo, specs: list[dict]) -> list[str]:
    """The table's compaction backups (found by their properties) that still hold one of these partitions."""
    found = []
    for backup in find_backups(spark, info.database, info.qualified_name):
        units = list_partitions(spark, read_table(spark, backup.database, backup.name))
        held = [u.partition or "" for u in units if dict(u.spec or {}) in specs]
        if held:
            found.append(f"{backup.qualified_name}: {', '.join(held)}")
    return found


def retain_table(
    spark: SparkSession,
    database: str,
    table: str,
    policies: TablePolicies,
    older_than: str | None = None,
    *,
    dry_run: bool = False,
    force: bool = False,
    skip_trash: bool = False,
    owner: str = "",
    now: datetime | None = None,
) -> RetentionOutcome:
    """Drop the partitions of `database.table` older than `older_than` (else `retention.older_than`); with
    `dry_run`, list them (partition, time, files, bytes) and change nothing."""
    info = _retainable(spark, database, table)
    name = info.qualified_name
    if policies.merges:
        raise ConfigError(f"{name}: table_overrides.{name}.merge is set: {RETENTION_WITH_MERGE}. Nothing was changed")
    clock = policies.clock(name)
    clock.check_columns(info.partition_columns, name)
    cutoff = (now or utc_now()) - policy_age(older_than, policies.retention.older_than, "retention.older_than", name)
    storage = Storage(spark)
    plan = _plan(spark, storage, info, clock, cutoff, policies, force)
    if dry_run:
        outcome = RetentionOutcome(plan, True, plan.lines(dry_run=True))
        outcome.lines += [f"  REFUSED: {r}" for r in _refusals(storage, info, plan, skip_trash)]
        _report_backups(spark, info, [item.candidate.spec for item in plan.drop], outcome, "would stay")
        return outcome
    refusals = [plan.refusal] if plan.refusal else []
    refusals += _refusals(storage, info, plan, skip_trash)
    if refusals:
        raise OperationError(refusals[0])
    run_id = new_run_id()
    with exclusive(spark, storage, info, run_id, owner) as lease:
        wait_for_writers(storage, info.location, None, name)  # no write staging at the root (one listing)
        plan = _plan(spark, storage, info, clock, cutoff, policies, force)  # after recovery, under the lease
        if plan.refusal:
            raise OperationError(plan.refusal)
        outcome = RetentionOutcome(plan, False, plan.lines(dry_run=False))
        units = []
        for item in plan.drop:
            spec, location = item.candidate.spec, item.candidate.location
            identity = partition_identity(spark, info, spec)
            if identity is None or storage.qualify(identity[0]).rstrip("/") != location.rstrip("/"):
                outcome.lines.append(f"  {item.candidate.partition}: dropped or moved since the listing; left alone")
                continue
            details = {"identity": identity, "skip_trash": skip_trash}
            details |= {"files": item.candidate.files, "bytes": item.candidate.bytes}
            units.append(UnitRecord(item.candidate.partition, spec, location, "", "", [], details=details))
        if not units:
            return outcome
        journal = Journal.new(info.location, info.database, info.name, run_id, RunKind.RETENTION, owner, units)
        journal.fence = lease.ensure_held
        journal.start(storage)
        for i, unit in enumerate(journal.units):
            done = drop_unit(spark, storage, info, journal, i)
            outcome.lines.append(f"  {unit.partition}: {done}")
            if unit.state == UnitState.DROPPED:
                outcome.dropped.append(unit.partition or "")
                outcome.places[unit.partition or ""] = done.removeprefix(f"dropped; {unit.live} ")
                outcome.files += unit.details.get("files") or 0
                outcome.bytes += unit.details.get("bytes") or 0
            else:
                outcome.failed[unit.partition or ""] = done
        finish_drops(spark, info, storage, journal)
    dropped = [u.spec or {} for u in journal.units if u.state == UnitState.DROPPED]
    _report_backups(spark, info, dropped, outcome, "stays")
    return outcome


def _report_backups(
    spark: SparkSession, info: TableInfo, specs: list[dict], outcome: RetentionOutcome, verb: str
) -> None:
    """Name the compaction backups still holding a dropped partition: its data {verb} readable there."""
    outcome.backups = _backups_holding(spark, info, specs) if specs else []
    for backup in outcome.backups:
        outcome.lines.append(
            f"  BACKUP {backup}: the data of these dropped partitions {verb} readable in this compaction backup "
            f"until `lakekeeper-dagster cleanup --table {info.qualified_name}` drops it"
        )
