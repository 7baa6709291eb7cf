"""Merge: old fine partitions copied into coarse ones of a companion table, read through a union view that never
shows a row twice or misses one.

Checks first (every ConfigError names its key, nothing changed) -> plan (`plan/merge.py`, printed as the dry run) ->
under the source's lease, with interrupted runs recovered first: the merged table and the view created when missing,
then period by period: the planned files copied into a hidden directory beside the merged partition and verified
(rows and content checksum against the planned files), then published through the journaled steps of
`protocol/merge.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import reduce
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import OperationError, StorageError, UnitFailure
from lakekeeper_dagster.engine.faults import kill_point
from lakekeeper_dagster.engine.fs.locations import child
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.catalog import list_partitions, partition_identity, read_table, table_exists
from lakekeeper_dagster.engine.hive.model import (
    TableInfo,
    partition_name,
    quote_identifier,
)
from lakekeeper_dagster.engine.hive.placement import taken_directories
from lakekeeper_dagster.engine.ops.merge_targets import (
    MergeTargets,
    create_targets,
    merge_targets,
    merged_location_refusal,
)
from lakekeeper_dagster.engine.ops.retention import trash_refusals
from lakekeeper_dagster.engine.plan.merge import (
    FineCandidate,
    MergeLayout,
    MergePeriod,
    MergePlan,
    plan_merge,
)
from lakekeeper_dagster.engine.plan.partition_time import utc_now
from lakekeeper_dagster.engine.policies import TablePolicies, policy_age
from lakekeeper_dagster.engine.protocol.journal import Journal, UnitRecord, new_run_id, sibling
from lakekeeper_dagster.engine.protocol.merge import copy_listing, finish_merge, publish
from lakekeeper_dagster.engine.protocol.recovery import exclusive
from lakekeeper_dagster.engine.protocol.writers import wait_for_writers
from lakekeeper_dagster.engine.rewrite.codec import normalize_codec
from lakekeeper_dagster.engine.rewrite.encodings import (
    changed_encodings,
    format_options,
    input_encodings,
    write_settings,
)
from lakekeeper_dagster.engine.rewrite.fingerprint import EMPTY, Fingerprint, aggregates, from_observation, observed
from lakekeeper_dagster.engine.rewrite.footers import read_footers
from lakekeeper_dagster.engine.rewrite.schema import data_schema, read_files
from lakekeeper_dagster.engine.statuses import RunKind, UnitState
from spark_resources.py4j import isolated_session, job_description

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

TARGET_FILE_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class PeriodCopy:
    """One merged partition's verification: `before` the rows and checksum of its period's planned fine files,
    `after` those of its copy as the view shows them."""

    partition: str
    before: Fingerprint
    after: Fingerprint

    @property
    def matches(self) -> bool:
        return self.before == self.after


@dataclass
class MergeOutcome:
    """What a merge run did (or would do): its plan, its lines, the periods merged and their figures, and every
    copy the run verified (merged or not)."""

    plan: MergePlan
    dry_run: bool
    lines: list[str]
    merged: list[str] = field(default_factory=list)  # the merged partitions
    partitions: int = 0  # fine partitions merged
    files: int = 0
    bytes: int = 0
    rows: int = 0
    copies: list[PeriodCopy] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # merged partition -> why its period was not merged


def _candidates(
    spark: SparkSession, storage: Storage, targets: MergeTargets, cutoff: datetime
) -> tuple[list[FineCandidate], dict[str, str]]:
    """Every partition of the source; the files of those whose period ended by `cutoff` (None: missing), and which
    of those hold another table's data (`taken_directories`)."""
    coarse_clock = targets.layout.coarse_clock
    found, older = [], []
    for unit in list_partitions(spark, targets.info):
        spec = dict(unit.spec or {})
        coarse = targets.layout.coarse_spec(targets.clock, spec)
        end = coarse_clock.end(coarse) if coarse else None
        files: dict[str, list[int]] | None = {}
        if end is not None and end <= cutoff:
            older.append(unit)
            try:
                files = {f.name: [f.size, f.modification_time] for f in storage.list_data_files(unit.location)}
            except StorageError:
                files = None
        found.append(FineCandidate(unit.partition or "", spec, storage.qualify(unit.location), files))
    return found, taken_directories(spark, storage, targets.info, older)


def _plan(spark: SparkSession, storage: Storage, targets: MergeTargets, cutoff: datetime) -> MergePlan:
    merged: set[str] = set()
    if table_exists(spark, *targets.merged):
        merged = {u.partition or "" for u in list_partitions(spark, read_table(spark, *targets.merged))}
    union = targets.union
    candidates, taken = _candidates(spark, storage, targets, cutoff)
    return plan_merge(
        targets.info.qualified_name,
        storage.qualify(targets.info.location or "").rstrip("/"),
        ".".join(targets.merged),
        ".".join(targets.view),
        targets.layout,
        targets.clock,
        candidates,
        merged,
        cutoff,
        lambda p: union.fits(p.spec, [f.spec for f in p.fine]),
        taken,
    )


