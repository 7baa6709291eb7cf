"""Whether this process's user may write where an operation stages files and swaps directories, and who it is."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from spark_resources.py4j import hadoop_conf, is_java_error, jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def hadoop_user(spark: SparkSession) -> str:
    """The user this process acts as on the filesystems (Hadoop's: a Kerberos principal's short name)."""
    return str(jvm(spark).org.apache.hadoop.security.UserGroupInformation.getCurrentUser().getShortUserName())


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
