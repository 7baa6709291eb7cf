"""File statistics of many directories from one Spark listing job: no per-file work in the Python driver.

Spark lists the directories (in parallel, as a Spark job once there are more than a few dozen of them) and returns
one row per directory — file count, bytes, median size, and the same for the files below the size limit the caller
gives (the small files) — so the driver's cost grows with directories, not files.
The `binaryFile` source is read without its `content` column, so no file is opened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from lakekeeper_dagster.engine.fs.dirstats import DirStats
from lakekeeper_dagster.engine.fs.storage import Storage
from spark_resources.py4j import job_description, session_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_GLOB_CHARACTERS = "\\{}[]*?"


@dataclass
class Listing:
    """What one listing found: stats per location, locations that do not exist, locations holding subdirectories."""

    stats: dict[str, DirStats] = field(default_factory=dict)
    missing: set[str] = field(default_factory=set)
    nested: set[str] = field(default_factory=set)


def _path_key(location: str) -> str:
    """The path part of a location, for matching Spark's qualified paths with the metastore's locations."""
    return urlparse(location).path.rstrip("/") or "/"


def _literal(location: str) -> str:
    """A location Hadoop will not expand as a glob pattern."""
    return "".join(f"\\{c}" if c in _GLOB_CHARACTERS else c for c in location)


def _grouped_rows(spark: SparkSession, locations: list[str], small_below: float) -> list:
    from pyspark.sql import functions as F

    files = (
        spark.read.format("binaryFile")
        .option("recursiveFileLookup", "true")
        .load([_literal(location) for location in locations])
        .select("path", "length")
    )
    small = F.when(F.col("length") < F.lit(small_below), F.col("length"))  # null for a large file: not aggregated
    return (
        files.groupBy(F.regexp_replace("path", "/[^/]*$", "").alias("directory"))
        .agg(
            F.count("*").alias("files"),
            F.sum("length").alias("bytes"),
            F.median("length").alias("median"),
            F.count(small).alias("small_files"),
            F.coalesce(F.sum(small), F.lit(0)).alias("small_bytes"),
            F.coalesce(F.median(small), F.lit(0.0)).alias("small_median"),
        )
        .collect()
    )


def _is_missing_path(error: Exception) -> bool:
    condition = getattr(error, "getCondition", None)
    return bool(condition and condition() == "PATH_NOT_FOUND")


def _listing_conf(spark: SparkSession) -> dict[str, str]:
    """Spark's defaults suit reading files; a listing reads none. Spark lists many paths with one task per path (up
    to 10,000): a few tasks per core are enough. And it splits the scan as if each file cost 4 MB to open: no file
    is opened, so pack them by cores, not by size."""
    cores = max(1, spark.sparkContext.defaultParallelism)
    return {
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": str(cores * 4),
        "spark.sql.files.maxPartitionBytes": str(1 << 40),
    }


def list_directories(spark: SparkSession, locations: list[str], purpose: str, small_below: float) -> Listing:
    """Data-file statistics directly under each location (names starting with `_` or `.` are not data); files smaller
    than `small_below` bytes are counted apart too (`Thresholds.min_file_bytes`: the files a compaction rewrites).

    A location that does not exist is reported in `missing`; one holding subdirectories with files in `nested`.
    The Spark jobs are labelled `lakekeeper <purpose>: list N directories`.
    """
    listing = Listing()
    wanted = list(dict.fromkeys(locations))
    if not wanted:
        return listing
    label = f"lakekeeper {purpose}: list {len(wanted)} directories"
    with session_conf(spark, _listing_conf(spark)), job_description(spark, label):
        try:
            rows = _grouped_rows(spark, wanted, small_below)
        except Exception as error:  # py4j-wrapped AnalysisException
            if not _is_missing_path(error):
                raise
            storage = Storage(spark)
            listing.missing = {location for location in wanted if not storage.exists(location)}
            present = [location for location in wanted if location not in listing.missing]
            rows = _grouped_rows(spark, present, small_below) if present else []
    by_path = {_path_key(location): location for location in wanted if location not in listing.missing}
    for row in rows:
        directory = _path_key(row["directory"])
        if directory in by_path:
            location = by_path[directory]
            listing.stats[location] = DirStats(
                location,
                int(row["files"]),
                int(row["bytes"]),
                float(row["median"]),
                int(row["small_files"]),
                int(row["small_bytes"]),
                float(row["small_median"]),
            )
            continue
        parent = directory
        while "/" in parent.strip("/"):
            parent = parent.rsplit("/", 1)[0]
            if parent in by_path:
                listing.nested.add(by_path[parent])
                break
    for location in by_path.values():
        listing.stats.setdefault(location, DirStats(location, 0, 0, 0.0))
    return listing
