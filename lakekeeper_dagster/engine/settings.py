"""What the engine is configured with: Lakekeeper's keys, batching and the managed tables, each documented once.

The settings build the engine's inputs: the plan's `Thresholds` and `Batching`, and a run's `CompactionOptions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lakekeeper_dagster.engine.hive.model import split_table_name
from lakekeeper_dagster.engine.hive.selection import TableSelection
from lakekeeper_dagster.engine.ops.options import CompactionOptions
from lakekeeper_dagster.engine.plan.thresholds import Batching, Thresholds, WriteMode
from lakekeeper_dagster.engine.rewrite.codec import validated_codec

MB = 1024 * 1024
MAX_BLOCK_SIZE_MB = 32 * 1024  # 32 GiB: far above any real block size (HDFS clusters use 128-512 MB)


class StrictModel(BaseModel):
    """A settings block: unknown keys are errors, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class SizeStatistic(str, Enum):
    AVERAGE = "average"
    MEDIAN = "median"


class BatchSettings(StrictModel):
    """How a compaction run groups partitions: how they are written, and how much one batch may stage.

    A batch's partitions are written by one Spark job (or concurrent ones, `write_mode`), verified in one Spark
    job, registered in the backup and committed with one metastore call each; its staged copies need free space
    together.
    """

    write_mode: WriteMode = Field(
        default=WriteMode.ONE_JOB,
        description="one_job: a batch's partitions are written together, by one Spark job per set of write settings "
        "(Parquet encodings, codec): one read, a shuffle that gives each output file a task, one write; a partition "
        "of several output files with sort_columns is written by a job of its own, sorted by range across its "
        "files. per_unit: each partition by a Spark job of its own, concurrent_jobs at a time (no shuffle unless "
        "sorting): measured as fast for partitions of a few MB, and 1.2-1.4x slower for tiny ones "
        "(benchmarks/README.md).",
    )
    concurrent_jobs: int = Field(
        default=4, ge=1, le=64, description="Spark write jobs at once (1: one job after another)."
    )
    max_partitions: int = Field(default=100, ge=1, description="At most this many partitions in one batch.")
    max_mb: int = Field(
        default=8192, ge=1, description="At most this many MB staged by one batch (a bigger partition goes alone)."
    )


class HistorySettings(StrictModel):
    """Where every operation's per-unit records go (`lakekeeper-dagster history`)."""

    table: str = Field(
        default="lakekeeper.history",
        description="The history table, DB.TABLE: a Hive external Parquet table partitioned by day, created (with "
        "its database) at the first record; never managed as a source.",
    )
    pending_dir: str | None = Field(
        default=None,
        description="Local directory of records a failed write left, written first by the next run; default: "
        "<metastore.home>/history-pending.",
    )

    @field_validator("table")
    @classmethod
    def _qualified(cls, value: str) -> str:
        split_table_name(value, "history.table")
        return value


