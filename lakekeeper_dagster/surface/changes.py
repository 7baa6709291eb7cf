"""What an observation run reads again of a table it observed before: only what may have changed.

A table is read in full (every partition from the metastore with its location, every directory listed) when it has
no observed snapshot yet, when the planning thresholds changed since its last full read (a unit's decision may change
without its files), and once every `observation.full_read_hours` in a slot of its own (the tables spread over the
period, so no run reads them all). Otherwise:

- the metastore is asked for the partition names only (one call); a partition in the snapshot keeps the location
  it was last read with, a new one is looked up (one call each), a missing one is gone;
- the partition directories' modification times come from their parents' listings (`engine/fs/dirtimes.py`: a
  single-level table's root lists all its partitions at once), and a directory is listed again only when its time
  is not the one kept with its figures. A time is kept only when it is older than RACY_SECONDS before it was read,
  so a change within the same clock tick as the last one (or a clock behind ours) is never taken as no change; a
  directory holding subdirectories with data files, one outside HDFS, viewfs and the local filesystem (object stores
  keep no directory times, or times that do not move), one whose parent cannot be listed, or a unit whose
  suspension changed, is listed every run.

What this does not see before the table's next full read: a partition moved to another location with `ALTER TABLE
... PARTITION ... SET LOCATION`, or dropped and added again elsewhere between two runs (its name is unchanged; the
old directory is still observed), a file appended to
in place (its directory's time does not change; Hive and Spark never append, they add files), and files written
into a subdirectory of a partition that held no data file below it before.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from urllib.parse import urlparse

import dagster as dg

from lakekeeper_dagster.engine.hive.catalog import current_location, partition_names, table_units
from lakekeeper_dagster.engine.hive.model import TableInfo, Unit, partition_spec
from lakekeeper_dagster.surface.metadata import FULL_READ_KEY

RACY_SECONDS = 300
TIMED_SCHEMES = ("hdfs", "viewfs", "file")  # filesystems whose directory times move when an entry is added
TRUSTED = 6  # the index, in a unit's snapshot entry, of its directory's kept modification time (0: list it again)
SUSPENDED_AT = 7  # the index of whether the unit was suspended when listed (1) or not (0)
LOCATION = 8  # the index of the unit's location when it is not the default one (absent otherwise)


@dataclass
class TableRead:
    """One table's units this run, and whether they were read in full."""

    info: TableInfo
    units: list[Unit]
    full: bool


def default_location(info: TableInfo, name: str) -> str:
    """Where Hive puts a partition of this name under the table's location."""
    return f"{info.location.rstrip('/')}/{name}"


def full_reads_due(
    instance: dg.DagsterInstance, keys: dict[str, dg.AssetKey], now: float, hours: int, thresholds: str
) -> set[str]:
    """The tables (db.table) whose full read is due: none since the start of their current slot of the period (each
    table's slot is offset by a hash of its name), or the last one under other planning `thresholds` (their
    fingerprint). One key-value read for all."""
    period = hours * 3600
    names = {FULL_READ_KEY + key.to_user_string(): table for table, key in keys.items()}
    last = {names[k]: v.partition(" ") for k, v in instance.run_storage.get_cursor_values(set(names)).items()}
    due = set()
    for table in keys:
        offset = zlib.crc32(table.encode()) % period
        slot_start = (now - offset) // period * period + offset
        at, _, under = last.get(table, ("0", "", ""))
        if float(at) < slot_start or under != thresholds:
            due.add(table)
    return due


def keep_full_read(instance: dg.DagsterInstance, key: dg.AssetKey, at: float, thresholds: str) -> None:
    """Keep when the table was read in full, and under which planning thresholds (their fingerprint)."""
    instance.run_storage.set_cursor_values({FULL_READ_KEY + key.to_user_string(): f"{at} {thresholds}"})


def read_units(spark, info: TableInfo, snapshot: dict[str, list], full: bool) -> TableRead:
    """The table's units: all from the metastore when `full`, else by name (see the module's docstring)."""
    if full or not info.is_partitioned:
        return TableRead(info, table_units(spark, info), full)
    units = []
    for name in partition_names(spark, info):
        spec = partition_spec(name, info.partition_columns)
        kept = snapshot.get(name)
        if kept is not None:
            location = kept[LOCATION] if len(kept) > LOCATION else default_location(info, name)
        elif (location := current_location(spark, info, spec)) is None:
            continue  # dropped since the names were read
        units.append(Unit.named(name, spec, location))
    return TableRead(info, units, full)


def to_list(read: TableRead, snapshot: dict[str, list], times: dict, suspended: set[str]) -> list[Unit]:
    """The units whose directories must be listed: all of a full read, else those whose figures may have changed."""
    if read.full:
        return read.units
    listed = []
    for unit in read.units:
        kept = snapshot.get(unit.partition or "")
        if (
            kept is None
            or len(kept) <= SUSPENDED_AT
            or not kept[TRUSTED]
            or kept[TRUSTED] != times.get(unit.location)
            or bool(kept[SUSPENDED_AT]) != ((unit.partition or "") in suspended)
        ):
            listed.append(unit)
    return listed


def trusted_time(location: str, mtime: int | None, read_at: float, nested: bool) -> int:
    """The directory time to keep with a unit's figures: 0 (list it again next run) when none, when it has
    subdirectories with data files, on a filesystem whose directory times are not kept, or when it is within
    RACY_SECONDS of when it was read."""
    if not mtime or nested or urlparse(location).scheme not in TIMED_SCHEMES:
        return 0
    return 0 if mtime >= (read_at - RACY_SECONDS) * 1000 else mtime


def entry_extra(info: TableInfo, unit: Unit, small_bytes: int, trusted: int, suspended: bool) -> list:
    """A listed unit's snapshot entry after its compared figures and since: small bytes, kept time, suspended, and
    its location when not the default."""
    extra = [small_bytes, trusted, int(suspended)]
    if unit.partition and unit.location != default_location(info, unit.partition):
        extra.append(unit.location)
    return extra
