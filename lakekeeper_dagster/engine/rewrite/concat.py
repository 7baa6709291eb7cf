"""Byte-level concatenations of a unit's qualifying input files into its staging directory (`concatplan.plan_concat`
chooses them), each checked right after it is written, and the input fingerprint of the concatenated files.

Parquet goes through `org.apache.parquet.hadoop.rewrite.ParquetRewriter` (column chunks copied as bytes, or pages
recompressed by its codec transform; the inputs' key-value metadata copied to the output, plus
`original.created.by`); never `ParquetFileWriter.appendFile`, which silently drops or corrupts columns when schemas
differ. ORC goes through `OrcFile.mergeFiles`, which copies stripes and returns the inputs it took: the others are
rewritten by Spark. Both create their output exclusively (an existing file is never overwritten).

What proves each output, right after it is written (a failure is a UnitFailure: the caller, `ops/write.py`, gives the
concatenations up and has Spark rewrite the whole unit):
- a copy (no codec change) is proven by its bytes (`spark_resources/CopyProof.java`): its row groups / stripes are
  its inputs', in order, byte for byte, under the same description (statistics and Parquet's page index included)
  and a footer / tail that decodes them alike. Verification does not read it again (`proven`): it holds its inputs'
  very rows, so it is credited with their fingerprint;
- a recompressed Parquet file is checked by its footer (the sum of its inputs' rows and row groups) and read back by
  verification.
Either way the concatenated inputs are fingerprinted by one labelled Spark read: every input row is decoded once, so a
file that cannot be decoded fails its unit before anything is swapped (its staged copy is deleted, never installed in
a file shared with healthy ones), and the recorded checksums stay content checksums.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakekeeper_dagster.engine.errors import UnitFailure
from lakekeeper_dagster.engine.faults import wants
from lakekeeper_dagster.engine.fs.locations import child
from lakekeeper_dagster.engine.fs.storage import DataFile
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.plan.thresholds import target_file_count
from lakekeeper_dagster.engine.rewrite.codec import footer_codec
from lakekeeper_dagster.engine.rewrite.concatplan import ConcatPlan, plan_concat
from lakekeeper_dagster.engine.rewrite.fingerprint import EMPTY, Fingerprint, aggregates, combine, free_column
from lakekeeper_dagster.engine.rewrite.footers import FileFooter, read_footers
from lakekeeper_dagster.engine.rewrite.schema import read_files
from spark_resources.bulk import copy_proof
from spark_resources.py4j import hadoop_conf, java_cause, job_description, jvm

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger(__name__)

# the concatenation loses its last input's row groups: the check after it must see it
DROP_FAULT = "drop-concatenated-row-groups"


@dataclass(frozen=True)
class ProvenCopy:
    """A concatenated file proven byte for byte: the fingerprint of its inputs (it holds their very rows) and its size
    as proven (a file of another size under its name is not the one proven)."""

    fingerprint: Fingerprint
    size: int


@dataclass(frozen=True)
class ConcatOutcome:
    """What a unit's byte-level concatenations did: `rewrite` the inputs left to Spark, `concatenated_files` inputs
    concatenated into `outputs` files, `before` the concatenated inputs' fingerprint, `proven` the outputs proven by
    their bytes, by file name (verification reads the others)."""

    rewrite: list[str]
    concatenated_files: int = 0
    outputs: int = 0
    before: Fingerprint = EMPTY
    proven: dict[str, ProvenCopy] = field(default_factory=dict)

    @property
    def write_mode(self) -> str:
        """Spark's save mode: beside concatenated files, else into a directory that must not exist yet."""
        return "append" if self.outputs else "errorifexists"

    def targets(self, planned: int, inputs: list[DataFile], block_size_bytes: int) -> int:
        """How many files Spark writes: the unit's `planned` count, or, beside concatenated files, that of its share."""
        if not self.outputs:
            return planned
        rewritten = set(self.rewrite)
        return target_file_count(sum(f.size for f in inputs if f.path in rewritten), block_size_bytes)


