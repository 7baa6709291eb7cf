"""What goes into a compaction run and what comes out of it, per unit."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from lakekeeper_dagster.engine.errors import ConfigError
from lakekeeper_dagster.engine.plan.partition_time import PartitionClock
from lakekeeper_dagster.engine.plan.thresholds import Batching, Thresholds
from lakekeeper_dagster.engine.statuses import UnitStatus

# the archive codec when `archive.codec` is not set: the heaviest common codec each format has
DEFAULT_ARCHIVE_CODECS = {"parquet": "gzip", "orc": "zlib"}


@dataclass(frozen=True)
class ArchiveRule:
    """Cold archive: a partition whose period (by `clock`) ended by `cutoff` is written in `codec` (None: the
    format's, `DEFAULT_ARCHIVE_CODECS`). `setting` names the key or flag the codec comes from (a refusal names it).
    `standing`: the table's configured archive policy when this rule comes from flags; their codecs must agree."""

    clock: PartitionClock
    cutoff: datetime
    codec: str | None = None
    setting: str = "archive.codec"
    standing: ArchiveRule | None = None

    def covers(self, spec: Mapping[str, str | None] | None) -> bool:
        """Whether the partition `spec` is archive-aged (an unpartitioned table, or untimed partition, never is)."""
        end = self.clock.end(spec) if spec else None
        return end is not None and end <= self.cutoff

    def codec_of(self, file_format: str) -> str:
        """The archive codec for a table of `file_format`; a ConfigError when it differs from the standing policy's
        (each compaction would write the policy's codec back: endless rewrites)."""
        codec = self.codec or DEFAULT_ARCHIVE_CODECS.get(file_format, "gzip")
        if self.standing is not None and (policy := self.standing.codec_of(file_format)) != codec:
            raise ConfigError(
                f"{self.setting} {codec} differs from {self.standing.setting} ({policy}): every compaction writes "
                f"archive-aged partitions in {policy}, so they would be rewritten back and forth; leave out "
                f"{self.setting} or change {self.standing.setting}; nothing was changed"
            )
        return codec


@dataclass(frozen=True)
class CompactionOptions:
    thresholds: Thresholds
    sort_columns: tuple[str, ...] = ()
    analyze_stats: bool = False
    force: bool = False
    backup_prefix: str = "__bkp"
    owner: str = ""
    batching: Batching = Batching()
    drop_undeclared_columns: bool = False  # rewrite files holding columns the table does not declare, dropping them
    non_atomic_rename_schemes_accepted: tuple[str, ...] = ()
    codec: str | None = None  # every rewritten or concatenated file's codec; None keeps the table's (`choose_codec`)
    concat_min_row_group_bytes: int = 64 * 1024 * 1024  # concatenate files whose row groups all reach it; 0: never
    accept_owner_change: bool = False  # compact although the new files cannot keep the originals' owner or group
    suspend_after: int = 3  # failed runs in a row that suspend a unit (`protocol/suspension.py`); 0: never
    # archive-aged partitions are written in the archive codec, so no compaction recompresses them back
    archive: ArchiveRule | None = None
    recompress_only: bool = False  # rewrite a unit only to change its codec (an archive run); the size rule picks none

    def codec_for(self, spec: Mapping[str, str | None] | None, file_format: str) -> str | None:
        """The codec a unit's rewrite writes: the archive codec for an archive-aged partition, else `codec` (None:
        the table's, `choose_codec`)."""
        if self.archive is not None and self.archive.covers(spec):
            return self.archive.codec_of(file_format)
        return self.codec


@dataclass
class UnitResult:
    """What happened to one unit (a partition, or an unpartitioned table)."""

    database: str
    table: str
    partition: str | None
    location: str
    status: UnitStatus
    reason: str
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    rows_before: int | None = None
    rows_after: int | None = None
    checksum_before: str | None = None
    checksum_after: str | None = None
    target_files: int = 0
    seconds: float = 0.0
    backup_table: str | None = None
    carried_files: int = 0
    run_id: str | None = None
    dropped_columns: list[str] = field(default_factory=list)  # file columns the table does not declare, dropped
    files_byte_merged: int = 0  # input files concatenated at the byte level (row groups/stripes copied), not rewritten
    raced: bool = False  # failed because a writer was at work in it: not counted toward a suspension
    not_carried: list[str] = field(default_factory=list)  # originals' attributes the new files lack: `owner hive`

    @property
    def row_count_preserved(self) -> bool:
        return self.rows_before is not None and self.rows_before == self.rows_after

    @property
    def checksum_matches(self) -> bool:
        return self.checksum_before is not None and self.checksum_before == self.checksum_after

    def to_dict(self) -> dict:
        data = dict(self.__dict__)
        data["status"] = str(self.status)
        data["row_count_preserved"] = self.row_count_preserved
        data["checksum_matches"] = self.checksum_matches
        return data
