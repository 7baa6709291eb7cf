"""The figures a user compares, as Dagster metadata: at the top level of a materialization and of each check (rows,
checksum, files and size before/after), a Markdown summary of the run, and one table row per partition when a run
covers several.

A run's totals over several partitions are what one unit of their union would show: rows and files add up, sizes
add up, and checksums combine as the engine combines them (the sum of row hashes, `fingerprint.combine`).
"Before" is what the unit held when the run read it; "after" is what the rewrite wrote for rows and checksum (what
the verification compared), and what the unit holds after the run for files and size (unchanged when it was
skipped or failed).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import dagster as dg

from lakekeeper_dagster.engine.ops.audit import BackupComparison
from lakekeeper_dagster.engine.ops.merge import PeriodCopy
from lakekeeper_dagster.engine.ops.options import UnitResult
from lakekeeper_dagster.engine.plan.thresholds import human_bytes
from lakekeeper_dagster.engine.rewrite.fingerprint import Fingerprint, combine
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster.surface.metadata import (
    HISTORY_RUNS,
    HISTORY_TABLE,
    PER_PARTITION,
    ROW_COUNT_METADATA,
    RUN_SUMMARY,
    STATE,
    TABLE_FILES_AFTER,
    TABLE_FILES_BEFORE,
    TABLE_FILES_FEWER,
)

TABLE_LABEL = "(table)"  # the unit of an unpartitioned table


def label(result: UnitResult) -> str:
    """The unit's Hive partition name, or `(table)` for an unpartitioned table."""
    return result.partition or TABLE_LABEL


def files_after(result: UnitResult) -> int:
    """Data files the unit holds after the run: the rewrite's and the late files carried over when it was
    compacted, else the originals'."""
    if result.status == UnitStatus.COMPACTED:
        return result.files_after + result.carried_files
    return result.files_before


def bytes_after(result: UnitResult) -> int:
    """Bytes the unit holds after the run: the rewrite's when it was compacted, else the originals'."""
    return result.bytes_after if result.status == UnitStatus.COMPACTED else result.bytes_before


def _verified(results: Sequence[UnitResult]) -> list[UnitResult]:
    """The units the engine rewrote and fingerprinted on both sides (compacted, or failed their verification)."""
    return [r for r in results if r.rows_before is not None and r.rows_after is not None]


def _fingerprint(results: Sequence[UnitResult], side: str) -> Fingerprint:
    return combine([Fingerprint(getattr(r, f"rows_{side}"), getattr(r, f"checksum_{side}")) for r in results])


def _verdict(pairs: Sequence[tuple[str, bool]], what: str) -> str:
    """`date=2024-01-01` for one unit; `all 3 partitions match` or `1 of 3 partitions differ: ...` for several."""
    if len(pairs) <= 1:
        return pairs[0][0] if pairs else "(none compared)"
    differ = [name for name, same in pairs if not same]
    if not differ:
        return f"all {len(pairs)} partitions match ({what})"
    shown = ", ".join(differ[:5]) + (", ..." if len(differ) > 5 else "")
    return f"{len(differ)} of {len(pairs)} partitions differ ({what}): {shown}"


def _comparison_table(
    units: Sequence[Any], name: Callable[[Any], str], columns: Sequence[tuple[str, str, Callable[[Any], Any]]]
) -> dg.TableMetadataValue:
    """One row per unit: its name, then each (column, type, value of the unit)."""
    schema = dg.TableSchema(
        columns=[dg.TableColumn("partition", "string"), *(dg.TableColumn(c, t) for c, t, _ in columns)]
    )
    records = [dg.TableRecord({"partition": name(u), **{c: value(u) for c, _, value in columns}}) for u in units]
    return dg.MetadataValue.table(records, schema)


