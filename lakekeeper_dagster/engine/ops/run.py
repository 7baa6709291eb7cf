"""What a compaction run shares across its batches (`CompactionRun`), and one unit on its way through them
(`BatchItem`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.fs.storage import DataFile, DirEntries, Storage
from lakekeeper_dagster.engine.hive import backup as backups
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.ops.options import CompactionOptions, UnitResult
from lakekeeper_dagster.engine.plan.progress import Progress, ProgressEvent, no_progress
from lakekeeper_dagster.engine.plan.units import UnitPlan
from lakekeeper_dagster.engine.protocol.journal import Journal, UnitRecord
from lakekeeper_dagster.engine.protocol.lease import TableLease
from lakekeeper_dagster.engine.rewrite.concat import ConcatOutcome
from lakekeeper_dagster.engine.rewrite.fingerprint import Fingerprint
from lakekeeper_dagster.engine.statuses import ProgressStep, RunStep
from spark_resources.py4j import job_description

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType


@dataclass
class CompactionRun:
    """Everything one compaction run shares across its units."""

    spark: SparkSession
    storage: Storage
    info: TableInfo
    options: CompactionOptions
    schema: StructType
    sort_columns: tuple[str, ...]
    journal: Journal
    lease: TableLease
    progress: Progress = no_progress  # `serialized`: the batch's writer threads report too

    def ensure_backup(self) -> str:
        if self.journal.backup_table is None:
            name = backups.backup_name(self.options.backup_prefix, self.info.name, self.journal.run_id)
            self.journal.record(self.storage, RunStep.BACKUP, backup_table=name)
            backups.create_backup(self.spark, self.info, name, self.journal.run_id, self.journal.directory)
        return self.journal.backup_table

    @property
    def backup_sql_name(self) -> str:
        return backups.table_sql(self.info.database, self.journal.backup_table)

    def label(self, unit: UnitRecord) -> str:
        return self.info.qualified_name + (f" partition {unit.partition}" if unit.partition else "")

    def report(self, step: ProgressStep, unit: UnitRecord | None = None, **figures) -> None:
        """Tell `progress` that `unit` (None: the run) went through `step`, with its figures."""
        partition = unit.partition if unit is not None else None
        self.progress(ProgressEvent(step, self.info.qualified_name, partition, self.info.is_partitioned, **figures))

    def waiting(self, unit: UnitRecord | None) -> Callable[[str], None]:
        """What `wait_for_writers` calls when a writer makes `unit` (None: the batch) wait."""
        return lambda what: self.report(ProgressStep.WAITING, unit, detail=what)

    def codec_for(self, item: BatchItem) -> str | None:
        """The codec the run asks for the item's unit (`CompactionOptions.codec_for`; None: the table's)."""
        return self.options.codec_for(self.journal.units[item.index].spec, self.info.file_format)

    def spark_job(self, what: str):
        """Label the Spark jobs started meanwhile in this thread: operation, table or partition, step."""
        return job_description(self.spark, f"lakekeeper compact {what}")


@dataclass
class BatchItem:
    """One unit of a batch on its way through the protocol."""

    index: int
    plan: UnitPlan
    snapshot: DirEntries
    result: UnitResult
    inputs: list[DataFile]  # the snapshot's files this run rewrites
    spark_inputs: list[str] = field(default_factory=list)  # the paths of those Spark rewrites (not concatenated)
    before: Fingerprint | None = None
    footer_rows: int = 0  # the input's rows as its files' own metadata count them
    encodings: dict | None = None  # what the input files use and the output keeps (`rewrite/encodings.py`)
    codec: str | None = None  # what the output is compressed with (`rewrite/codec.py`)
    # the inputs concatenated at the byte level into the staging directory (`rewrite/concat.py`)
    concatenated: ConcatOutcome = field(default_factory=lambda: ConcatOutcome([]))
    failure: str | None = None
    # why the concatenation was given up for a Spark rewrite of the whole unit (`write.py`, `batch.py`), or None
    fell_back: str | None = None

    @property
    def input_bytes(self) -> int:
        """The bytes this run reads and stages for the unit (its large files, left alone, are not counted)."""
        return sum(f.size for f in self.inputs)
