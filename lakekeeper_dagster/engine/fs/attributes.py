"""A directory's and its files' attributes (permission, ACL, owner, group), given to the files that replace them.

The attributes of every path a swap compares are read in one call in the driver's JVM (`DriverBulk.attributes`):
on HDFS from `getFileStatus` (the NameNode's answer), on the local filesystem from the operating system through
Java's `unix:` file attributes, where Hadoop's local status forks `ls` for each path's permission and owner. ACLs
are read, as Java objects, only where either side has one beyond its permission bits.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lakekeeper_dagster.engine import faults
from lakekeeper_dagster.engine.fs.access import denied
from lakekeeper_dagster.engine.fs.locations import child
from spark_resources.py4j import is_java_error

if TYPE_CHECKING:
    from lakekeeper_dagster.engine.fs.storage import Storage


@dataclass(frozen=True)
class Attributes:
    """One path's attributes: `mode` as Hadoop's `FsPermission.toShort()` (sticky bit included), `extended` an ACL
    beyond the permission bits."""

    location: str
    mode: int
    owner: str
    group: str
    extended: bool


def read_attributes(storage: Storage, locations: list[str]) -> list[Attributes]:
    """The attributes of these paths (all on one filesystem), in one call."""
    fs, _ = storage.java(locations[0])
    found = json.loads(storage.bulk.attributes(fs, json.dumps(locations)))
    return [Attributes(location, **values) for location, values in zip(locations, found, strict=True)]


def _full_acl(storage: Storage, location: str) -> Any:
    """The full ACL of a path (base entries from its permission bits, extended and default entries), or None when
    its filesystem has no ACLs. HDFS's `setAcl` validates a full ACL: the extended entries alone fail."""
    fs, path = storage.java(location)
    filesystem = str(fs.getUri().toString())
    if filesystem in storage.without_acls:
        return None
    try:
        entries = fs.getAclStatus(path).getEntries()
    except Exception as error:  # no ACL support (UnsupportedOperationException), or ACLs off: ask once
        if is_java_error(error, "UnsupportedOperationException") or is_java_error(error, "AclException"):
            storage.without_acls.add(filesystem)
            return None
        raise
    acl_util = storage.jvm.org.apache.hadoop.fs.permission.AclUtil
    return acl_util.getAclFromPermAndEntries(fs.getFileStatus(path).getPermission(), entries)


def _carry(storage: Storage, model: Attributes, target: Attributes, owners: bool, acls: dict[str, Any]) -> list[str]:
    """Give `target` the permission, ACL, owner and group of `model`, each only where it differs (owner and group
    where this process may: HDFS lets only a superuser change an owner, and an owner only to a group it belongs to);
    what was not carried, in words. `acls`: the full ACLs of models read so far, by location (read once a model)."""
    fs, path = storage.java(target.location)
    if target.mode != model.mode:
        fs.setPermission(path, storage.jvm.org.apache.hadoop.fs.permission.FsPermission(f"{model.mode:04o}"))
    if model.extended or target.extended:  # compare the full lists in the JVM, set when they differ
        if model.location not in acls:
            acls[model.location] = _full_acl(storage, model.location)
        acl = acls[model.location]
        if acl is not None and not _full_acl(storage, target.location).equals(acl):
            fs.setAcl(path, acl)
    if not owners or (target.owner, target.group) == (model.owner, model.group):
        return []
    try:
        fs.setOwner(path, model.owner, model.group)
        return []
    except Exception as error:
        if not denied(error):
            raise
    missing = [f"owner {model.owner}"] if target.owner != model.owner else []
    try:
        if target.group != model.group:
            fs.setOwner(path, None, model.group)
    except Exception as error:
        if not denied(error):
            raise
        missing.append(f"group {model.group}")
    return missing


def copy_attributes(storage: Storage, source: str, target: str, owners: bool = True) -> list[str]:
    """Give the directory `target` and every file in it the attributes of `source` and of `source`'s first data
    file: permission, full ACL (directory's default ACL included), owner and group where allowed (not with
    `owners` False: `target` keeps its own, as a rollback's originals do).

    Set on a staged directory before it replaces `source`, so readers never see the new files with other
    rights. Only what differs from what the write gave a file is set: one listing of each directory, the attributes
    of both directories, the model file and every staged file in one call; the ACLs are asked for only where a side
    has one beyond its permission bits. Not carried (HDFS keeps them per directory, not per file): quota, storage
    policy, erasure coding policy. Returns what this process may not set (`owner X`, `group Y`: only where they
    differ)."""
    faults.fail_point("attributes")
    model = next((f.path for f in storage.list_data_files(source)), None)
    staged = [child(target, name) for name in storage.list_names(target, directories=False)] if model else []
    found = read_attributes(storage, [source, target] + ([model] if model else []) + staged)
    acls: dict[str, Any] = {}
    missing = _carry(storage, found[0], found[1], owners, acls)
    for file in found[3:]:
        missing += _carry(storage, found[2], file, owners, acls)
    return sorted(set(missing))