def partition_table(results: Sequence[UnitResult]) -> dg.TableMetadataValue:
    """Every unit of the run: status, files, size, rows and checksum before/after, seconds and reason."""
    return _comparison_table(
        results,
        label,
        [
            ("status", "string", lambda r: str(r.status)),
            ("files_before", "int", lambda r: r.files_before),
            ("files_after", "int", files_after),
            ("size_before", "string", lambda r: human_bytes(r.bytes_before)),
            ("size_after", "string", lambda r: human_bytes(bytes_after(r))),
            ("rows_before", "int", lambda r: r.rows_before),
            ("rows_after", "int", lambda r: r.rows_after),
            ("checksum_before", "string", lambda r: r.checksum_before),
            ("checksum_after", "string", lambda r: r.checksum_after),
            ("seconds", "float", lambda r: round(r.seconds, 3)),
            ("reason", "string", lambda r: r.reason),
        ],
    )


def _summary(
    results: Sequence[UnitResult], before: Fingerprint, after: Fingerprint, backup: str, scan: dict[str, Any]
) -> str:
    """A few lines of Markdown: what the run did to which table, the figures before/after, and what it bought a full
    scan of the table (`scan`, when the table was observed)."""
    table = f"{results[0].database}.{results[0].table}" if results else "(no unit)"
    counts = {status: sum(r.status == status for r in results) for status in UnitStatus}
    done = ", ".join(f"{n} {status}" for status, n in counts.items() if n) or "nothing to do"
    verified = bool(_verified(results))
    lines = [
        f"**`{table}`**: {done} in {sum(r.seconds for r in results):.1f} s",
        "",
        "| | before | after |",
        "|---|---:|---:|",
        f"| files | {sum(r.files_before for r in results)} | {sum(files_after(r) for r in results)} |",
        f"| size | {human_bytes(sum(r.bytes_before for r in results))} | "
        f"{human_bytes(sum(bytes_after(r) for r in results))} |",
    ]
    if verified:
        lines += [
            f"| rows | {before.rows} | {after.rows} |",
            f"| checksum | `{before.checksum}` | `{after.checksum}` |",
        ]
    if scan:
        lines += ["", _scan_line(scan, any(r.partition for r in results))]
    if backup:
        lines += ["", f"Originals kept in backup table `{backup}`."]
    others = [r for r in results if r.status != UnitStatus.COMPACTED]
    if others:
        lines += ["", *(f"- `{label(r)}` {r.status}: {r.reason}" for r in others[:10])]
        if len(others) > 10:
            lines.append(f"- ... and {len(others) - 10} more (see `{PER_PARTITION}`)")
    return "\n".join(lines)


def run_state(results: Sequence[UnitResult]) -> str:
    """What the run did, as the partition's `lakekeeper/state`: the unit's status (compacted, skipped, failed), or
    the count of each over several units (a partition's materialization carries the run's totals then)."""
    if len(results) == 1:
        return str(results[0].status).lower()
    counts = {str(s).lower(): sum(r.status == s for r in results) for s in UnitStatus}
    return ", ".join(f"{n} {status}" for status, n in counts.items() if n)


def history_metadata(table: str, results: Sequence[UnitResult]) -> dict[str, Any]:
    """Where the run's history records are: the history table and the run id(s) its records carry."""
    runs = sorted({r.run_id for r in results if r.run_id})
    return {HISTORY_TABLE: table, HISTORY_RUNS: dg.MetadataValue.json(runs)} if runs else {HISTORY_TABLE: table}


