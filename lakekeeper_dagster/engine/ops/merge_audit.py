"""Independent audit after a merge: does each merged partition still hold the rows its merge verified?"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.catalog import list_partitions, read_table, table_exists
from lakekeeper_dagster.engine.hive.history_table import read_rows
from lakekeeper_dagster.engine.hive.model import split_table_name
from lakekeeper_dagster.engine.ops.merge import PeriodCopy, count_merged
from lakekeeper_dagster.engine.ops.merge_targets import merge_targets
from lakekeeper_dagster.engine.policies import TablePolicies
from lakekeeper_dagster.engine.rewrite.fingerprint import EMPTY, Fingerprint
from lakekeeper_dagster.engine.statuses import Operation, UnitState

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def verify_merged(
    spark: SparkSession, database: str, table: str, policies: TablePolicies, history_table: str
) -> list[PeriodCopy]:
    """Each partition of the merged table of `database.table` that the history records as merged: `before` the
    rows and checksum its merge verified (its latest record), `after` what its directory holds now, re-read (a
    partition unregistered or whose directory is gone holds nothing)."""
    targets = merge_targets(spark, database, table, policies)
    if not table_exists(spark, *targets.merged):
        return []
    hdb, htable = split_table_name(history_table, "history.table")
    recorded: dict[str, Fingerprint] = {}
    for r in read_rows(spark, hdb, htable, source=targets.info.qualified_name):  # oldest first: the latest wins
        if r["operation"] == str(Operation.MERGE) and r["status"] == str(UnitState.MERGED):
            recorded[r["partition_name"]] = Fingerprint(r["rows_after"], r["checksum_after"])
    storage = Storage(spark)
    units = {u.partition: u for u in list_partitions(spark, read_table(spark, *targets.merged))}
    copies = []
    for partition, then in sorted(recorded.items()):
        unit = units.get(partition)
        present = unit is not None and storage.exists(unit.location)
        now = count_merged(spark, targets, unit.location, unit.spec or {}) if present else EMPTY
        copies.append(PeriodCopy(partition, then, now))
    return copies