def _source(spark: SparkSession, targets: MergeTargets, period: MergePeriod) -> DataFrame | None:
    """The planned files of the period's fine partitions, with their partition values, in the view's columns."""
    from pyspark.sql import functions as F

    info, schema, parts = targets.info, data_schema(targets.info), []
    for fine in period.fine:
        if fine.files:
            df = read_files(spark, info, schema, [child(fine.location, name) for name in sorted(fine.files)])
            values = [F.lit(fine.spec[c]).cast("string").alias(c) for c in info.partition_columns]
            parts.append(df.select(*[F.col(quote_identifier(c)) for c in targets.layout.data_columns], *values))
    return reduce(lambda a, b: a.unionByName(b), parts) if parts else None


def _to_merged(df: DataFrame, layout: MergeLayout) -> DataFrame:
    from pyspark.sql import functions as F

    kept = [F.col(quote_identifier(source)).alias(merged) for merged, source in layout.kept]
    return df.select(*[F.col(quote_identifier(c)) for c in layout.data_columns], *kept)


def _from_merged(df: DataFrame, layout: MergeLayout, spec: dict[str, str]) -> DataFrame:
    """A copy's rows as the view shows them."""
    from pyspark.sql import functions as F

    kept = {source: merged for merged, source in layout.kept}
    columns = []
    for column in layout.view_columns:
        if column in kept:
            columns.append(F.col(quote_identifier(kept[column])).alias(column))
        elif column in spec:
            columns.append(F.lit(spec[column]).cast("string").alias(column))
        else:
            columns.append(F.col(quote_identifier(column)))
    return df.select(*columns)


def _merged_schema(targets: MergeTargets) -> StructType:
    from pyspark.sql.types import StringType, StructField, StructType

    kept = [StructField(n, StringType()) for n, _ in targets.layout.kept]
    return StructType([*data_schema(targets.info).fields, *kept])


def count_merged(spark: SparkSession, targets: MergeTargets, location: str, spec: dict[str, str]) -> Fingerprint:
    """Rows and checksum of a merged partition's files at `location` as the view shows them (one Spark job)."""
    fmt, schema = targets.info.file_format, _merged_schema(targets)
    copy = _from_merged(spark.read.schema(schema).format(fmt).load(location), targets.layout, spec)
    with job_description(spark, f"lakekeeper merge {targets.info.qualified_name} {partition_name(spec)}: count"):
        row = copy.agg(*aggregates(copy.schema)).collect()[0]
    return Fingerprint(int(row["rows"]), str(row["checksum"]))


