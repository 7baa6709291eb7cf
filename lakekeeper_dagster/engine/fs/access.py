"""Whether this process's user may write where an operation stages files and swaps directories, whether the files
it writes can be given the owner and group of those they replace, and who it is."""

from __future__ import annotations

import json
import os
import uuid
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.fs.locations import split_location
from spark_resources.bulk import driver_bulk
from spark_resources.py4j import hadoop_conf, is_java_error, java_class, java_messages, jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def denied(error: BaseException) -> bool:
    """A permission refusal: HDFS's AccessControlException, or a local `chown` the operating system refused."""
    return is_java_error(error, "AccessControlException") or any(
        "not permitted" in line for line in java_messages(error)
    )


def hadoop_user(spark: SparkSession) -> str:
    """The user this process acts as on the filesystems (Hadoop's: a Kerberos principal's short name)."""
    users = java_class(spark, "org.apache.hadoop.security.UserGroupInformation")
    return str(users.getCurrentUser().getShortUserName())


def writable(spark: SparkSession, location: str) -> bool:
    """Whether this process's user may create and rename entries in the directory `location`: the operating
    system's answer on the local filesystem (root included), the filesystem's permission check elsewhere
    (`FileSystem.access`: the NameNode's, superuser and ACLs included)."""
    java = jvm(spark)
    path = java.org.apache.hadoop.fs.Path(location)
    fs = path.getFileSystem(hadoop_conf(spark))
    if str(fs.getScheme()) == "file":
        return os.access(str(path.toUri().getPath()), os.W_OK | os.X_OK)
    try:
        fs.access(path, java.org.apache.hadoop.fs.permission.FsAction.WRITE_EXECUTE)
    except Exception as error:
        if is_java_error(error, "AccessControlException"):
            return False
        raise
    return True


def _may_set(fs, owner: str | None, group: str, scratch) -> bool:
    """Whether this process may give a new entry `owner` (with `group`) or, with `owner` None, `group` alone: asked
    by setting them on a scratch directory made for it under `scratch` (a Hadoop Path) and removed at once, so
    nothing of the originals is touched. HDFS refuses an owner to anyone but a superuser and a group to anyone but a
    member of it or a superuser; `chown` refuses their local counterparts to users other than root."""
    probe = fs.makeQualified(scratch.suffix(f"/.lk-probe-{uuid.uuid4().hex}"))
    fs.mkdirs(probe)
    try:
        fs.setOwner(probe, owner, group)
    except Exception as error:
        if denied(error):
            return False
        raise
    finally:
        fs.delete(probe, False)
    return True


def foreign_ownership(spark: SparkSession, directory: str, model: str | None) -> str | None:
    """What of the owner and group of `directory` and of its data file `model` the files this process writes in
    its place could not be given (the swap's `fs/attributes.copy_attributes`), in words (`owner hive (group
    hadoop)`, `group analysts`); None when nothing.

    A new file belongs to this process's user and, on HDFS, to the group of the directory it is made in (the
    staging sibling's parent): nothing to set when they match, the common case (the owner runs it), asked in one
    call (the NameNode's `getFileStatus`; locally the operating system's). Otherwise one `setOwner` on a scratch
    directory (`_may_set`) per owner or group that differs tells whether the swap could set it, touching nothing of
    the table's. A group this guess misses (locally a new file gets the user's group unless its directory is
    setgid) is still named by the swap."""
    parent_location = split_location(directory)[0]  # where the staging sibling is made
    parent = java_class(spark, "org.apache.hadoop.fs.Path")(parent_location)
    fs = parent.getFileSystem(hadoop_conf(spark))
    locations = [parent_location, directory] + ([model] if model else [])
    (_, made_in), *owners = [
        (f["owner"], f["group"]) for f in json.loads(driver_bulk(spark).attributes(fs, json.dumps(locations)))
    ]
    user = hadoop_user(spark)
    foreign = next(((owner, group) for owner, group in owners if owner != user), None)
    if foreign is not None:  # only a superuser may give a file another owner, and then any group too
        owner, group = foreign
        return None if _may_set(fs, owner, group, parent) else f"owner {owner} (group {group})"
    asked = {made_in}
    for _, group in owners:  # this user owns them: it may give new files a group it is in
        if group not in asked:
            asked.add(group)
            if not _may_set(fs, None, group, parent):
                return f"group {group}"
    return None
