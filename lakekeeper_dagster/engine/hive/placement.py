"""Where a table's data may live for the protocol to hold: refusals from the catalog, before anything is written.

The protocol swaps a unit's directory by renames, under a lease and a journal kept in the table's state directory
(`<parent of table location>/.lakekeeper-<table dir>/`). That is safe only when
- the filesystem renames a directory atomically (HDFS, the local filesystem; not object stores: s3a, abfs, gs, ...),
- each unit's directory is on the same filesystem as the state directory (the journal must describe a swap that the
  same filesystem performs; the lease must cover it),
- no other table reads or writes the same directories: a second table over the same location (e.g. with more
  columns, which this table's rewrite would drop), a table nested inside one of this table's unit directories, or
  this table nested inside another table's partition (that table's lease and compaction do not know this one).

The checks are pure functions over locations; `placement_refusal` gathers what they need from the catalog.
Retention and merge, which move partition directories away rather than swap them, ask `taken_directories` which of
those directories another table's data lives in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.model import BACKUP_SOURCE_PROPERTY, TableInfo, Unit, partition_name
from spark_resources.py4j import external_catalog, jvm, scala_seq

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Schemes whose filesystems rename a directory atomically (one metadata operation): HDFS and what fronts it, and the
# local filesystem. Any other scheme (s3a, s3, s3n, abfs, abfss, wasb, wasbs, gs, oss, cos, cosn, obs, ofs, ...) is
# refused unless the setting `non_atomic_rename_schemes_accepted` names it.
ATOMIC_RENAME_SCHEMES = frozenset({"hdfs", "viewfs", "webhdfs", "swebhdfs", "file"})
ACCEPT_SETTING = "non_atomic_rename_schemes_accepted"


@dataclass(frozen=True)
class Placed:
    """Another table's directory: its root location, or one of its partitions'."""

    table: str
    partition: str | None
    location: str

    @property
    def label(self) -> str:
        return self.table + (f" partition {self.partition}" if self.partition else "")


def _parts(location: str) -> tuple[str, str, str]:
    """(scheme, authority, path without trailing slash) of a qualified location (a Hadoop path: `%` is literal)."""
    parsed = urlsplit(location)
    return parsed.scheme.lower(), parsed.netloc.lower(), parsed.path.rstrip("/") or "/"


def filesystem_of(location: str) -> str:
    """`scheme://authority` of a location: the filesystem that holds it."""
    scheme, authority, _ = _parts(location)
    return f"{scheme}://{authority}"


def same_location(a: str, b: str) -> bool:
    return _parts(a) == _parts(b)


def is_inside(location: str, directory: str) -> bool:
    """Whether `location` is strictly below `directory` (same filesystem)."""
    scheme, authority, path = _parts(location)
    d_scheme, d_authority, d_path = _parts(directory)
    return (scheme, authority) == (d_scheme, d_authority) and path.startswith(d_path.rstrip("/") + "/")


def _unit_label(info: TableInfo, unit: Unit) -> str:
    return info.qualified_name + (f" partition {unit.partition}" if unit.partition else "")


def filesystem_refusal(info: TableInfo, units: Sequence[Unit], accepted: Iterable[str] = ()) -> str | None:
    """Why the table's units may not be swapped on their filesystems, or None.

    Refused: a location whose scheme is not known to rename directories atomically (unless `accepted` names it), and
    a unit on another filesystem (scheme or authority) than the table's location, where its journal and lease live.
    Locations must be qualified (`scheme://authority/path`).
    """
    accepted_schemes = {s.lower() for s in accepted}
    home = filesystem_of(info.location)
    for location, label in [(info.location, info.qualified_name)] + [(u.location, _unit_label(info, u)) for u in units]:
        scheme = _parts(location)[0]
        if scheme not in ATOMIC_RENAME_SCHEMES and scheme not in accepted_schemes:
            return (
                f"{label} lives at {location}: filesystem scheme {scheme!r} does not rename directories atomically, "
                f"so the swap could leave a partition half moved. Compaction is refused there; to accept that risk, "
                f"add {scheme!r} to the setting `{ACCEPT_SETTING}`."
            )
    for unit in units:
        if filesystem_of(unit.location) != home:
            return (
                f"{_unit_label(info, unit)} lives at {unit.location}, on another filesystem "
                f"({filesystem_of(unit.location)}) than the table's location {info.location} ({home}), where its "
                "journal and lease are kept: a crash there could not be recovered. "
                "Move the partition's data under the table's filesystem first."
            )
    return None


def sharing_refusal(info: TableInfo, units: Sequence[Unit], others: Iterable[Placed]) -> str | None:
    """Why another table's directories make this table's swap unsafe, or None.

    Refused: another table (or a partition of it) at the table's location or at one of its units' locations (it may
    see columns this table would drop, and its readers would see the swap), another table inside one of the units'
    directories (the swap would move its data), and a unit inside another table's directory (that table does not
    know this one: its lease and journal do not cover it).
    """
    mine = [(info.location, info.qualified_name)] + [(u.location, _unit_label(info, u)) for u in units]
    unit_dirs = [(u.location, _unit_label(info, u)) for u in units] or [(info.location, info.qualified_name)]
    for other in others:
        for location, label in mine:
            if same_location(other.location, location):
                return (
                    f"{label} shares its location {location} with {other.label}: rewriting it would change that "
                    "table's data too (and drop the columns this table does not declare). Give each table its own "
                    "location first."
                )
        for location, label in unit_dirs:
            if is_inside(other.location, location):
                return (
                    f"{other.label} lives inside {label} ({other.location}): a swap of {location} would move its "
                    "data. Move that table out of this table's directories first."
                )
            if is_inside(location, other.location) and other.partition is not None:
                return (
                    f"{label} lives inside {other.label} ({other.location}): that table's lease and journal do not "
                    "cover this one. Move this table out of that partition first."
                )
    return None


def _related(location: str, anchors: Sequence[str]) -> bool:
    """Whether a table rooted at `location` could hold a partition in or around `anchors` (equal, above or below)."""
    return any(same_location(location, a) or is_inside(location, a) or is_inside(a, location) for a in anchors)


def other_tables(spark: SparkSession, info: TableInfo, units: Sequence[Unit]) -> list[Placed]:
    """The directories of the other tables of the table's database that could touch its directories.

    Cost: two metastore calls for the database (`listTables`, `getTablesByName`) and a few py4j calls per table;
    plus one `listPartitions` per other partitioned table whose root is at, above or below the table's location or
    one of its units. The table's own backups are skipped: its journals account for them. A partition of an
    unrelated table set to a location inside this table is not seen, nor are tables of other databases.
    """
    catalog = external_catalog(spark)
    java = jvm(spark)
    hadoop_path = java.org.apache.hadoop.fs.Path  # looked up once: each py4j lookup is a round trip
    names = catalog.listTables(info.database)
    anchors = [info.location] + [u.location for u in units]
    found: list[Placed] = []
    for table in scala_seq(catalog.getTablesByName(info.database, names)):
        name = str(table.identifier().table())
        uri = table.storage().locationUri()
        if name == info.name or uri.isEmpty():
            continue
        qualified = f"{info.database}.{name}"
        root = str(hadoop_path(uri.get()).toString())
        own_backup = table.properties().get(BACKUP_SOURCE_PROPERTY)
        if not own_backup.isEmpty() and str(own_backup.get()) == info.qualified_name:
            # A backup of this table is created over its location, and its partitions point at live directories
            # from the backup step until the commit: the journals account for them (recovery settles a crashed run).
            continue
        found.append(Placed(qualified, None, root))
        if table.partitionColumnNames().isEmpty() or not _related(root, anchors):
            continue
        columns = [str(c) for c in scala_seq(table.partitionColumnNames())]
        for partition in scala_seq(catalog.listPartitions(info.database, name, java.scala.Option.empty())):
            spec = partition.spec()
            label = partition_name({c: None if spec.apply(c) is None else str(spec.apply(c)) for c in columns})
            found.append(Placed(qualified, label, str(hadoop_path(partition.location()).toString())))
    return found


def _qualified(storage: Storage, location: str) -> str:
    return location if urlsplit(location).scheme else storage.qualify(location)


def placement_refusal(
    spark: SparkSession, storage: Storage, info: TableInfo, units: Sequence[Unit], accepted: Iterable[str] = ()
) -> str | None:
    """Why the units of this table may not be swapped where they live (filesystem, other tables), or None.

    For compaction and rollback alike, before anything is written. The filesystem check costs nothing; the sharing
    check costs what `other_tables` says (it runs only when the filesystems pass).
    """
    table = replace(info, location=_qualified(storage, info.location))
    placed = [Unit(u.spec, _qualified(storage, u.location)) for u in units]
    reason = filesystem_refusal(table, placed, accepted)
    if reason is None:
        reason = sharing_refusal(table, placed, other_tables(spark, table, placed))
    return reason


def taken_directories(spark: SparkSession, storage: Storage, info: TableInfo, units: Sequence[Unit]) -> dict[str, str]:
    """Why moving away (or deleting) each of these partition directories would take another table's data, by
    partition name; a partition not named is free. Taken: another table (or a partition of one) at the directory or
    inside it, or the directory inside another table's partition. Costs what `other_tables` says."""
    if not units:
        return {}
    table = replace(info, location=_qualified(storage, info.location))
    placed = [Unit(u.spec, _qualified(storage, u.location)) for u in units]
    others = other_tables(spark, table, placed)
    taken: dict[str, str] = {}
    for unit in placed:
        for other in others:
            if same_location(other.location, unit.location) or is_inside(other.location, unit.location):
                taken[unit.partition or ""] = f"{other.label} uses {other.location}, which moving it away would take"
                break
            if other.partition is not None and is_inside(unit.location, other.location):
                taken[unit.partition or ""] = f"its directory lies inside {other.label} ({other.location})"
                break
    return taken
