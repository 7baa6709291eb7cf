"""The history of every operation: one record per unit a run acted on, appended to the history table when the run
finishes (`record_run`, called where each kind of run is marked done) and never failing the run.

The records are first spooled to a pending file in a local directory, then every pending file (these, and any an
earlier failed write left) is claimed by a rename and appended to the table; a failed append puts its files back,
to be flushed first by the next run. Where the records go comes from the `HistorySink` the caller installs with
`recorded` (the command line and the Dagster ops do): without one, nothing is recorded.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.faults import fail_point, kill_point
from lakekeeper_dagster.engine.fs.storage import DataFile, Storage
from lakekeeper_dagster.engine.hive.history_table import DAY, append_rows
from lakekeeper_dagster.engine.hive.model import split_table_name
from lakekeeper_dagster.engine.protocol.journal import Journal, UnitRecord
from lakekeeper_dagster.engine.statuses import RunKind, UnitState
from spark_resources.py4j import java_cause

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

PENDING_SUFFIX = ".jsonl"
CLAIMED_PREFIX = ".claimed-"  # `.claimed-<host>-<pid>-<pending name>`: a flush under way (or killed)


def tool_version() -> str:
    try:
        return version("lakekeeper-dagster")
    except PackageNotFoundError:
        return "unknown"


def iso_utc(seconds: float) -> str:
    """`2026-11-27T09:50:01Z`: how the history stores times (sorts and compares as text)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@dataclass(frozen=True)
class HistoryRecord:
    """What one operation did to one unit (the history table's columns, `hive/history_table.py`)."""

    run_id: str
    operation: str
    table_name: str
    partition_name: str | None
    status: str
    reason: str
    started_at: str
    seconds: float
    files_before: int | None = None
    files_after: int | None = None
    bytes_before: int | None = None
    bytes_after: int | None = None
    rows_before: int | None = None
    rows_after: int | None = None
    checksum_before: str | None = None
    checksum_after: str | None = None
    backup_table: str | None = None
    location: str | None = None
    host: str | None = None
    tool_version: str | None = None
    dagster_run_id: str | None = None
    os_user: str | None = None

    def row(self) -> dict:
        return {**asdict(self), DAY: self.started_at[:10]}


@dataclass(frozen=True)
class HistorySink:
    """Where records go: the history table `D.T`, the local directory of pending records, and who runs."""

    table: str
    pending_dir: Path
    dagster_run_id: str | None = None

    def stamped(self, record: HistoryRecord) -> HistoryRecord:
        """`record` with who wrote it (this process) and the tool's version."""
        return replace(
            record,
            tool_version=tool_version(),
            dagster_run_id=self.dagster_run_id,
            os_user=getpass.getuser(),
            host=record.host or socket.gethostname(),
        )


_SINK: ContextVar[HistorySink | None] = ContextVar("lakekeeper_history_sink", default=None)


@contextmanager
def recorded(sink: HistorySink) -> Iterator[None]:
    """Record the history of every run finished meanwhile (in this thread or task) to `sink`."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


def _sizes(files: dict[str, list[int]] | list[DataFile]) -> tuple[int, int]:
    if isinstance(files, dict):
        return len(files), sum(int(v[0]) for v in files.values() if v)
    return len(files), sum(f.size for f in files)


def _after(storage: Storage, unit: UnitRecord, done: bool, before: tuple[int, int]) -> tuple[int, int]:
    """Files and bytes the unit's live directory holds now when the run changed it (one listing), else `before`."""
    return _sizes(storage.list_data_files(unit.live)) if done and storage.exists(unit.live) else before


def _figures(storage: Storage, journal: Journal, unit: UnitRecord) -> dict:
    """Files, bytes, rows and checksums before/after of one unit, from the journal (and its live directory)."""
    if journal.kind == RunKind.RETENTION:
        before = (unit.details.get("files"), unit.details.get("bytes"))
        after = (0, 0) if unit.state == UnitState.DROPPED else before
        return {"files_before": before[0], "bytes_before": before[1], "files_after": after[0], "bytes_after": after[1]}
    if journal.kind == RunKind.MERGE:  # the period's planned fine files before, its merged partition after
        before = (unit.details.get("files"), unit.details.get("bytes"))
        files_after, bytes_after = _after(storage, unit, unit.state == UnitState.MERGED, (0, 0))
        rows, checksum = unit.details.get("rows"), unit.details.get("checksum")
        merged = unit.state == UnitState.MERGED
        return {
            "files_before": before[0],
            "bytes_before": before[1],
            "files_after": files_after,
            "bytes_after": bytes_after,
            "rows_before": rows,
            "checksum_before": checksum,
            "rows_after": rows if merged else None,
            "checksum_after": checksum if merged else None,
        }
    before = _sizes({name: unit.snapshot.get(name) or [0] for name in unit.known})
    files_after, bytes_after = _after(storage, unit, unit.state == UnitState.COMMITTED, before)
    figures = {"files_before": before[0], "bytes_before": before[1]}
    figures |= {"files_after": files_after, "bytes_after": bytes_after}
    if journal.kind == RunKind.COMPACT:
        sides = (unit.details.get("input") or {}, unit.details.get("output") or {})
    else:  # a rollback undoes its compaction: the compaction's output before, its input after
        compaction = Journal.load(storage, unit.details["compaction_journal"]).units[unit.details["compaction_unit"]]
        sides = (compaction.details.get("output") or {}, compaction.details.get("input") or {})
    for side, values in zip(("before", "after"), sides, strict=True):
        figures |= {f"rows_{side}": values.get("rows"), f"checksum_{side}": values.get("checksum")}
    return figures


