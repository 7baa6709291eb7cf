"""What only HDFS tells: a directory's quotas, the replication and block size a write there uses, which files a
writer holds open, whether a directory is an encryption zone's root or snapshottable. Each answer is a NameNode call;
other filesystems have none of these to ask about, so nothing is asked there (one scheme check)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lakekeeper_dagster.engine.fs.storage import DataFile, Storage
from spark_resources.py4j import is_java_error


def namenode(storage: Storage, location: str) -> tuple[Any, Any] | None:
    """The HDFS FileSystem and path behind `location` (a `viewfs://` mount resolved to its namespace), or None when
    it is not on HDFS."""
    fs, path = storage.java(location)
    if storage.scheme(location) == "viewfs":
        location = str(fs.resolvePath(path).toString())
        fs, path = storage.java(location)
    return (fs, path) if storage.scheme(location) == "hdfs" else None


def is_hdfs(storage: Storage, location: str) -> bool:
    return namenode(storage, location) is not None


@dataclass(frozen=True)
class Quota:
    """A directory's quotas (-1: none) and what its subtree uses against them: space counts every replica's bytes,
    names every file and directory (itself included)."""

    directory: str
    space_quota: int
    space_used: int
    names_quota: int
    names_used: int


def quota(storage: Storage, directory: str) -> Quota | None:
    """The quotas of `directory`, None when it has none (or this user may not read its subtree, which the NameNode
    asks for; the NameNode still enforces them when the write comes).

    Costly where no quota is set: the NameNode then sums the whole subtree (`getQuotaUsage` falls back to a content
    summary), so ask only of directories whose subtree a run lists anyway."""
    fs, path = namenode(storage, directory) or storage.java(directory)
    try:
        usage = fs.getQuotaUsage(path)
    except Exception as error:
        if is_java_error(error, "AccessControlException"):
            return None
        raise
    found = Quota(
        directory,
        int(usage.getSpaceQuota()),
        int(usage.getSpaceConsumed()),
        int(usage.getQuota()),
        int(usage.getFileAndDirectoryCount()),
    )
    return found if found.space_quota >= 0 or found.names_quota >= 0 else None


def write_layout(storage: Storage, directory: str) -> tuple[int, int]:
    """(replication, block size in bytes) of a file written in `directory` with the client's defaults."""
    fs, path = namenode(storage, directory) or storage.java(directory)
    return int(fs.getDefaultReplication(path)), int(fs.getDefaultBlockSize(path))


def is_encryption_zone_root(storage: Storage, location: str) -> bool:
    """True when `location` is the root of an HDFS encryption zone (never on other filesystems)."""
    resolved = namenode(storage, location)
    if resolved is None:
        return False
    fs, path = resolved
    zone = fs.getEZForPath(path)
    if zone is None:
        return False
    bare = str(fs.makeQualified(path).toUri().getPath())
    return str(zone.getPath()).rstrip("/") == bare.rstrip("/")


def snapshots(storage: Storage, location: str) -> list[str] | None:
    """Names of the HDFS snapshots of directory `location` when it is snapshottable, else None (or not HDFS)."""
    resolved = namenode(storage, location)
    if resolved is None:
        return None
    fs, path = resolved
    if not fs.getFileStatus(path).isSnapshotEnabled():
        return None
    listed = fs.listStatus(storage.java(f"{str(path.toString()).rstrip('/')}/.snapshot")[1])
    return sorted(str(s.getPath().getName()) for s in listed)


def open_files(storage: Storage, files: list[DataFile]) -> list[str]:
    """The paths of `files` a writer holds open (HDFS: one `isFileClosed` call each; a file gone counts as closed);
    empty on other filesystems, where nothing is asked.

    An HDFS writer that appends with `hflush` leaves the file's size and modification time as they were at its open
    until it closes the file: only this question sees it at work."""
    if not files or not is_hdfs(storage, files[0].path):
        return []
    held = []
    for file in files:
        fs, path = namenode(storage, file.path) or storage.java(file.path)
        try:
            closed = bool(fs.isFileClosed(path))
        except Exception as error:
            if is_java_error(error, "FileNotFoundException"):
                continue
            raise
        if not closed:
            held.append(file.path)
    return held
