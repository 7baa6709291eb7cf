"""Locations as strings: a child's, a parent's, whether a name is data or a marker. No filesystem is asked."""

from __future__ import annotations

from lakekeeper_dagster.engine.errors import StorageError


def is_hidden(name: str) -> bool:
    """Hadoop/Hive convention: names starting with `_` or `.` are not data."""
    return name.startswith(("_", "."))


def split_location(location: str) -> tuple[str, str]:
    """(parent, last name) of a location: `file:/w/t/date=1` -> (`file:/w/t`, `date=1`)."""
    parent, _, name = location.rstrip("/").rpartition("/")
    if not name or not parent:
        raise StorageError(f"location {location} has no parent directory")
    return parent, name


def child(location: str, name: str) -> str:
    return f"{location.rstrip('/')}/{name}"


def is_marker(name: str, names: list[str]) -> bool:
    """A finished job's `_SUCCESS`, or a checksum (`.<name>.crc`, local filesystems) of a marker or of a file not
    in `names` (a directory's listing): nothing of the data, dropped with its directory."""
    if name.startswith(".") and name.endswith(".crc"):
        return name[1:-4] not in names or is_marker(name[1:-4], names)
    return name == "_SUCCESS"
