"""Per-table partition-management policies (`table_overrides.<db.table>.*`): the partition time, retention, cold
archive and merging of fine partitions. Each operation reads its block; an operation on a table without the keys it
needs is refused with a message naming them."""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from lakekeeper_dagster.engine.errors import ConfigError
from lakekeeper_dagster.engine.ops.options import ArchiveRule
from lakekeeper_dagster.engine.plan.partition_time import PartitionClock, parse_age, utc_now
from lakekeeper_dagster.engine.rewrite.codec import validated_codec


class PolicyBlock(BaseModel):
    """A policy block: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _checked_age(value: str | None) -> str | None:
    if value is not None:
        parse_age(value, "older_than")
    return value


class RetentionPolicy(PolicyBlock):
    """Drop partitions older than an age: metastore entry and data (to the Trash)."""

    older_than: str | None = Field(default=None, examples=["90d"], description="Drop partitions older than this age.")
    max_fraction: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Refuse a run that would drop more than this fraction of the table's partitions (--force).",
    )

    _age = field_validator("older_than")(_checked_age)


class ArchivePolicy(PolicyBlock):
    """Rewrite old partitions with a heavier codec, through the compaction protocol."""

    older_than: str | None = Field(default=None, examples=["365d"], description="Archive partitions older than this.")
    codec: str | None = Field(
        default=None,
        description="The archive codec (Parquet: gzip, zstd...; ORC: zlib, zstd...). Unset: gzip for Parquet tables, "
        "zlib for ORC tables.",
    )

    _age = field_validator("older_than")(_checked_age)

    @field_validator("codec")
    @classmethod
    def _known_codec(cls, value: str | None) -> str | None:
        return validated_codec(value, setting="archive.codec")


class MergePolicy(PolicyBlock):
    """Merge old fine partitions into coarse ones of a companion table, read through a union view."""

    into: list[str] | str | None = Field(
        default=None,
        examples=[["year", "month"], "%Y%m"],
        description="The coarse partitioning: the partition columns the merged table keeps ([year, month] of "
        "year/month/day/hour), or for one time column a coarser strftime format of it ('%Y%m' of '%Y%m%d%H').",
    )
    older_than: str | None = Field(default=None, examples=["60d"], description="Merge periods older than this age.")
    view: str | None = Field(
        default=None, examples=["events_all"], description="The union view readers query (NAME or DB.NAME)."
    )
    table: str | None = Field(default=None, description="The merged table (NAME or DB.NAME); default <table>__merged.")
    settle_seconds: float = Field(
        default=5.0,
        ge=0,
        description="Pause after each view change before the data under it changes, so queries that read the view "
        "just before the change have listed their partitions.",
    )

    _age = field_validator("older_than")(_checked_age)


RETENTION_WITH_MERGE = (
    "retention drops the source's partitions only, never the periods a merge moved into the merged table, which would "
    "stay past the retention age without a word; keep one of the two policies (retention of merged data is not "
    "supported: drop the merged table's old partitions by hand)"
)


class TablePolicies(PolicyBlock):
    """A table's partition time and partition-management policies."""

    partition_time: dict[str, str] | None = Field(
        default=None,
        examples=[{"dt": "%Y%m%d%H"}],
        description="The partition's time: {column: strftime format}, one column (dt: '%Y%m%d%H') or several "
        "(year: '%Y', month: '%m', day: '%d', hour: '%H'); read as UTC.",
    )
    retention: RetentionPolicy = Field(default_factory=RetentionPolicy, description="Retention: drop old partitions.")
    archive: ArchivePolicy = Field(default_factory=ArchivePolicy, description="Cold archive: recompress old ones.")
    merge: MergePolicy = Field(default_factory=MergePolicy, description="Merge fine partitions into coarse ones.")

    @property
    def merges(self) -> bool:
        """Whether the table has a merge policy (any `merge` key set)."""
        m = self.merge
        return any(v is not None for v in (m.into, m.older_than, m.view, m.table))

    @model_validator(mode="after")
    def _retention_reaches_its_data(self) -> TablePolicies:
        """Retention and merge together are refused: retention drops the source's partitions only, so the periods a
        merge moved into the merged table would stay past the retention age without a word."""
        if self.retention.older_than is not None and self.merges:
            raise ValueError(f"retention.older_than and merge are both set: {RETENTION_WITH_MERGE}")
        return self

    def clock(self, table: str) -> PartitionClock:
        """The table's partition clock; a ConfigError names `partition_time` when it is not set."""
        return PartitionClock.of(self.partition_time, table)

    def archive_rule(
        self,
        table: str,
        older_than: str | None = None,
        codec: str | None = None,
        now: datetime | None = None,
        flags: tuple[str, str] = ("--older-than", "--codec"),
    ) -> ArchiveRule:
        """The archive rule of `table` (D.T): the flags `older_than` / `codec` when given (`flags` names them), else
        the policy's. A ConfigError names the missing or bad key (`table_overrides.D.T.archive.older_than`,
        `partition_time`), or the flag that differs from a configured `archive.older_than` (every compaction keeps
        that policy: the partitions would be rewritten back and forth); a differing codec is refused when the
        table's format is known (`ArchiveRule.codec_of`)."""
        key, configured = f"table_overrides.{table}.archive", self.archive.older_than
        if older_than is not None:
            age = parse_age(older_than, flags[0])
            if configured is not None and age != parse_age(configured, f"{key}.older_than"):
                raise ConfigError(
                    f"{flags[0]} {older_than} differs from {key}.older_than ({configured}): every compaction writes "
                    f"the partitions older than {configured} in the archive codec and the newer ones in the table's, "
                    f"so partitions would be rewritten back and forth; leave out {flags[0]} or change "
                    f"{key}.older_than; nothing was changed"
                )
        else:
            age = policy_age(None, configured, "archive.older_than", table)
        cutoff = (now or utc_now()) - age
        standing = ArchiveRule(self.clock(table), cutoff, self.archive.codec, f"{key}.codec")
        if codec is None:
            return standing
        chosen = validated_codec(codec, setting=flags[1])
        return ArchiveRule(standing.clock, cutoff, chosen, flags[1], standing if configured is not None else None)

    def standing_archive(self, table: str) -> ArchiveRule | None:
        """The archive rule every compaction of `table` follows (archive-aged partitions stay in the archive codec),
        or None when `archive.older_than` is not set."""
        return self.archive_rule(table) if self.archive.older_than is not None else None


def policy_age(flag: str | None, configured: str | None, key: str, table: str) -> timedelta:
    """The age limit of an operation: the command-line flag, else the policy key; a ConfigError names both."""
    if flag is not None:
        return parse_age(flag, "--older-than")
    if configured is None:
        raise ConfigError(
            f"{table}: no age given; pass --older-than (e.g. 90d) or set table_overrides.{table}.{key}; "
            "nothing was changed"
        )
    return parse_age(configured, f"table_overrides.{table}.{key}")
