"""Which of a unit's input files are concatenated at the byte level and which the Spark rewrite takes: pure Python.

A concatenation copies row groups (Parquet, `ParquetRewriter`) or stripes (ORC, `OrcFile.mergeFiles`) as they are into
one output file, never decoding a value, so it is only correct for files that agree on everything a reader uses to
decode them: the same physical schema, the same codec(s), the same writer (Parquet created_by; ORC file version, writer
version and software version) and the same key-value metadata (Spark's `org.apache.spark.version`,
`...parquet.row.metadata`, `...legacyDateTime` and `...legacyINT96`, which decide how Spark rebases old dates and INT96
timestamps, are copied to the output: files that differ there cannot share one footer). It is only worth it for files
whose every row group / stripe is large (`min_row_group_bytes`): a concatenated file keeps its inputs' row groups and
scans the slower the smaller they are (benchmarks/README.md, 7), so small row groups are never concatenated. Encrypted
files are never concatenated, nor files of parquet-mr before 1.8.0 (readers correct their statistics and delta byte
arrays by that writer's version, which the concatenated file's `created_by`, the concatenating library's, would no
longer name), nor INT96 timestamps of another writer than parquet-mr (Hive converts them by the writer's name, e.g.
Impala's).
A group of such files is concatenated when it has at least two of them, or one whose codec the run changes (Parquet's
codec transform recompresses pages without decoding values); a group bigger than the block size is split into
outputs of about the block size. Everything else is rewritten by Spark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lakekeeper_dagster.engine.rewrite.footers import FileFooter


@dataclass(frozen=True)
class ConcatPlan:
    """`groups`: the input paths of each concatenated output file; `rewrite`: the inputs Spark rewrites;
    `reasons`: why each rewritten input is not concatenated (for the log)."""

    groups: tuple[tuple[str, ...], ...]
    rewrite: tuple[str, ...]
    reasons: dict[str, str]


def _group_key(footer: FileFooter) -> tuple:
    return footer.physical_schema, footer.codecs, footer.writer, footer.key_values


def _old_parquet_mr(writer: str) -> bool:
    """Written by parquet-mr before 1.8.0, whose files' readers work around known bugs (statistics, delta byte
    arrays) by the writer's version: a concatenated file names the concatenating library as its writer and would lose
    that."""
    found = re.match(r"parquet-mr version (\d+)\.(\d+)", writer)
    return found is not None and (int(found[1]), int(found[2])) < (1, 8)


def _never_concatenated(footer: FileFooter, min_row_group_bytes: int) -> str | None:
    """Why this file can never be concatenated, or None."""
    if footer.encrypted:
        return "encrypted"
    if _old_parquet_mr(footer.writer):
        return f"written by {footer.writer}, older than parquet-mr 1.8.0"
    if footer.timestamp_type == "INT96" and not footer.writer.startswith("parquet-mr"):
        return f"INT96 timestamps written by {footer.writer or 'an unnamed writer'} (Hive adjusts them by the writer)"
    if not footer.row_groups:
        return "no row groups"
    smallest = min(size for _, size in footer.row_groups)
    if smallest < min_row_group_bytes:
        return f"a row group/stripe of {smallest} bytes < {min_row_group_bytes}"
    return None


def _split(footers: list[FileFooter], target_bytes: int) -> list[list[FileFooter]]:
    """Consecutive runs of files of about `target_bytes` each (a file bigger than that goes alone)."""
    bins: list[list[FileFooter]] = []
    size = 0
    for footer in footers:
        bytes_ = sum(b for _, b in footer.row_groups)
        if bins and size + bytes_ <= target_bytes:
            bins[-1].append(footer)
            size += bytes_
        else:
            bins.append([footer])
            size = bytes_
    return bins


def plan_concat(
    footers: list[FileFooter],
    min_row_group_bytes: int,
    target_bytes: int,
    codec: str | None = None,
    recompresses: bool = False,
) -> ConcatPlan:
    """Split a unit's input files (their footers, in input order) into concatenations and the Spark rewrite.

    `codec`: the codec the run writes, as the footers name it (e.g. ZSTD), None to keep each file's. A group of
    another codec is concatenated with its pages recompressed when the format `recompresses` while concatenating
    (Parquet),
    else rewritten.
    """
    reasons: dict[str, str] = {}
    groups: dict[tuple, list[FileFooter]] = {}
    for footer in footers:
        why = _never_concatenated(footer, min_row_group_bytes)
        if why is None:
            groups.setdefault(_group_key(footer), []).append(footer)
        else:
            reasons[footer.path] = why
    outputs: list[tuple[str, ...]] = []
    for members in groups.values():
        recompress = codec is not None and members[0].codecs != (codec,)
        if recompress and not recompresses:
            reasons.update({f.path: f"codec {'+'.join(f.codecs)}, the run writes {codec}" for f in members})
            continue
        for part in _split(members, target_bytes):
            if len(part) >= 2 or recompress:
                outputs.append(tuple(f.path for f in part))
            else:
                reasons[part[0].path] = (
                    "no other file of the same schema, codec, writer and metadata to concatenate with"
                )
    concatenated = {path for paths in outputs for path in paths}
    rewrite = tuple(f.path for f in footers if f.path not in concatenated)
    return ConcatPlan(tuple(outputs), rewrite, reasons)