def unit_metadata(results: Sequence[UnitResult], table_files: dict[str, int] | None = None) -> dict[str, Any]:
    """Top-level figures of a compaction run (totals over its units), what it bought a full scan of the table (from
    each unit's files before it, `table_files`, when the table was observed), its Markdown summary, and the
    per-partition table when the run covers several units."""
    compacted = [r for r in results if r.status == UnitStatus.COMPACTED]
    verified = _verified(results)
    before, after = _fingerprint(verified, "before"), _fingerprint(verified, "after")
    backup = next((r.backup_table for r in compacted if r.backup_table), "") or ""
    scan = table_scan_metadata(table_files or {}, results)
    metadata: dict[str, Any] = {
        STATE: run_state(results),
        RUN_SUMMARY: dg.MetadataValue.md(_summary(results, before, after, backup, scan)),
        **scan,
        "files_before": sum(r.files_before for r in results),
        "files_after": sum(files_after(r) for r in results),
        "size_before": human_bytes(sum(r.bytes_before for r in results)),
        "size_after": human_bytes(sum(bytes_after(r) for r in results)),
        "target_files": sum(r.target_files for r in results),
        "seconds": round(sum(r.seconds for r in results), 3),
        "partitions_compacted": len(compacted),
        "partitions_skipped": sum(r.status == UnitStatus.SKIPPED for r in results),
        "partitions_failed": sum(r.status == UnitStatus.FAILED for r in results),
        "partitions_suspended": sum(r.status == UnitStatus.SUSPENDED for r in results),
        "backup_table": backup,
    }
    if verified:
        metadata.update(
            rows_before=before.rows,
            rows_after=after.rows,
            checksum_before=before.checksum,
            checksum_after=after.checksum,
        )
    if len(results) == 1 and compacted:  # a partition's own rows; a run over several records its totals on each
        metadata[ROW_COUNT_METADATA] = compacted[0].rows_after or 0
    if len(results) == 1:
        metadata["location"] = dg.MetadataValue.path(results[0].location)
        metadata["reason"] = results[0].reason
    elif results:
        metadata[PER_PARTITION] = partition_table(results)
    return metadata


def table_scan_metadata(files: dict[str, int], results: Sequence[UnitResult]) -> dict[str, Any]:
    """What a run that compacted a unit bought a full scan of the whole table: the files it opened before the run
    and opens after, from each unit's files as last observed or left by a compaction since (`files`, unit name ->
    files: `table_files.py`) with this run's units as it read and left them, and by how many times fewer. Empty
    for a table never observed, or a run that compacted nothing."""
    if not files or not any(r.status == UnitStatus.COMPACTED for r in results):
        return {}
    ours = {r.partition or "": r for r in results}
    others = sum(count for unit, count in files.items() if unit not in ours)
    before = others + sum(r.files_before for r in ours.values())
    after = others + sum(files_after(r) for r in ours.values())
    metadata: dict[str, Any] = {TABLE_FILES_BEFORE: before, TABLE_FILES_AFTER: after}
    if 0 < after < before:
        metadata[TABLE_FILES_FEWER] = round(before / after, 2)
    return metadata


def _scan_line(scan: dict[str, Any], partitioned: bool) -> str:
    """One sentence for `table_scan_metadata`'s figures."""
    before, after = scan[TABLE_FILES_BEFORE], scan[TABLE_FILES_AFTER]
    line = f"A full scan of the table opens {after:,} files"
    line += f" instead of {before:,}" if after != before else ", as before"
    fewer = [f"{scan[TABLE_FILES_FEWER]}x fewer"] if TABLE_FILES_FEWER in scan else []
    others = ["its other partitions as last observed or compacted since"] if partitioned else []
    return line + (f" ({'; '.join(fewer + others)})" if fewer or others else "") + "."


def _side_by_side(results: Sequence[UnitResult], figure: str, same: Callable[[UnitResult], bool]) -> dict[str, Any]:
    """`figure`_before/_after of the verified units at the top level (a unit's values, or the totals), the verdict,
    and the per-unit comparison when there are several."""
    verified = _verified(results)
    pairs = [(label(r), same(r)) for r in verified]
    metadata: dict[str, Any] = {"partitions": _verdict(pairs, figure)}
    if verified:
        before, after = _fingerprint(verified, "before"), _fingerprint(verified, "after")
        metadata[f"{figure}_before"] = getattr(before, figure)
        metadata[f"{figure}_after"] = getattr(after, figure)
    if len(verified) > 1:
        kind = "int" if figure == "rows" else "string"
        metadata[PER_PARTITION] = _comparison_table(
            verified,
            label,
            [
                (f"{figure}_before", kind, lambda r: getattr(r, f"{figure}_before")),
                (f"{figure}_after", kind, lambda r: getattr(r, f"{figure}_after")),
                ("matches", "bool", same),
            ],
        )
    return metadata


