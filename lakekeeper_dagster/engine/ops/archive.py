"""Cold archive: the partitions older than an age rewritten in a heavier codec (and compacted at the same time)
through the compaction protocol: lease, recovery first, journal, backup, verification of rows and content, swap,
rollback possible. The run is a compaction restricted to the archive-aged partitions (`ArchiveRule.covers`) with
`recompress_only`: a partition whose files holding rows are all in the archive codec already is skipped, so archive
never rewrites a partition twice. The dry run (`plan_archive`) reads the metastore and the files' footers only."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import ConfigError, UnitFailure
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.catalog import table_units
from lakekeeper_dagster.engine.hive.eligibility import load_compactable, refuse_copy_options
from lakekeeper_dagster.engine.hive.model import TableInfo, Unit
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.options import ArchiveRule, CompactionOptions, UnitResult
from lakekeeper_dagster.engine.plan.progress import Progress, no_progress
from lakekeeper_dagster.engine.plan.thresholds import human_bytes
from lakekeeper_dagster.engine.rewrite.codec import footer_codec, not_in_codec, validated_codec
from lakekeeper_dagster.engine.rewrite.footers import read_footers

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class ArchiveCandidate:
    """One archive-aged partition as the dry run sees it: when its period ended, its files, bytes and codecs."""

    partition: str
    ended: datetime
    files: int
    bytes: int
    codecs: tuple[str, ...]  # of its files holding rows, as their footers name them
    recompress: bool  # some file holding rows is not in the archive codec
    unreadable: str | None = None  # why its footers could not be read (a run fails the partition with it)

    def describe(self, wanted: str) -> str:
        """`date=2023-01-01 (ended 2023-01-02 00:00): 5 file(s), 12.0 KB, SNAPPY -> recompress to GZIP`."""
        codecs = "+".join(self.codecs) or "no rows"
        action = f"recompress to {wanted}" if self.recompress else f"skip: already {wanted}"
        if self.unreadable:
            action = f"unreadable: {self.unreadable}"
        head = f"{self.partition} (ended {self.ended:%Y-%m-%d %H:%M}): {self.files} file(s), {human_bytes(self.bytes)}"
        return f"{head}, {codecs} -> {action}"


@dataclass(frozen=True)
class ArchivePlan:
    """What an archive run would do to a table: its archive-aged partitions, how many are newer, the untimed."""

    table: str
    rule: ArchiveRule
    wanted: str  # the archive codec as the footers name it
    candidates: tuple[ArchiveCandidate, ...]
    newer: int
    untimed: tuple[str, ...]

    def lines(self) -> list[str]:
        """The dry-run report: one line per archive-aged partition, then a summary."""
        lines = [f"{self.table} {c.describe(self.wanted)}" for c in self.candidates]
        todo = [c for c in self.candidates if c.recompress]
        lines.append(
            f"{self.table}: {len(todo)} of {len(self.candidates)} partition(s) ended before "
            f"{self.rule.cutoff:%Y-%m-%d %H:%M} UTC would be recompressed to {self.wanted} "
            f"({sum(c.files for c in todo)} file(s), {human_bytes(sum(c.bytes for c in todo))}); {self.newer} newer "
            "left alone" + (f"; untimed, left alone: {', '.join(self.untimed)}" if self.untimed else "")
        )
        return lines


def _archived_table(spark: SparkSession, database: str, table: str, rule: ArchiveRule) -> tuple[TableInfo, ArchiveRule]:
    """The table, refused as compaction refuses it or when unpartitioned, and the rule checked against it, with its
    codec resolved for the table's format (`ArchiveRule.codec_of`)."""
    info = load_compactable(spark, database, table)
    refuse_copy_options(info, rule.codec, True, ())  # copied text and Avro keep their codec
    if not info.is_partitioned:
        raise ConfigError(
            f"{info.qualified_name} is not partitioned: archive rewrites old partitions; nothing was changed"
        )
    codec = validated_codec(rule.codec_of(info.file_format), info.file_format, rule.setting)
    rule.clock.check_columns(info.partition_columns, info.qualified_name)
    return info, replace(rule, codec=codec, standing=None)


def plan_archive(spark: SparkSession, database: str, table: str, rule: ArchiveRule) -> ArchivePlan:
    """The dry run: each archive-aged partition with its end, files, bytes and codecs. Reads the metastore and the
    files' footers, takes no lease and changes nothing."""
    info, rule = _archived_table(spark, database, table, rule)
    selection = rule.clock.select_older(table_units(spark, info), rule.cutoff, spec_of=lambda u: u.spec)
    wanted = footer_codec(info.file_format, rule.codec)
    storage, candidates = Storage(spark), []
    for unit in selection.older:
        files = storage.list_data_files(unit.location) if storage.exists(unit.location) else []
        try:
            footers = read_footers(spark, info.file_format, [f.path for f in files], unit.partition)
        except UnitFailure as failure:
            footers, unreadable = [], str(failure)
        else:
            unreadable = None
        codecs = tuple(sorted({"+".join(f.codecs) for f in footers if f.rows}))
        ended = rule.clock.end(unit.spec)
        size = sum(f.size for f in files)
        recompress = bool(not_in_codec(footers, wanted))
        candidates.append(ArchiveCandidate(unit.partition, ended, len(files), size, codecs, recompress, unreadable))
    untimed = tuple(u.partition for u in selection.untimed)
    return ArchivePlan(info.qualified_name, rule, wanted, tuple(candidates), len(selection.newer), untimed)


def archive_table(
    spark: SparkSession,
    database: str,
    table: str,
    options: CompactionOptions,
    rule: ArchiveRule,
    progress: Progress = no_progress,
) -> tuple[ArchiveRule, list[UnitResult]]:
    """Recompress the table's archive-aged partitions to the archive codec through the compaction protocol,
    compacting them at the same time: the rule with its codec resolved, and one result per archive-aged partition
    (compacted = archived; skipped when already in the codec; failed when its files cannot be read). Planned under
    the table's lease, after the recovery of interrupted runs."""
    _, rule = _archived_table(spark, database, table, rule)  # refused before the lease, nothing touched
    archive = replace(options, archive=rule, recompress_only=True, force=False)

    def aged(units: list[Unit]) -> list[Unit]:
        return [u for u in units if rule.covers(u.spec)]

    return rule, compact_table(spark, database, table, archive, progress=progress, select=aged)
