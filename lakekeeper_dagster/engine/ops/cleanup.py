"""Cleanup: delete the original files kept by old backups and drop the backups. Irreversible."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Collection
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import ConfigError, OperationError
from lakekeeper_dagster.engine.fs.locations import child, is_hidden, split_location
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.fs.trash import move_to_trash
from lakekeeper_dagster.engine.hive import backup as backups
from lakekeeper_dagster.engine.hive.catalog import list_databases, list_tables
from lakekeeper_dagster.engine.hive.model import split_table_name, validated_name
from lakekeeper_dagster.engine.plan.progress import Progress, ProgressEvent, no_progress, serialized
from lakekeeper_dagster.engine.protocol.history import HistoryRecord, iso_utc, record
from lakekeeper_dagster.engine.protocol.journal import HIDDEN_PREFIX, Journal, UnitRecord, new_run_id
from lakekeeper_dagster.engine.protocol.lease import TableLease
from lakekeeper_dagster.engine.statuses import Operation, ProgressStep, UnitState
from spark_resources.py4j import external_catalog, jvm, scala_list, scala_seq

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

_DURATION = re.compile(r"([0-9]+)([smhdw])\Z")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str, what: str = "--older-than") -> int:
    """`7d`, `12h`, `30m`, `45s`, `2w` -> seconds; anything else (empty, blank, spaces, a newline) is a ConfigError
    naming `what`: an age that is not given exactly must never widen a cleanup to every backup."""
    match = _DURATION.match(validated_name(text, what))
    if not match:
        raise ConfigError(f"{what} {text!r} is not a duration like 7d, 12h, 30m or 2w")
    return int(match.group(1)) * _SECONDS[match.group(2)]


def _kept_units(storage: Storage, backup: backups.Backup) -> list[UnitRecord]:
    """The committed units whose originals the backup keeps: only ever in hidden `.lk-old-*` directories."""
    journal = Journal.load(storage, backup.journal)
    units = [u for u in journal.units if u.state == UnitState.COMMITTED]
    return [u for u in units if split_location(u.retired)[1].startswith(f"{HIDDEN_PREFIX}old-")]


def metastore_locations(spark: SparkSession, storage: Storage) -> dict[str, set[str]]:
    """Every qualified location the metastore points at (each table's and each partition's) -> the tables using it.

    Cost: one `listDatabases`, per database one `listTables` and one `getTablesByName`, and per partitioned table
    one `listPartitions`: linear in the number of tables, independent of the number of files.
    """
    catalog = external_catalog(spark)
    java = jvm(spark)
    none, hadoop_path = java.scala.Option.empty(), java.org.apache.hadoop.fs.Path
    found: dict[str, set[str]] = {}

    def add(uri, owner: str) -> None:  # through a Path built from the URI: `%3D` in a URI is `=` in the path
        if not uri.isEmpty():
            found.setdefault(storage.qualify(str(hadoop_path(uri.get()).toString())).rstrip("/"), set()).add(owner)

    for database in list_databases(spark):
        names = list_tables(spark, database)
        if not names:
            continue
        for table in scala_seq(catalog.getTablesByName(database, scala_list(spark, names))):
            owner = f"{database}.{table.identifier().table()}"
            add(table.storage().locationUri(), owner)
            if table.partitionColumnNames().nonEmpty():
                for partition in scala_seq(catalog.listPartitions(database, str(table.identifier().table()), none)):
                    add(partition.storage().locationUri(), owner)
    return found


def _why_kept(
    storage: Storage, backup: backups.Backup, units: list[UnitRecord], references: dict[str, set[str]]
) -> str | None:
    """Why the backup must stay: a kept directory the metastore points at, or not holding what the journal says."""
    for unit in units:
        if not storage.exists(unit.retired):
            continue
        users = references.get(storage.qualify(unit.retired).rstrip("/"), set()) - {backup.qualified_name}
        if users:
            return f"{unit.retired} is the location of {', '.join(sorted(users))} (a restore by SET LOCATION?)"
        entries = storage.list_entries(unit.retired)
        now = {f.name: [f.size, f.modification_time] for f in entries.files}
        expected = {name: now.get(name) if v is None else v for name, v in unit.retired_snapshot().items()}
        if entries.directories or now != expected:
            return f"{unit.retired} no longer holds the files the compaction kept (changed since)"
        hidden = [n for n in storage.list_names(unit.retired, directories=False) if is_hidden(n) and not _marker(n)]
        if hidden:  # a writer's in-progress file retired with the originals: its data is nowhere else
            return f"{unit.retired} holds a file a writer may still need ({hidden[0]})"
    return None


def _marker(name: str) -> bool:
    """A finished job's `_SUCCESS` marker, or a checksum (local filesystems)."""
    return name == "_SUCCESS" or (name.startswith(".") and name.endswith(".crc"))