def rows_check_metadata(results: Sequence[UnitResult]) -> dict[str, Any]:
    """`row_count_preserved`: rows before/after, and the units whose files could not be read."""
    unreadable = [label(r) for r in results if r.status == UnitStatus.FAILED and r.rows_before is None]
    metadata = _side_by_side(results, "rows", lambda r: r.row_count_preserved)
    if unreadable:
        metadata["unreadable"] = ", ".join(unreadable)
    return metadata


def checksum_check_metadata(results: Sequence[UnitResult]) -> dict[str, Any]:
    """`content_checksum_matches`: the content checksum before/after, as the engine prints it."""
    return _side_by_side(results, "checksum", lambda r: r.checksum_matches)


def files_check_metadata(results: Sequence[UnitResult]) -> dict[str, Any]:
    """`files_within_target`: files before/after and the plan's target, over the compacted units."""
    compacted = [r for r in results if r.status == UnitStatus.COMPACTED]
    metadata: dict[str, Any] = {
        "partitions": _verdict([(label(r), r.files_after <= r.target_files) for r in compacted], "within target"),
        "files_before": sum(r.files_before for r in compacted),
        "files_after": sum(r.files_after for r in compacted),
        "target_files": sum(r.target_files for r in compacted),
    }
    if len(compacted) > 1:
        metadata[PER_PARTITION] = _comparison_table(
            compacted,
            label,
            [
                ("files_before", "int", lambda r: r.files_before),
                ("files_after", "int", lambda r: r.files_after),
                ("target_files", "int", lambda r: r.target_files),
                ("within_target", "bool", lambda r: r.files_after <= r.target_files),
            ],
        )
    return metadata


def backup_check_metadata(comparisons: Sequence[BackupComparison]) -> dict[str, Any]:
    """`live_matches_backup`: rows and checksum of the originals the backup kept against the live files (a unit's
    values, or the totals), the verdict, and the per-unit comparison when there are several."""
    metadata: dict[str, Any] = {
        "backup_table": comparisons[0].backup_table if comparisons else "(no backup)",
        "partitions_compared": len(comparisons),
        "partitions": _verdict([(c.partition or TABLE_LABEL, c.matches) for c in comparisons], "rows and checksum"),
    }
    if comparisons:
        backup = combine([Fingerprint(c.backup_rows, c.backup_checksum) for c in comparisons])
        live = combine([Fingerprint(c.live_rows, c.live_checksum) for c in comparisons])
        metadata.update(
            rows_backup=backup.rows,
            rows_live=live.rows,
            checksum_backup=backup.checksum,
            checksum_live=live.checksum,
            mismatches=sum(not c.matches for c in comparisons),
        )
    if len(comparisons) > 1:
        metadata[PER_PARTITION] = _comparison_table(
            comparisons,
            lambda c: c.partition or TABLE_LABEL,
            [
                ("rows_backup", "int", lambda c: c.backup_rows),
                ("rows_live", "int", lambda c: c.live_rows),
                ("checksum_backup", "string", lambda c: c.backup_checksum),
                ("checksum_live", "string", lambda c: c.live_checksum),
                ("matches", "bool", lambda c: c.matches),
            ],
        )
    return metadata


def copy_check_metadata(copies: Sequence[PeriodCopy], figure: str) -> dict[str, Any]:
    """A merged table's check on `figure` (`rows` or `checksum`): before (the period's fine files, as its merge read
    them) and after (its copy), totals at the top level, the verdict, and each partition's when there are several."""

    def same(copy: PeriodCopy) -> bool:
        return getattr(copy.before, figure) == getattr(copy.after, figure)

    before, after = combine([c.before for c in copies]), combine([c.after for c in copies])
    metadata: dict[str, Any] = {
        "partitions": _verdict([(c.partition, same(c)) for c in copies], figure),
        f"{figure}_before": getattr(before, figure),
        f"{figure}_after": getattr(after, figure),
    }
    if len(copies) > 1:
        kind = "int" if figure == "rows" else "string"
        metadata[PER_PARTITION] = _comparison_table(
            copies,
            lambda c: c.partition,
            [
                (f"{figure}_before", kind, lambda c: getattr(c.before, figure)),
                (f"{figure}_after", kind, lambda c: getattr(c.after, figure)),
                ("matches", "bool", same),
            ],
        )
    return metadata
