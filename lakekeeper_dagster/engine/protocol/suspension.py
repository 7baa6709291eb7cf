"""Suspension: a unit that failed `suspend_after` compaction runs in a row is left alone until a person resumes it.

A table's state directory (`journal.state_dir`, beside its lease and journals) holds `failures.json`: for each unit
whose last run(s) failed, how many runs in a row failed, the last reason and when. Each compaction run updates it
under the table's lease: a failed unit counts one more, a compacted or skipped one is forgotten. A unit at
`suspend_after` failures (0: never) is not compacted by any entry point (the CLI, a Dagster run, a run the sensor
requested): its result is `suspended` with the reason, `analyze` and the observation summary list it, and the sensor
stops requesting it, until `resume` (the CLI command, or a compaction run's `resume` config) forgets its failures.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import ConfigError
from lakekeeper_dagster.engine.fs.locations import child
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.catalog import find_partitions, read_table
from lakekeeper_dagster.engine.hive.model import validated_partition
from lakekeeper_dagster.engine.protocol.journal import new_run_id, state_dir
from lakekeeper_dagster.engine.protocol.lease import TableLease

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

FAILURES_FILE = "failures.json"
TABLE_UNIT = ""  # the key of an unpartitioned table's one unit


@dataclass(frozen=True)
class FailedRuns:
    """A unit's failed runs in a row: how many, the last one's reason and its time (ISO 8601 UTC)."""

    runs: int
    reason: str
    last: str

    def describe(self, unit: str | None, table: str) -> str:
        """Why the unit is suspended and how to resume it (a result's reason, an analyze line)."""
        partition = f" --partition '{unit}'" if unit else ""
        return (
            f"suspended after {self.runs} failed runs in a row (last {self.last}: {self.reason}); fix the cause, "
            f"then `lakekeeper-dagster resume --table {table}{partition}` (or a run's `resume` config) lets it run"
        )


def _path(location: str) -> str:
    return child(state_dir(location), FAILURES_FILE)


def read_failures(storage: Storage, location: str) -> dict[str, FailedRuns]:
    """The failed-run counts of the table at `location` (unit -> FailedRuns); a file that cannot be read as ours
    (torn by a crash, edited by hand) is reported and counts as none: the units are tried again."""
    path = _path(location)
    try:
        if not storage.exists(path):
            return {}
        entries = json.loads(storage.read_text(path)).items()
        return {str(u): FailedRuns(int(e["runs"]), str(e["reason"]), str(e["last"])) for u, e in entries}
    except Exception as error:  # torn, edited, or replaced while read: never a reason to fail a run
        log.warning("%s cannot be read (%s): the failed-run counts start again", path, error)
        return {}


def suspended_units(failures: dict[str, FailedRuns], suspend_after: int) -> dict[str, FailedRuns]:
    """The units of `failures` that are suspended under the `suspend_after` setting."""
    return {unit: failed for unit, failed in failures.items() if 0 < suspend_after <= failed.runs}


def _write(storage: Storage, location: str, failures: dict[str, FailedRuns]) -> None:
    """Replace the file by `failures` (written whole under a temporary name, then renamed onto it: a reader sees the
    old counts or the new ones), or delete it when empty."""
    path = _path(location)
    if not failures:
        storage.delete(path)
        return
    temporary = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    storage.write_text(temporary, json.dumps({unit: asdict(f) for unit, f in sorted(failures.items())}, indent=1))
    storage.replace_file(temporary, path)


def record_outcomes(storage: Storage, location: str, outcomes: dict[str, str | None]) -> dict[str, FailedRuns]:
    """Count a run's outcomes (unit -> its failure's reason, or None when it compacted or had nothing to do): a
    failure one more in a row, a success forgets the unit. The counts afterwards. The caller holds the lease."""
    failures = read_failures(storage, location)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    changed = False
    for unit, reason in outcomes.items():
        if reason is None:
            changed |= failures.pop(unit, None) is not None
        else:
            runs = failures[unit].runs + 1 if unit in failures else 1
            failures[unit], changed = FailedRuns(runs, reason, now), True
    if changed:
        _write(storage, location, failures)
    return failures


def resume_units(storage: Storage, location: str, units: list[str] | None) -> list[str]:
    """Forget the failed runs of `units` (None: every unit of the table); the units that were counted."""
    failures = read_failures(storage, location)
    forgotten = sorted(unit for unit in failures if units is None or unit in units)
    if forgotten:
        _write(storage, location, {unit: f for unit, f in failures.items() if unit not in forgotten})
    return forgotten


def resume_table(spark: SparkSession, database: str, table: str, partitions: list[str] | None) -> list[str]:
    """`resume`: forget the failed runs of the table's `partitions` (None: all its units), so that runs and the
    sensor compact them again; one line per unit resumed, or one saying there was none. An unknown table is a
    CatalogError, a table a run holds a LeaseHeldError; nothing is changed then."""
    info = read_table(spark, database, table)
    storage = Storage(spark)
    units = None if partitions is None else [validated_partition(p, "--partition") for p in partitions]
    if units is not None and not info.is_partitioned:
        raise ConfigError(f"--partition is given but {info.qualified_name} has no partitions; leave it out")
    counted = read_failures(storage, info.location)
    if unknown := [unit for unit in units or [] if unit not in counted]:
        find_partitions(spark, info, unknown)  # a partition that does not exist is a CatalogError: nothing changes
    with TableLease(storage, state_dir(info.location), info.qualified_name, new_run_id(), "resume"):
        resumed = resume_units(storage, info.location, units)  # a run counting its outcomes meanwhile would undo it
    if not resumed:
        return [f"{info.qualified_name}: no suspended or failing partition" + (" of those named" if units else "")]
    return [f"{info.qualified_name} {unit or '(whole table)'}: resumed (its failed runs forgotten)" for unit in resumed]
