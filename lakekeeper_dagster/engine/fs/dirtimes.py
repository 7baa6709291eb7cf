"""Directories' modification times, read from their parents' listings: one listing a parent directory (a table's
root lists all its single-level partitions at once), one py4j call for all.

A directory's modification time changes when an entry is added to it, removed from it or renamed in it (HDFS and
local filesystems alike), not when a file in it is appended to in place, nor when something changes in a directory
below it; on an object store it is not kept (0).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from spark_resources.bulk import driver_bulk
from spark_resources.py4j import hadoop_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def directory_times(spark: SparkSession, locations: list[str]) -> dict[str, int | None]:
    """Each location's modification time in ms (None when its parent does not list it as a directory)."""
    parents: dict[str, list[tuple[str, str]]] = {}
    for location in locations:
        parent, _, name = location.rstrip("/").rpartition("/")
        parents.setdefault(parent, []).append((location, name))
    found = json.loads(driver_bulk(spark).childTimes(hadoop_conf(spark), json.dumps(list(parents))))
    times: dict[str, int | None] = {}
    for parent, entries in parents.items():
        children = dict(found[parent] or [])
        for location, name in entries:
            times[location] = children.get(name)
    return times
