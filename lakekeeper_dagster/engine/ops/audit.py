"""Independent audit after the fact: does the live partition still hold exactly the rows its backup kept?"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.fs.locations import child
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive import backup as backups
from lakekeeper_dagster.engine.hive.eligibility import load_compactable
from lakekeeper_dagster.engine.protocol.journal import Journal
from lakekeeper_dagster.engine.rewrite.content import directory_fingerprints
from lakekeeper_dagster.engine.rewrite.fingerprint import EMPTY, combine
from lakekeeper_dagster.engine.rewrite.schema import data_schema
from lakekeeper_dagster.engine.statuses import UnitState
from spark_resources.py4j import job_description

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class BackupComparison:
    backup_table: str
    partition: str | None
    live_rows: int
    backup_rows: int
    live_checksum: str
    backup_checksum: str

    @property
    def matches(self) -> bool:
        return (self.live_rows, self.live_checksum) == (self.backup_rows, self.backup_checksum)


def verify_against_backup(spark: SparkSession, database: str, table: str) -> list[BackupComparison]:
    """Re-count every partition of the most recent backup: live files against the originals, i.e. the files the
    backup kept (the rewritten ones) plus the large files the compaction left in place in the live directory.

    Reads both sides again from storage, so it catches anything that changed the rewritten files or their
    originals after the compaction (a kept large file is on both sides: a change to it is not seen here).
    """
    info = load_compactable(spark, database, table)
    storage = Storage(spark)
    schema = data_schema(info)
    found = backups.find_backups(spark, database, info.qualified_name)
    if not found:
        return []
    journal = Journal.load(storage, found[0].journal)
    units = [u for u in journal.units if u.state == UnitState.COMMITTED]
    if not units:
        return []
    # Two Spark jobs in all (the live directories, then the originals), whatever the number of partitions.
    with job_description(spark, f"lakekeeper audit {info.qualified_name}: re-read {len(units)} live unit(s)"):
        live = directory_fingerprints(spark, info, schema, [u.live for u in units])
    # The originals: the backup's directories, plus the large files the compaction left in place (in the live
    # directory, not in the backup): the same rows on both sides then means nothing was lost or added.
    originals = [u.retired for u in units] + [child(u.live, name) for u in units for name in u.kept]
    with job_description(spark, f"lakekeeper audit {info.qualified_name}: re-read the originals in {found[0].name}"):
        kept = directory_fingerprints(spark, info, schema, originals)
    comparisons = []
    for unit in units:
        now = live.get(storage.qualify(unit.live), EMPTY)
        then = combine([kept.get(storage.qualify(unit.retired), EMPTY), kept.get(storage.qualify(unit.live), EMPTY)])
        comparisons.append(
            BackupComparison(found[0].name, unit.partition, now.rows, then.rows, now.checksum, then.checksum)
        )
    return comparisons