def run_records(storage: Storage, journal: Journal) -> list[HistoryRecord]:
    """One record per unit of a finished run, from its journal (kept until the run's end is recorded)."""
    seconds = round(time.time() - journal.created_at, 3)
    records = []
    for unit in journal.units:
        reason = unit.details.get("error") or unit.details.get("outcome") or ""
        records.append(
            HistoryRecord(
                journal.run_id,
                str(journal.operation),
                f"{journal.database}.{journal.table}",
                unit.partition,
                str(unit.state),
                str(reason),
                iso_utc(journal.created_at),
                seconds,
                backup_table=journal.backup_table,
                location=unit.live,
                host=journal.host,
                **_figures(storage, journal, unit),
            )
        )
    return records


def record_run(spark: SparkSession, storage: Storage, journal: Journal) -> None:
    """Append the records of a finished run to the installed sink's history; never raises (logs instead)."""
    if _SINK.get() is None:
        return
    try:
        records = run_records(storage, journal)
    except Exception:
        log.exception("history: the records of run %s could not be built; none recorded", journal.run_id)
        return
    record(spark, storage, records)


def record(spark: SparkSession, storage: Storage, records: Sequence[HistoryRecord]) -> None:
    """Spool `records` and flush every pending record to the installed sink's history table; never raises: a
    failed write is logged and its records stay pending for the next run."""
    try:
        _record(spark, storage, records)
    except Exception:  # the history never fails the run it describes (its data change is done already)
        log.exception("history: %d record(s) not recorded: %s", len(records), [asdict(r) for r in records])


def _record(spark: SparkSession, storage: Storage, records: Sequence[HistoryRecord]) -> None:
    sink = _SINK.get()
    if sink is None or not records:
        return
    stamped = [sink.stamped(r) for r in records]
    try:
        _spool(sink.pending_dir, stamped)
    except OSError as error:
        log.error("history: cannot spool to %s (%s); writing %d record(s) directly", sink.pending_dir, error,
                  len(stamped))  # fmt: skip
        try:
            _append(spark, storage, sink.table, [r.row() for r in stamped])
        except Exception:
            log.exception("history: records lost: %s", json.dumps([r.row() for r in stamped]))
        return
    try:
        flush(spark, storage, sink)
    except OSError:  # the pending directory itself: its records stay there
        log.exception("history: cannot flush the pending records in %s", sink.pending_dir)


def _spool(directory: Path, records: Sequence[HistoryRecord]) -> None:
    """Write the records as one pending file, whole (a temporary name, then a rename)."""
    directory.mkdir(parents=True, exist_ok=True)
    name = f"pending-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}{PENDING_SUFFIX}"
    temporary = directory / f".{name}.tmp"
    temporary.write_text("".join(json.dumps(r.row(), sort_keys=True) + "\n" for r in records), encoding="utf-8")
    os.replace(temporary, directory / name)


def _append(spark: SparkSession, storage: Storage, table: str, rows: list[dict], token: str | None = None) -> None:
    database, name = split_table_name(table, "history.table")
    append_rows(spark, storage, database, name, rows, token)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reclaim(directory: Path) -> None:
    """Put back the pending files a killed flush of this host had claimed."""
    host = socket.gethostname()
    for path in directory.glob(f"{CLAIMED_PREFIX}{host}-*"):
        pid, _, name = path.name.removeprefix(f"{CLAIMED_PREFIX}{host}-").partition("-")
        if pid.isdigit() and not _alive(int(pid)):
            os.replace(path, directory / name)


def flush(spark: SparkSession, storage: Storage, sink: HistorySink) -> int:
    """Append every pending record of `sink` to its table, one pending file at a time; the number written. Each file
    is claimed by a rename first (two flushes never take one file), and appended under its own name as the token
    (`append_rows`): records that landed before a failure or a kill are not appended again when the file is retried.
    A failed write is logged, and its file and the ones after it stay pending for the next run."""
    directory = sink.pending_dir
    if not directory.is_dir():
        return 0
    _reclaim(directory)
    claimed: list[tuple[Path, Path]] = []
    for path in sorted(directory.glob(f"pending-*{PENDING_SUFFIX}")):
        mine = directory / f"{CLAIMED_PREFIX}{socket.gethostname()}-{os.getpid()}-{path.name}"
        try:
            os.rename(path, mine)
        except FileNotFoundError:  # another flush claimed it
            continue
        claimed.append((path, mine))
    written = 0
    for index, (path, mine) in enumerate(claimed):
        rows: list[dict] = []
        try:
            rows = [json.loads(line) for line in mine.read_text(encoding="utf-8").splitlines()]
            _append(spark, storage, sink.table, rows, token=path.name.removesuffix(PENDING_SUFFIX))
            fail_point("history_appended")
            kill_point("history_appended")
        except Exception as error:
            for back, taken in claimed[index:]:
                os.replace(taken, back)
            log.warning(
                "history: %d pending file(s) (%d record(s) in the first) could not be written to %s (%s); kept in %s, "
                "written at the next run", len(claimed) - index, len(rows), sink.table, java_cause(error), directory,
            )  # fmt: skip
            return written
        mine.unlink()
        written += len(rows)
    return written
