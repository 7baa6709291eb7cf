"""Retention: drop a table's partitions older than an age, metastore entry and data (to the Trash).

Plan (`plan/retention.py`, printed as the dry run) -> refuse before anything changes (the max-fraction guard, no
Trash without `skip_trash`) -> under the table's lease, with interrupted runs recovered first, plan again and drop
partition by partition through the journaled steps of `protocol/drop.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import OperationError, StorageError
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.catalog import list_partitions, partition_identity, read_table
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.plan.partition_time import PartitionClock, utc_now
from lakekeeper_dagster.engine.plan.retention import RetentionCandidate, RetentionPlan, plan_retention
from lakekeeper_dagster.engine.policies import TablePolicies, policy_age
from lakekeeper_dagster.engine.protocol.drop import drop_unit, finish_drops
from lakekeeper_dagster.engine.protocol.journal import Journal, UnitRecord, new_run_id
from lakekeeper_dagster.engine.protocol.recovery import exclusive
from lakekeeper_dagster.engine.statuses import RunKind, UnitState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class RetentionOutcome:
    """What a retention run did (or would do): its plan, a line per partition, and what was dropped."""

    plan: RetentionPlan
    dry_run: bool
    lines: list[str]
    dropped: list[str] = field(default_factory=list)
    files: int = 0
    bytes: int = 0


def _retainable(spark: SparkSession, database: str, table: str) -> TableInfo:
    info = read_table(spark, database, table)
    reason = info.skip_reason() or (None if info.is_partitioned else "it is not partitioned")
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
    """The plan from the metastore's partitions, the older ones listed (files, bytes; None when missing)."""
    candidates = []
    for unit in list_partitions(spark, info):
        spec = dict(unit.spec or {})
        files = size = None
        end = clock.end(spec)
        if end is not None and end <= cutoff:
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
    )


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
    clock = policies.clock(name)
    clock.check_columns(info.partition_columns, name)
    cutoff = (now or utc_now()) - policy_age(older_than, policies.retention.older_than, "retention.older_than", name)
    storage = Storage(spark)
    plan = _plan(spark, storage, info, clock, cutoff, policies, force)
    if dry_run:
        return RetentionOutcome(plan, True, plan.lines(dry_run=True))
    if plan.refusal:
        raise OperationError(plan.refusal)
    if plan.drop and not skip_trash and not storage.has_trash(info.location):
        raise OperationError(
            f"{name}: its filesystem has no Trash (fs.trash.interval is 0), so the dropped partitions could not "
            "be recovered; configure one, or pass --skip-trash (skip_trash: true in Dagster) to delete them. "
            "Nothing was changed"
        )
    run_id = new_run_id()
    with exclusive(spark, storage, info, run_id, owner) as lease:
        plan = _plan(spark, storage, info, clock, cutoff, policies, force)  # after recovery, under the lease
        if plan.refusal:
            raise OperationError(plan.refusal)
        outcome = RetentionOutcome(plan, False, plan.lines(dry_run=False))
        units = []
        for item in plan.drop:
            identity = partition_identity(spark, info, item.candidate.spec)
            if identity is None:
                continue  # dropped by someone else since the listing
            details = {"identity": identity, "skip_trash": skip_trash}
            details |= {"files": item.candidate.files, "bytes": item.candidate.bytes}
            spec, location = item.candidate.spec, item.candidate.location
            units.append(UnitRecord(item.candidate.partition, spec, location, "", "", [], details=details))
        if not units:
            return outcome
        journal = Journal.new(info.location, info.database, info.name, run_id, RunKind.RETENTION, owner, units)
        journal.fence = lease.ensure_held
        journal.start(storage)
        for i, unit in enumerate(journal.units):
            outcome.lines.append(f"  {unit.partition}: {drop_unit(spark, storage, info, journal, i)}")
            if unit.state == UnitState.DROPPED:
                outcome.dropped.append(unit.partition or "")
                outcome.files += unit.details.get("files") or 0
                outcome.bytes += unit.details.get("bytes") or 0
        finish_drops(spark, info, storage, journal)
    return outcome