def _paths(java, paths: list[str]):
    array = java.java.util.ArrayList()
    for path in paths:
        array.add(java.org.apache.hadoop.fs.Path(path))
    return array


def _parquet(spark: SparkSession, inputs: list[str], output: str, codec: str | None) -> list[str]:
    java = jvm(spark)
    rewrite = java.org.apache.parquet.hadoop.rewrite
    target = java.org.apache.hadoop.fs.Path(output)
    builder = rewrite.RewriteOptions.Builder(hadoop_conf(spark), _paths(java, inputs), target)
    if codec is not None:
        builder = builder.transform(java.org.apache.parquet.hadoop.metadata.CompressionCodecName.valueOf(codec))
    rewriter = rewrite.ParquetRewriter(builder.build())
    try:
        rewriter.processBlocks()
    finally:
        rewriter.close()
    return inputs


def _orc(spark: SparkSession, inputs: list[str], output: str, codec: str | None) -> list[str]:
    java = jvm(spark)
    conf = hadoop_conf(spark)
    orc = java.org.apache.orc.OrcFile
    taken = orc.mergeFiles(java.org.apache.hadoop.fs.Path(output), orc.writerOptions(conf), _paths(java, inputs))
    done = {str(path.toString()) for path in taken}
    return [path for path in inputs if str(java.org.apache.hadoop.fs.Path(path).toString()) in done]


def _check(output: FileFooter, inputs: list[FileFooter], label: str) -> None:
    rows, groups = sum(f.rows for f in inputs), sum(len(f.row_groups) for f in inputs)
    if output.rows != rows or len(output.row_groups) != groups:
        raise UnitFailure(
            f"{label}: verification failed: the concatenation of {len(inputs)} file(s) into {output.path} wrote "
            f"{output.rows} rows in {len(output.row_groups)} row group(s)/stripe(s), its inputs hold {rows} in "
            f"{groups}; the output was deleted and the original files are untouched"
        )


def prove_copy(spark: SparkSession, file_format: str, output: str, inputs: list[str], label: str) -> dict[str, Any]:
    """`CopyProof`'s account of a Parquet or ORC concatenation proven byte for byte (`rows`, `output_bytes`...), or
    UnitFailure saying what differs or why it could not be proven."""
    try:
        proof = json.loads(copy_proof(spark).prove(hadoop_conf(spark), file_format, output, json.dumps(inputs)))
    except Exception as error:  # the proof could not run at all (its compilation, a py4j error): not proven
        proof = {"error": f"the proof could not run: {java_cause(error)}"}
    if "error" in proof:
        raise UnitFailure(
            f"{label}: verification failed: the concatenation of {len(inputs)} file(s) into {output} is not a byte "
            f"copy of them: {' '.join(str(proof['error']).split())[:600]}; the output was deleted and the original "
            "files are untouched"
        )
    return proof


def _fingerprints_by_group(
    spark: SparkSession, info: TableInfo, schema: StructType, groups: list[list[str]]
) -> list[Fingerprint]:
    """The fingerprint of each group of files, in one Spark job (a union of one read a group)."""
    from pyspark.sql import functions as F

    key = free_column(schema, "_lk_group")
    frames = [read_files(spark, info, schema, paths).withColumn(key, F.lit(n)) for n, paths in enumerate(groups)]
    rows = functools.reduce(lambda a, b: a.union(b), frames).groupBy(key).agg(*aggregates(schema)).collect()
    found = {int(row[key]): Fingerprint(int(row["rows"]), str(row["checksum"])) for row in rows}
    return [found.get(n, EMPTY) for n in range(len(groups))]


