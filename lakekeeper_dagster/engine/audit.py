"""Independent audit after the fact: does the live partition still hold exactly the rows its backup kept?"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine import backup as backups
from lakekeeper_dagster.engine.compaction import data_schema, load_compactable, read_files
from lakekeeper_dagster.engine.fingerprint import fingerprint
from lakekeeper_dagster.engine.journal import COMMITTED, Journal
from lakekeeper_dagster.engine.storage import Storage

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
    """Re-count every partition of the most recent backup: live files against the originals the backup kept.

    Reads both sides again from storage, so it catches anything that changed them after the compaction.
    """
    info = load_compactable(spark, database, table)
    storage = Storage(spark)
    schema = data_schema(info)
    found = backups.find_backups(spark, database, info.qualified_name)
    if not found:
        return []
    journal = Journal.load(storage, found[0].journal)
    comparisons = []
    for unit in journal.units:
        if unit.state != COMMITTED:
            continue
        live = fingerprint(read_files(spark, info, schema, [unit.live]))
        kept = fingerprint(read_files(spark, info, schema, [unit.retired]))
        comparisons.append(
            BackupComparison(found[0].name, unit.partition, live.rows, kept.rows, live.checksum, kept.checksum)
        )
    return comparisons
