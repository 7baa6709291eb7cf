"""Cleanup: delete the original files kept by old backups and drop the backups. Irreversible."""

from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import ConfigError, OperationError
from lakekeeper_dagster.engine.fs.storage import Storage, child, split_location
from lakekeeper_dagster.engine.hive import backup as backups
from lakekeeper_dagster.engine.hive.model import split_table_name, validated_name
from lakekeeper_dagster.engine.protocol.journal import HIDDEN_PREFIX, Journal, new_run_id
from lakekeeper_dagster.engine.protocol.lease import TableLease
from lakekeeper_dagster.engine.statuses import UnitState

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


def _retired_dirs(storage: Storage, backup: backups.Backup) -> list[str]:
    """The directories holding the backup's original files: only ever hidden `.lk-old-*` directories."""
    journal = Journal.load(storage, backup.journal)
    dirs = [u.retired for u in journal.units if u.state == UnitState.COMMITTED]
    return [d for d in dirs if split_location(d)[1].startswith(f"{HIDDEN_PREFIX}old-")]


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
    if not skip_trash and storage.move_to_trash(location):
        return "moved to the Trash"
    storage.delete(location)
    return "deleted"


def cleanup_backups(
    spark: SparkSession,
    *,
    database: str | None = None,
    table: str | None = None,
    older_than_seconds: int | None = None,
    skip_trash: bool = False,
    dry_run: bool = False,
    owner: str = "",
) -> list[str]:
    """Delete the data of matching backups and drop them; one line per backup (what would happen with dry_run)."""
    if table:
        db, _ = split_table_name(table)
        found = backups.find_backups(spark, db, table)
    elif database:
        found = backups.find_backups(spark, database)
    else:
        raise OperationError("cleanup needs --table DB.TABLE or --database DB")
    if older_than_seconds is not None:
        found = [b for b in found if b.age_seconds() >= older_than_seconds]
    storage = Storage(spark)
    lines = []
    for backup in found:
        dirs = _retired_dirs(storage, backup)
        if dry_run:
            lines.append(
                f"would drop {backup.qualified_name} (backup of {backup.source}) and delete {len(dirs)} "
                f"director{'y' if len(dirs) == 1 else 'ies'}: {', '.join(dirs) or '-'}"
            )
            continue
        with TableLease(storage, _state_dir_of(backup), backup.source, new_run_id(), owner):
            _refuse_unfinished_runs(storage, backup)
            outcomes = [f"{d} {_remove(storage, d, skip_trash)}" for d in dirs]
            backups.drop_backup(spark, backup.database, backup.name)
            storage.delete(backup.journal)
        done = "; ".join(outcomes) or "no data"
        lines.append(f"dropped {backup.qualified_name} (backup of {backup.source}); {done}")
    return lines
