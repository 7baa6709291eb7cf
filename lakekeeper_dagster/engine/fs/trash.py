"""The filesystem's Trash: where a deletion a user may want undone goes (Hadoop's `Trash`, the NameNode's or the
client's `fs.trash.interval`)."""

from __future__ import annotations

from lakekeeper_dagster.engine.fs.storage import Storage


def move_to_trash(storage: Storage, location: str) -> bool:
    """Move to the filesystem's Trash when one is configured; False when there is none."""
    fs, path = storage.java(location)
    return bool(storage.jvm.org.apache.hadoop.fs.Trash.moveToAppropriateTrash(fs, path, storage.conf))


def has_trash(storage: Storage, location: str) -> bool:
    """Whether `move_to_trash` would move `location` to a Trash: the filesystem's (server) or the client's
    `fs.trash.interval` is above 0."""
    fs, path = storage.java(location)
    if int(fs.getServerDefaults(path).getTrashInterval()) > 0:
        return True
    return bool(storage.jvm.org.apache.hadoop.fs.Trash(fs, storage.conf).isEnabled())


def trash_location(storage: Storage, location: str) -> str:
    """Where `move_to_trash` puts `location` (Hadoop's default policy: `<trash root>/Current/<its path>`; a name
    already taken there gets a time suffix)."""
    fs, path = storage.java(location)
    root = fs.getTrashRoot(path)
    return str(storage.jvm.org.apache.hadoop.fs.Path(root, "Current" + str(path.toUri().getPath())).toString())