def concat_groups(
    spark: SparkSession,
    info: TableInfo,
    schema: StructType,
    plan: ConcatPlan,
    footers: list[FileFooter],
    directory: str,
    prefix: str,
    codec: str | None,
    label: str,
) -> ConcatOutcome:
    """Write `plan`'s groups into `directory` (files `<prefix>-<n>.<format>`), check each, fingerprint their inputs.

    `spark`: the unit's reading session. `codec`: the codec the outputs get, as the footers name it (Parquet only;
    None keeps the inputs'): a group already in it is copied, not recompressed. An ORC input `mergeFiles` did not take
    is returned in `rewrite` with the others.
    """
    by_path = {f.path: f for f in footers}
    concatenate = _parquet if info.file_format == "parquet" else _orc
    rewrite: list[str] = list(plan.rewrite)
    done: list[tuple[str, list[str], dict[str, Any] | None]] = []  # output name, its inputs, its proof (or None)
    for number, group in enumerate(plan.groups):
        name = f"{prefix}-{number}.{info.file_format}"
        output = child(directory, name)
        transform = codec if codec is not None and any(by_path[p].codecs != (codec,) for p in group) else None
        given = list(group[:-1]) if wants(DROP_FAULT) else list(group)
        taken = concatenate(spark, given, output, transform)
        if wants(DROP_FAULT):
            taken = list(group)
        rewrite += [path for path in group if path not in taken]
        if not taken:
            continue
        proof = None
        if transform is None:
            proof = prove_copy(spark, info.file_format, output, taken, label)
        else:
            _check(read_footers(spark, info.file_format, [output], label)[0], [by_path[p] for p in taken], label)
        done.append((name, taken, proof))
        log.info("%s: concatenated %d file(s) into %s", label, len(taken), output)
    if not done:
        return ConcatOutcome(rewrite)
    concatenated = sum(len(taken) for _, taken, _ in done)
    with job_description(spark, f"lakekeeper compact {label}: fingerprint {concatenated} concatenated input file(s)"):
        parts = _fingerprints_by_group(spark, info, schema, [taken for _, taken, _ in done])
    # the rows Spark read from the inputs are checked against their footers' with the batch's (`ops/batch.py`)
    proven = {
        name: ProvenCopy(part, int(proof["output_bytes"]))
        for (name, _, proof), part in zip(done, parts, strict=True)
        if proof is not None
    }
    return ConcatOutcome(rewrite, concatenated, len(done), combine(parts), proven)


def concat_unit(
    session: Callable[[], SparkSession],
    info: TableInfo,
    schema: StructType,
    footers: list[FileFooter],
    staging: tuple[str, str],
    limits: tuple[int, int],
    codec: str | None,
    label: str,
    rearranged: bool = False,
) -> ConcatOutcome:
    """Concatenate at the byte level what qualifies among a unit's inputs (`footers`) into `staging` (directory, file
    name prefix); the rest is left to Spark.

    `limits`: the smallest row group / stripe concatenated in bytes (0 turns concatenation off) and the block size an
    output stays near. `rearranged` (the run sorts rows or drops columns, which only a rewrite does) turns them off too.
    `codec`: the run's `codec` option, None to keep the files' (ORC cannot change it while concatenating: files of
    another codec are then rewritten). `session` makes the unit's reading session, only when something qualifies.
    """
    min_row_group_bytes, target_bytes = limits
    if min_row_group_bytes <= 0 or rearranged:
        return ConcatOutcome([f.path for f in footers])
    parquet = info.file_format == "parquet"
    wanted = footer_codec(info.file_format, codec) if codec is not None else None
    plan = plan_concat(footers, min_row_group_bytes, target_bytes, wanted, recompresses=parquet)
    for path, why in plan.reasons.items():
        log.debug("%s: %s is rewritten, not concatenated: %s", label, path, why)
    if not plan.groups:
        return ConcatOutcome(list(plan.rewrite))
    directory, prefix = staging
    codec = wanted if parquet else None
    return concat_groups(session(), info, schema, plan, footers, directory, prefix, codec, label)