def _write(spark: SparkSession, targets: MergeTargets, unit: UnitRecord, period: MergePeriod) -> PeriodCopy:
    """Copy the period's planned files into `unit.incoming` as compaction writes (their encodings, the table's
    format properties, the table's codec or else the files' own), then count the copy: both fingerprints.
    UnitFailure when the planned files disagree on an encoding or the copy did not keep one."""
    info, layout, fmt = targets.info, targets.layout, targets.info.file_format
    label = f"{info.qualified_name} {period.partition}"
    inputs = [child(fine.location, name) for fine in period.fine for name in sorted(fine.files or {})]
    footers = read_footers(spark, fmt, inputs, label) if inputs else []
    encodings = input_encodings(footers, label)
    codec = normalize_codec(info.codec_property or next((f.codecs[0] for f in footers if f.codecs), "snappy"))
    # read with no file skipped and names matched as Hive does, write the inputs' encodings, whatever the caller's
    spark = isolated_session(spark, write_settings(encodings))
    source = _source(spark, targets, period)
    with job_description(spark, f"lakekeeper merge {label}: write"):
        if source is None:  # its fine partitions hold no file: an empty merged partition
            spark.createDataFrame([], _merged_schema(targets)).write.format(fmt).save(unit.incoming)
            return PeriodCopy(period.partition, EMPTY, EMPTY)
        watched, observation = observed(source, f"merge-{unit.incoming}")
        files = max(1, -(-period.bytes // TARGET_FILE_BYTES))
        writer = _to_merged(watched, layout).coalesce(files).write.format(fmt).options(**format_options(info))
        writer.option("compression", codec).save(unit.incoming)
    written = [f.path for f in Storage(spark).list_data_files(unit.incoming)]
    changed = changed_encodings(encodings, read_footers(spark, fmt, written, label))
    if changed:
        raise UnitFailure(f"its copy changed the files' encoding ({changed[0]}); nothing changed")
    before = from_observation(observation)
    return PeriodCopy(period.partition, before, count_merged(spark, targets, unit.incoming, unit.spec or {}))


def _unit(
    spark: SparkSession,
    storage: Storage,
    targets: MergeTargets,
    merged: TableInfo,
    period: MergePeriod,
    run_id: str,
    skip: bool,
    settle: float,
) -> UnitRecord | None:
    """The period's journal unit, its fine partitions' identities taken now; None when one changed since."""
    live = storage.qualify(child(merged.location or "", partition_name(period.spec)))
    fine = []
    for f in period.fine:
        identity = partition_identity(spark, targets.info, f.spec)
        if identity is None or storage.qualify(identity[0]).rstrip("/") != f.location.rstrip("/"):
            return None
        fine.append({"partition": f.partition, "spec": f.spec, "location": f.location, "files": f.files})
        fine[-1]["identity"] = identity
    union = targets.union
    texts = {"base": union.base(), "pending": union.pending(period.spec)}
    texts["switched"] = union.switched(period.spec, [f.spec for f in period.fine])
    details = {"view": targets.view_sql, "texts": texts, "merged": list(targets.merged), "fine": fine}
    details |= {"skip_trash": skip, "settle": settle, "files": period.files, "bytes": period.bytes}
    details["hold"] = True  # takes the planned files aside before any goes (`protocol/merge_clear.py`)
    return UnitRecord(period.partition, period.spec, live, sibling(live, "merge", run_id), "", [], details=details)


def merge_table(
    spark: SparkSession,
    database: str,
    table: str,
    policies: TablePolicies,
    older_than: str | None = None,
    *,
    dry_run: bool = False,
    skip_trash: bool = False,
    owner: str = "",
    now: datetime | None = None,
) -> MergeOutcome:
    """Merge the periods of `database.table` older than `older_than` (else `merge.older_than`) into the merged
    table; with `dry_run`, list them and change nothing."""
    targets = merge_targets(spark, database, table, policies)
    name = targets.info.qualified_name
    cutoff = (now or utc_now()) - policy_age(older_than, policies.merge.older_than, "merge.older_than", name)
    storage = Storage(spark)
    plan = _plan(spark, storage, targets, cutoff)
    refusals = trash_refusals(storage, targets.info) if plan.periods and not skip_trash else []
    refusals += [r for r in [merged_location_refusal(spark, storage, targets)] if r]
    if dry_run:
        return MergeOutcome(plan, True, plan.lines(dry_run=True) + [f"  REFUSED: {r}" for r in refusals])
    if refusals:
        raise OperationError(refusals[0])
    run_id = new_run_id()
    info = targets.info
    with exclusive(spark, storage, info, run_id, owner) as lease:
        wait_for_writers(storage, info.location, None, name)
        refused = merged_location_refusal(spark, storage, targets)  # a directory made since the check above
        if refused:
            raise OperationError(refused)
        merged = create_targets(spark, targets)
        plan = _plan(spark, storage, targets, cutoff)  # after recovery, under the lease
        outcome = MergeOutcome(plan, False, plan.lines(dry_run=False))
        units, periods = [], []
        for period in plan.periods:
            unit = _unit(spark, storage, targets, merged, period, run_id, skip_trash, policies.merge.settle_seconds)
            if unit is None:
                outcome.lines.append(f"  {period.partition}: a fine partition changed since the listing; left alone")
            else:
                units.append(unit)
                periods.append(period)
        if not units:
            return outcome
        journal = Journal.new(info.location, info.database, info.name, run_id, RunKind.MERGE, owner, units)
        journal.fence = lease.ensure_held
        journal.start(storage)
        for i, period in enumerate(periods):
            outcome.lines.append(_merge_period(spark, storage, targets, journal, i, period, outcome))
        finish_merge(spark, storage, info, journal)
    return outcome


def _merge_period(
    spark: SparkSession,
    storage: Storage,
    targets: MergeTargets,
    journal: Journal,
    i: int,
    period: MergePeriod,
    outcome: MergeOutcome,
) -> str:
    """Copy, verify and publish one period; a period that cannot be copied fails with nothing changed."""
    unit = journal.units[i]
    try:
        if storage.exists(unit.live):
            raise UnitFailure(f"{unit.live} exists already (not registered): move it away, then retry")
        for fine in period.fine:
            label = f"{targets.info.qualified_name} partition {fine.partition}"
            wait_for_writers(storage, targets.info.location, fine.location, label)
        copy = _write(spark, targets, unit, period)
        outcome.copies.append(copy)
        if not copy.matches:
            raise UnitFailure(
                f"its copy differs from the planned files ({copy.after} != {copy.before}); nothing changed"
            )
        written = copy.before
    except UnitFailure as error:
        storage.delete(unit.incoming)
        journal.record(storage, UnitState.FAILED, i, error=str(error))
        outcome.failed[period.partition] = str(error)
        return f"  {period.partition}: not merged: {error}"
    copy = copy_listing(storage, unit.incoming)  # what proves, at a roll-back, that the directory is this copy
    journal.record(storage, UnitState.WRITTEN, i, rows=written.rows, checksum=written.checksum, copy=copy)
    kill_point(UnitState.WRITTEN)
    try:
        cleared = publish(spark, storage, targets.info, journal, i)
    except UnitFailure as error:
        outcome.failed[period.partition] = str(error)
        return f"  {period.partition}: not merged: {error}"
    outcome.merged.append(period.partition)
    outcome.partitions += len(period.fine)
    outcome.files += period.files
    outcome.bytes += period.bytes
    outcome.rows += written.rows
    return f"  {period.partition}: merged {written.rows} rows ({'; '.join(cleared)})"