def _records(
    backup: backups.Backup, units: list[UnitRecord], run_id: str, started: float, state: UnitState, reason: str
) -> list[HistoryRecord]:
    """The history of a cleanup: per unit of the backup, the originals it kept (before) and what is left (after)."""
    records = []
    for unit in units:
        snapshot = unit.retired_snapshot()
        files, size = len(snapshot), sum(v[0] for v in snapshot.values() if v)
        left = (0, 0) if state == UnitState.DROPPED else (files, size)
        records.append(
            HistoryRecord(
                run_id, str(Operation.CLEANUP), backup.source, unit.partition, str(state), reason, iso_utc(started),
                round(time.time() - started, 3), files_before=files, bytes_before=size, files_after=left[0],
                bytes_after=left[1], backup_table=backup.qualified_name, location=unit.retired,
            )
        )  # fmt: skip
    return records


def _state_dir_of(backup: backups.Backup) -> str:
    """`<state>/journal/<run>` -> `<state>`."""
    return split_location(split_location(backup.journal)[0])[0]


def _refuse_unfinished_runs(storage: Storage, backup: backups.Backup) -> None:
    """A crashed compaction or rollback may still need the originals this backup keeps: recover first."""
    root = split_location(backup.journal)[0]
    for name in storage.list_names(root, directories=True):
        if not Journal.load(storage, child(root, name)).done:
            raise OperationError(
                f"table {backup.source} has an interrupted run ({name}) that may still need the files of "
                f"{backup.qualified_name}; run `lakekeeper-dagster recover --table {backup.source}` first. "
                "Nothing was deleted."
            )


def _remove(storage: Storage, location: str, skip_trash: bool) -> str:
    if not storage.exists(location):
        return "already gone"
    if not skip_trash and move_to_trash(storage, location):
        return "moved to the Trash"
    storage.delete(location)
    return "deleted"


def matching_backups(
    spark: SparkSession,
    *,
    database: str | None = None,
    table: str | None = None,
    older_than_seconds: int | None = None,
) -> list[backups.Backup]:
    """The backups of `table` (DB.TABLE), else of every table of `database`, at least `older_than_seconds` old."""
    if table is not None:
        db, _ = split_table_name(table)
        found = backups.find_backups(spark, db, table)
    elif database is not None:
        found = backups.find_backups(spark, validated_name(database, "database"))
    else:
        raise OperationError("cleanup needs --table DB.TABLE or --database DB")
    if older_than_seconds is not None:
        found = [b for b in found if b.age_seconds() >= older_than_seconds]
    return found


def cleanup_backups(
    spark: SparkSession,
    *,
    database: str | None = None,
    table: str | None = None,
    older_than_seconds: int | None = None,
    skip_trash: bool = False,
    dry_run: bool = False,
    owner: str = "",
    only: Collection[str] | None = None,
    progress: Progress = no_progress,
) -> list[str]:
    """Delete the data of matching backups and drop them; one line per backup (what would happen with dry_run).

    A backup is kept (reported, nothing of it deleted) when the metastore points a table or partition other than
    the backup itself at one of its directories, or when a directory no longer holds the snapshot its compaction
    journal recorded (names, sizes, modification times; names alone for journals without them). Every delete and
    the drop are fenced by the table's lease. `progress` hears of each backup dropped or kept (not in a dry run).
    """
    found = matching_backups(spark, database=database, table=table, older_than_seconds=older_than_seconds)
    if only is not None:  # the backups a user was shown and confirmed: never one made since
        found = [b for b in found if b.qualified_name in only]
    storage = Storage(spark)
    references = metastore_locations(spark, storage) if found else {}
    progress = serialized(progress)
    lines = []
    for backup in found:
        units = _kept_units(storage, backup)
        dirs = [u.retired for u in units]
        if dry_run:
            kept = _why_kept(storage, backup, units, references)
            lines.append(
                f"kept {backup.qualified_name} (backup of {backup.source}): {kept}; nothing of it would be deleted"
                if kept
                else f"would drop {backup.qualified_name} (backup of {backup.source}) and delete {len(dirs)} "
                f"director{'y' if len(dirs) == 1 else 'ies'}: {', '.join(dirs) or '-'}"
            )
            continue
        run_id, started = new_run_id(), time.time()
        with TableLease(storage, _state_dir_of(backup), backup.source, run_id, owner) as lease:
            _refuse_unfinished_runs(storage, backup)
            kept = _why_kept(storage, backup, units, references)  # under the lease: no run of ours changes them now
            if kept:
                lines.append(f"kept {backup.qualified_name} (backup of {backup.source}): {kept}; nothing of it deleted")
                progress(ProgressEvent(ProgressStep.CLEANED, backup.source, detail=lines[-1]))
                record(spark, storage, _records(backup, units, run_id, started, UnitState.ABORTED, kept))
                continue
            outcomes = []
            for directory in dirs:
                lease.ensure_held(f"deleting {directory}")
                outcomes.append(f"{directory} {_remove(storage, directory, skip_trash)}")
            lease.ensure_held(f"dropping {backup.qualified_name}")
            backups.drop_backup(spark, backup.database, backup.name)
            storage.delete(backup.journal)
        done = "; ".join(outcomes) or "no data"
        lines.append(f"dropped {backup.qualified_name} (backup of {backup.source}); {done}")
        record(spark, storage, _records(backup, units, run_id, started, UnitState.DROPPED, done))
        progress(ProgressEvent(ProgressStep.CLEANED, backup.source, detail=lines[-1]))
    return lines