class EngineSettings(StrictModel):
    """The settings of analysis and compaction, with Lakekeeper's keys and meanings."""

    block_size_mb: int = Field(
        default=128,
        gt=0,
        le=MAX_BLOCK_SIZE_MB,
        description="Target file size (the HDFS block size) in MB: target files = ceil(partition bytes / block "
        f"size), at least 1; at most {MAX_BLOCK_SIZE_MB} (32 GiB).",
    )
    compaction_ratio_threshold: float = Field(
        default=10.0,
        gt=0,
        allow_inf_nan=False,
        description="Compact a partition when its typical file is smaller than block size / this (a finite number).",
    )
    size_statistic: SizeStatistic = Field(
        default=SizeStatistic.AVERAGE,
        description='Which "typical" file size: average (Lakekeeper\'s rule) or median (robust against one huge file).',
    )
    min_file_size_ratio: float = Field(
        default=0.75,
        gt=0,
        le=1,
        description="A file smaller than this x block size is small and may be rewritten; a larger one is left as it "
        "is (Iceberg's min-file-size).",
    )
    min_input_files: int = Field(
        default=2,
        ge=2,
        description="Compact a partition only when it holds at least this many small files.",
    )
    backup_prefix: str = Field(
        default="__bkp",
        min_length=1,
        pattern=r"^\w+$",
        description="Prefix of backup table names (backups are found by their table properties, never by this prefix).",
    )
    dry_run: bool = Field(
        default=False, description="Analyze only, never write; honoured unless --dry-run/--no-dry-run is given."
    )
    sort_columns: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Columns to sort by before writing, per DB.TABLE, e.g. {mydb.events: [event_type, id]} "
        "(partition columns in the list are ignored with a note).",
    )
    analyze_after_compaction: bool = Field(
        default=False, description="Refresh the metastore statistics of each compacted partition after the swap."
    )
    drop_undeclared_columns: bool = Field(
        default=False,
        description="Compact a partition whose files hold columns the table does not declare (e.g. removed by "
        "REPLACE COLUMNS), dropping those columns from the rewritten files; false refuses such a partition.",
    )
    non_atomic_rename_schemes_accepted: list[str] = Field(
        default_factory=list,
        description="Filesystem schemes (e.g. [s3a, abfs]) whose locations are compacted although they do not rename "
        "directories atomically: a crash or a concurrent reader mid-swap can then see a partition half moved. Only "
        "hdfs, viewfs, webhdfs, swebhdfs and file are compacted without it.",
    )
    byte_merge_min_row_group_mb: int = Field(
        default=64,
        ge=0,
        description="Concatenate a partition's files at the byte level (row groups / stripes copied, never decoded) "
        "when every row group / stripe of theirs is at least this many MB and they share schema, codec, writer and "
        "metadata; smaller ones are rewritten by Spark. 0: always rewrite.",
    )
    accept_owner_change: bool = Field(
        default=False,
        description="Compact a partition even when the new files cannot keep the owner or group of the files they "
        "replace (the run's user may not set them: not the owner, an HDFS superuser or in the group): they get the "
        "run's, and the result names what was not carried. False refuses such a partition before writing anything.",
    )
    suspend_after_failures: int = Field(
        default=3,
        ge=0,
        description="Suspend a partition (or unpartitioned table) whose compaction failed this many runs in a row: no "
        "run or sensor request compacts it until `lakekeeper-dagster resume` (or a run's resume config). 0: never.",
    )
    codec: str | None = Field(
        default=None,
        description="The codec every compacted file gets (Parquet: uncompressed, snappy, gzip, lz4_raw, zstd; ORC: "
        "none, snappy, zlib, lz4, zstd); partitions in another codec are recompressed even when their files are "
        "large. Unset: keep the table's codec.",
    )
    batching: BatchSettings = Field(
        default_factory=BatchSettings,
        description="How a compaction run batches partitions (concurrent writes, one verification job per batch).",
    )
    history: HistorySettings = Field(
        default_factory=HistorySettings, description="The history of every operation, one record per unit."
    )
    tables: TableSelection = Field(
        default_factory=TableSelection,
        description="Which tables are managed: the assets in Dagster and the CLI's tables when none is named.",
    )

    @field_validator("codec")
    @classmethod
    def _known_codec(cls, value: str | None) -> str | None:
        return validated_codec(value)

    def thresholds(self) -> Thresholds:
        """The plan's small-file rule."""
        return Thresholds(
            self.block_size_mb * MB,
            self.compaction_ratio_threshold,
            self.size_statistic.value,
            self.min_file_size_ratio,
            self.min_input_files,
        )

    def batching_rule(self) -> Batching:
        """How the plan groups a run's units into batches."""
        return Batching(
            self.batching.max_partitions,
            self.batching.max_mb * MB,
            self.batching.concurrent_jobs,
            self.batching.write_mode,
        )

    def sort_columns_for(self, database: str, table: str) -> list[str]:
        return self.sort_columns.get(f"{database}.{table}", [])

    def compaction_options(
        self,
        database: str,
        table: str,
        *,
        owner: str,
        sort_columns: Sequence[str] | None = None,
        force: bool = False,
        codec: str | None = None,
    ) -> CompactionOptions:
        """The options of one table's compaction run; `sort_columns` and `codec` (when given) replace the settings."""
        sort = sort_columns if sort_columns is not None else self.sort_columns_for(database, table)
        return CompactionOptions(
            thresholds=self.thresholds(),
            sort_columns=tuple(sort),
            analyze_stats=self.analyze_after_compaction,
            force=force,
            backup_prefix=self.backup_prefix,
            owner=owner,
            batching=self.batching_rule(),
            drop_undeclared_columns=self.drop_undeclared_columns,
            non_atomic_rename_schemes_accepted=tuple(self.non_atomic_rename_schemes_accepted),
            codec=validated_codec(codec, setting="--codec / config codec") if codec is not None else self.codec,
            concat_min_row_group_bytes=self.byte_merge_min_row_group_mb * MB,
            suspend_after=self.suspend_after_failures,
            accept_owner_change=self.accept_owner_change,
        )
