"""Diff: what a compaction (or archive) run changed, per partition, from its history records, its journal and the
files' footers (Avro: headers): location (must be unchanged), files, bytes, codecs and file schemas before/after, rows
and checksums, the metastore parameters the commit changed (statistics), and where the originals are kept. No data is
read unless `verify` (then both sides are re-counted)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from py4j.protocol import Py4JJavaError

from lakekeeper_dagster.engine.errors import OperationError, UnitFailure
from lakekeeper_dagster.engine.fs.locations import child
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive import backup as backups
from lakekeeper_dagster.engine.hive.catalog import current_location, read_table, table_units
from lakekeeper_dagster.engine.hive.history_table import read_rows
from lakekeeper_dagster.engine.hive.model import split_table_name
from lakekeeper_dagster.engine.protocol.journal import Journal, UnitRecord
from lakekeeper_dagster.engine.rewrite.avrofiles import read_header
from lakekeeper_dagster.engine.rewrite.content import directory_fingerprints
from lakekeeper_dagster.engine.rewrite.fingerprint import EMPTY, Fingerprint, combine
from lakekeeper_dagster.engine.rewrite.footers import read_footers
from lakekeeper_dagster.engine.rewrite.schema import data_schema
from lakekeeper_dagster.engine.statuses import Operation, UnitState
from spark_resources.py4j import job_description

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REWRITES = {str(Operation.COMPACT), str(Operation.ARCHIVE)}


@dataclass(frozen=True)
class UnitDiff:
    """One partition (or unpartitioned table) before and after a run."""

    partition: str | None
    location: str
    location_now: str | None
    files_before: int | None
    files_after: int | None
    bytes_before: int | None
    bytes_after: int | None
    codecs_before: tuple[str, ...]
    codecs_after: tuple[str, ...]
    schema_unchanged: bool | None  # the files' columns (names, in order); None when a side cannot be read
    rows_before: int | None
    rows_after: int | None
    checksum_before: str | None
    checksum_after: str | None
    backup_table: str | None
    originals: str | None  # the retired directory that keeps the rewritten originals; None once gone
    verified: bool | None = None  # with `verify`: the originals and the live files re-counted equal
    statistics: dict | None = None  # metastore parameter -> [before, after] the commit changed; None: not journaled

    @property
    def location_unchanged(self) -> bool:
        return self.location_now is not None and self.location_now.rstrip("/") == self.location.rstrip("/")

    def to_dict(self) -> dict:
        return {**asdict(self), "location_unchanged": self.location_unchanged}


@dataclass(frozen=True)
class RunDiff:
    table: str
    run_id: str
    operation: str
    units: tuple[UnitDiff, ...]

    def to_dict(self) -> dict:
        return {"table": self.table, "run_id": self.run_id, "operation": self.operation,
                "units": [u.to_dict() for u in self.units]}  # fmt: skip


@dataclass(frozen=True)
class _Files:
    """What the files of one side say of themselves: their codecs and their schemas."""

    codecs: tuple[str, ...]
    schemas: frozenset


def _files(spark: SparkSession, fmt: str, paths: list[str], label: str) -> _Files | None:
    """The codecs and schemas of these files, from their footers (Avro: headers); None when one cannot be read."""
    try:
        if fmt == "avro":
            headers = [read_header(spark, path) for path in paths]
            return _Files(tuple(sorted({h.codec for h in headers})), frozenset(h.schema for h in headers))
        footers = read_footers(spark, fmt, paths, label)
    except (UnitFailure, Py4JJavaError):  # a side that cannot be read (or gone meanwhile) shows as unknown
        return None
    codecs = tuple(sorted({c for f in footers if f.rows for c in f.codecs}))
    return _Files(codecs, frozenset(f.columns for f in footers))


def _journal_units(storage: Storage, spark: SparkSession, database: str, table: str, run_id: str) -> tuple:
    """The run's backup (None once dropped) and its journal's committed units by partition (empty without)."""
    found = [b for b in backups.find_backups(spark, database, f"{database}.{table}") if b.run_id == run_id]
    if not found:
        return None, {}
    journal = Journal.load(storage, found[0].journal)
    return found[0], {u.partition: u for u in journal.units if u.state == UnitState.COMMITTED}


def _recount(spark: SparkSession, storage: Storage, database: str, table: str, units: list[UnitRecord]) -> dict:
    """Re-read both sides of each unit (two Spark jobs): partition -> (originals, live) fingerprints."""
    info = read_table(spark, database, table)
    schema = data_schema(info)
    with job_description(spark, f"lakekeeper diff {info.qualified_name}: re-read {len(units)} live unit(s)"):
        live = directory_fingerprints(spark, info, schema, [u.live for u in units])
    originals = [u.retired for u in units] + [child(u.live, name) for u in units for name in u.kept]
    with job_description(spark, f"lakekeeper diff {info.qualified_name}: re-read the originals"):
        kept = directory_fingerprints(spark, info, schema, originals)
    found: dict[str | None, tuple[Fingerprint, Fingerprint]] = {}
    for u in units:
        then = combine([kept.get(storage.qualify(u.retired), EMPTY), kept.get(storage.qualify(u.live), EMPTY)])
        found[u.partition] = (then, live.get(storage.qualify(u.live), EMPTY))
    return found


def diff_run(
    spark: SparkSession, history_table: str, database: str, table: str, run_id: str | None = None, verify: bool = False
) -> RunDiff:
    """The diff of the most recent compaction or archive run of `database.table` in the history (or of `run_id`)."""
    name = f"{database}.{table}"
    hdb, htable = split_table_name(history_table, "history.table")
    records = [r for r in read_rows(spark, hdb, htable, source=name, run_id=run_id) if r["operation"] in REWRITES]
    if not records:
        what = f"run {run_id}" if run_id else "compaction or archive run"
        raise OperationError(f"no {what} of {name} in the history table {history_table}")
    run = records[-1]["run_id"]
    records = [r for r in records if r["run_id"] == run and r["status"] == str(UnitState.COMMITTED)]
    storage = Storage(spark)
    info = read_table(spark, database, table)
    specs = {u.partition: u.spec for u in table_units(spark, info)}
    backup, units = _journal_units(storage, spark, database, table, run)
    counted = _recount(spark, storage, database, table, list(units.values())) if verify and units else {}
    diffs = []
    for r in records:
        partition = r["partition_name"]
        unit = units.get(partition)
        label = f"{name} {partition or ''}".strip()
        live = storage.list_data_files(r["location"]) if storage.exists(r["location"]) else []
        after = _files(spark, info.file_format, [f.path for f in live], label)
        kept = [child(unit.live, n) for n in unit.kept] if unit else []
        olds = storage.list_data_files(unit.retired) if unit and storage.exists(unit.retired) else []
        before = _files(spark, info.file_format, [f.path for f in olds] + kept, label) if unit else None
        codecs = (before.codecs if before else (), after.codecs if after else ())
        verified = None
        if partition in counted:
            then, now = counted[partition]
            verified = then == now and then.rows == r["rows_before"] and then.checksum == r["checksum_before"]
        diffs.append(
            UnitDiff(
                partition, r["location"], current_location(spark, info, specs.get(partition)) if partition in specs
                else None, r["files_before"], r["files_after"], r["bytes_before"], r["bytes_after"],
                *codecs, before.schemas == after.schemas if before and after else None, r["rows_before"],
                r["rows_after"], r["checksum_before"], r["checksum_after"],
                backup.qualified_name if backup else None, unit.retired if unit else None, verified,
                unit.details.get("parameters") if unit else None,
            )
        )  # fmt: skip
    return RunDiff(name, run, records[0]["operation"] if records else "", tuple(diffs))


def render_diff(diff: RunDiff) -> str:
    """The diff as a Markdown table, one row per partition (the CLI prints it; Dagster shows it)."""

    def pair(a, b) -> str:
        return f"{a} -> {b}" if a != b else f"{a} (same)"

    lines = [
        f"{diff.table}: run {diff.run_id} ({diff.operation})",
        "",
        "| partition | location | files | bytes | codec | file schema | rows | checksum | verified | statistics "
        "| originals |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for u in diff.units:
        schema = {True: "unchanged", False: "CHANGED", None: "-"}[u.schema_unchanged]
        checksum = "equal" if u.checksum_before == u.checksum_after and u.checksum_before else "DIFFERENT"
        verified = {True: "equal", False: "DIFFERENT", None: "-"}[u.verified]
        statistics = ", ".join(f"{k} {pair(*v)}" for k, v in (u.statistics or {}).items()) or "-"
        lines.append(
            f"| {u.partition or '(table)'} | {'unchanged' if u.location_unchanged else 'MOVED'} {u.location} "
            f"| {pair(u.files_before, u.files_after)} | {pair(u.bytes_before, u.bytes_after)} "
            f"| {pair('+'.join(u.codecs_before) or '-', '+'.join(u.codecs_after) or '-')} | {schema} "
            f"| {pair(u.rows_before, u.rows_after)} | {checksum} | {verified} | {statistics} "
            f"| {u.backup_table or 'no backup'} {u.originals or '(originals gone)'} |"
        )
    return "\n".join(lines)
