"""Byte-level concatenation and recompression: row groups / stripes copied, never decoded, where the files agree on
everything a reader decodes them with; everything else rewritten by Spark; data intact."""

from __future__ import annotations

import dataclasses

import pytest

from lakekeeper_dagster.engine.errors import ConfigError, UnitFailure
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.rewrite import concat
from lakekeeper_dagster.engine.rewrite.concat import _orc, _parquet, prove_copy
from lakekeeper_dagster.engine.rewrite.concatplan import plan_concat
from lakekeeper_dagster.engine.rewrite.footers import FileFooter, read_footers
from lakekeeper_dagster.engine.settings import EngineSettings
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster_tests.tables import OPTIONS, data_files, hidden_dirs, rows_of
from spark_resources.py4j import hadoop_conf, jvm

CONCATENATING = dataclasses.replace(OPTIONS, concat_min_row_group_bytes=1)  # KB-sized row groups count as large
SPARK_KEYS = ("org.apache.spark.version", "org.apache.spark.sql.parquet.row.metadata")


# --- the rule, without Spark -------------------------------------------------------------------------------------


def _footer(path: str, groups=((100, 50),), **fields) -> FileFooter:
    base = {"codecs": ("SNAPPY",), "physical_schema": "message s { int64 id; }", "writer": "parquet-mr 1.17.0"}
    return FileFooter(path, sum(r for r, _ in groups), ("id",), row_groups=groups, **{**base, **fields})


def test_rule_concatenates_alike_files_with_large_row_groups_only():
    alike = [_footer("a"), _footer("b"), _footer("c", groups=((100, 50), (10, 5)))]  # c: one small row group
    plan = plan_concat(alike, min_row_group_bytes=50, target_bytes=1000)
    assert plan.groups == (("a", "b"),) and plan.rewrite == ("c",) and "5 bytes" in plan.reasons["c"]


@pytest.mark.parametrize(
    "different",
    [
        {"physical_schema": "message s { int32 id; }"},
        {"codecs": ("GZIP",)},
        {"writer": "parquet-mr 1.10.1"},
        {"key_values": (("org.apache.spark.legacyDateTime", ""),)},
        {"key_values": (("org.apache.spark.legacyINT96", ""),)},
        {"encrypted": True},
    ],
)
def test_rule_never_concatenates_files_that_differ(different):
    plan = plan_concat([_footer("a"), _footer("b", **different)], min_row_group_bytes=1, target_bytes=1000)
    assert plan.groups == () and plan.rewrite == ("a", "b")


def test_rule_never_concatenates_files_of_parquet_mr_before_1_8():
    old = [_footer(name, writer="parquet-mr version 1.6.0 (build abc)") for name in "ab"]
    assert plan_concat(old, 1, 1000).rewrite == ("a", "b")
    new = [_footer(name, writer="parquet-mr version 1.12.3 (build abc)") for name in "ab"]
    assert plan_concat(new, 1, 1000).groups == (("a", "b"),)


def test_rule_never_concatenates_int96_timestamps_of_another_writer_than_parquet_mr():
    impala = [_footer(name, writer="impala version 4.1.0", timestamp_type="INT96") for name in "ab"]
    plan = plan_concat(impala, 1, 1000)
    assert plan.rewrite == ("a", "b") and "INT96 timestamps written by impala" in plan.reasons["a"]
    spark = [_footer(name, writer="parquet-mr version 1.15.2", timestamp_type="INT96") for name in "ab"]
    assert plan_concat(spark, 1, 1000).groups == (("a", "b"),)


def test_rule_splits_a_group_near_the_block_size_and_recompresses_only_where_the_format_can():
    files = [_footer(name, groups=((100, 400),)) for name in "abcde"]
    assert plan_concat(files, 1, 1000).groups == (("a", "b"), ("c", "d"))  # e alone: rewritten
    assert plan_concat(files[:1], 1, 1000, codec="ZSTD", recompresses=True).groups == (("a",),)
    assert plan_concat(files[:2], 1, 1000, codec="ZSTD").rewrite == ("a", "b")  # ORC: no codec transform
    assert plan_concat(files[:2], 1, 1000, codec="SNAPPY").groups == (("a", "b"),)  # already in the codec


def test_codec_setting_is_validated():
    with pytest.raises(ValueError, match="codec.*allowed: .*zstd"):  # the config loader says ConfigError
        EngineSettings(codec="lzo")
    options = EngineSettings(codec="ZSTD").compaction_options("db", "t", owner="cli")
    assert options.codec == "zstd"
    with pytest.raises(ConfigError, match="--codec"):
        EngineSettings().compaction_options("db", "t", owner="cli", codec="brotli")


# --- real tables -------------------------------------------------------------------------------------------------


def _write(spark, location: str, first: int, rows: int, fmt: str = "parquet", columns=(), **options) -> None:
    """One file of `rows` rows with many small row groups (stripes), appended at `location`."""
    df = spark.range(first, first + rows, numPartitions=1).selectExpr(
        "id", "concat('v', cast(id AS string)) AS v", "cast(id % 7 AS int) AS n", *columns
    )
    small = {"parquet.block.size": "8192"} if fmt == "parquet" else {"orc.stripe.size": "4096"}
    df.write.mode("append").format(fmt).options(**{**small, **options}).save(location)


def _table(spark, database: str, root, fmt: str = "parquet", columns: str = "id BIGINT, v STRING, n INT") -> str:
    spark.sql(f"CREATE EXTERNAL TABLE `{database}`.ev ({columns}) STORED AS {fmt} LOCATION '{root.as_uri()}'")
    return f"{database}.ev"


def _footers(spark, fmt: str, files) -> list[FileFooter]:
    return read_footers(spark, fmt, [f"file://{p}" for p in files], "test")


def _compacts_intact(spark, database: str, table: str, merged: int, files_after: int, rows: int) -> None:
    """Compact `ev` with concatenation on: compacted, `merged` files concatenated, `files_after` files, rows kept."""
    before = rows_of(spark, table)
    (result,) = compact_table(spark, database, "ev", CONCATENATING)
    assert (result.status, result.files_byte_merged, result.files_after) == (UnitStatus.COMPACTED, merged, files_after)
    assert result.rows_after == rows and result.checksum_matches
    assert rows_of(spark, table) == before


def _on_disk(root) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("fmt", ["parquet", "orc"])
def test_alike_files_are_concatenated_at_the_byte_level(spark, database, data_dir, fmt):
    table = _table(spark, database, data_dir, fmt)
    for first in (0, 5000):
        _write(spark, data_dir.as_uri(), first, 5000, fmt)
    inputs = _footers(spark, fmt, data_files(data_dir))
    _write(spark, data_dir.as_uri(), 10000, 10, fmt, compression="gzip" if fmt == "parquet" else "zlib")  # alone
    before = rows_of(spark, table)

    (result,) = compact_table(spark, database, "ev", CONCATENATING)

    assert (result.status, result.files_byte_merged, result.files_after) == (UnitStatus.COMPACTED, 2, 2)
    assert result.rows_after == 10010 and result.checksum_matches  # the concatenated and the rewritten file
    (output,) = _footers(spark, fmt, [p for p in data_files(data_dir) if p.name.startswith("lk-merged-")])
    assert output.rows == 10000 and len(output.row_groups) == sum(len(f.row_groups) for f in inputs) > 2
    assert all(key in dict(output.key_values) for key, _ in inputs[0].key_values)  # Spark's keys kept
    assert {k: v for k, v in output.key_values if k in dict(inputs[0].key_values)} == dict(inputs[0].key_values)
    assert output.physical_schema == inputs[0].physical_schema and output.codecs == inputs[0].codecs
    assert rows_of(spark, table) == before


@pytest.mark.parametrize(
    ("columns", "second"),
    [
        ("id BIGINT, v STRING, n INT, x STRING", ("cast(id % 7 AS int) AS n", "'x' AS x")),  # an extra column
        ("id BIGINT, v STRING, n BIGINT", ("cast(id % 7 AS bigint) AS n",)),  # INT32 in one file, INT64 in the other
    ],
    ids=["extra column", "physical type"],
)
def test_parquet_files_that_differ_are_rewritten_by_spark(spark, database, data_dir, columns, second):
    table = _table(spark, database, data_dir, "parquet", columns)
    _write(spark, data_dir.as_uri(), 0, 3000)
    df = spark.range(3000, 6000, numPartitions=1).selectExpr("id", "concat('v', cast(id AS string)) AS v", *second)
    df.write.mode("append").option("parquet.block.size", "8192").parquet(data_dir.as_uri())
    inputs = _footers(spark, "parquet", data_files(data_dir))
    assert inputs[0].physical_schema != inputs[1].physical_schema

    _compacts_intact(spark, database, table, merged=0, files_after=1, rows=6000)


def test_orc_files_of_different_writer_versions_are_rewritten_by_spark(spark, database, data_dir):
    table = _table(spark, database, data_dir, "orc")
    _write(spark, data_dir.as_uri(), 0, 3000, "orc", **{"orc.write.format": "0.11"})
    _write(spark, data_dir.as_uri(), 3000, 3000, "orc")
    first, second = _footers(spark, "orc", data_files(data_dir))
    assert first.writer != second.writer and first.physical_schema == second.physical_schema
    before = rows_of(spark, table)

    (result,) = compact_table(spark, database, "ev", CONCATENATING)

    assert (result.status, result.files_byte_merged, result.files_after) == (UnitStatus.COMPACTED, 0, 1)
    assert result.rows_after == 6000 and result.checksum_matches
    assert rows_of(spark, table) == before


def test_int96_and_int64_timestamps_are_never_concatenated(spark, database, data_dir):
    table = _table(spark, database, data_dir, "parquet", "id BIGINT, v STRING, n INT, ts TIMESTAMP")
    for first, kind in ((0, "INT96"), (3000, "TIMESTAMP_MICROS")):
        spark.conf.set("spark.sql.parquet.outputTimestampType", kind)
        try:
            _write(spark, data_dir.as_uri(), first, 3000, columns=("timestamp_seconds(id) AS ts",))
        finally:
            spark.conf.unset("spark.sql.parquet.outputTimestampType")
    inputs = _footers(spark, "parquet", data_files(data_dir))
    assert plan_concat(inputs, 1, 1 << 30).rewrite == tuple(f.path for f in inputs)  # the rule keeps them apart
    before, on_disk = rows_of(spark, table), _on_disk(data_dir)

    (result,) = compact_table(spark, database, "ev", CONCATENATING)

    # Spark's rewrite cannot keep both in one file either (`encodings.py`): refused, nothing changed
    assert result.status == UnitStatus.FAILED and "timestamp type" in result.reason and not result.files_byte_merged
    assert _on_disk(data_dir) == on_disk and rows_of(spark, table) == before


def test_encrypted_parquet_is_never_concatenated(spark, database, data_dir):
    _table(spark, database, data_dir, "parquet")
    for first in (0, 3000):
        _write(spark, data_dir.as_uri(), first, 3000)
    plain = data_files(data_dir)
    java = jvm(spark)
    crypto = java.org.apache.parquet.crypto
    column = crypto.ColumnEncryptionProperties.builder("v").withKey(bytearray(range(16, 32))).build()
    keys = java.java.util.HashMap()
    keys.put(column.getPath(), column)
    properties = crypto.FileEncryptionProperties.builder(bytearray(range(16))).withEncryptedColumns(keys)
    properties = properties.withPlaintextFooter().build()  # its footer readable, column v not without its key
    for path in plain:  # each file encrypted in place of the plain one (its footer stays readable)
        hidden = path.with_name(f"enc-{path.name}")
        inputs = java.java.util.ArrayList()
        inputs.add(java.org.apache.hadoop.fs.Path(path.as_uri()))
        columns = java.java.util.ArrayList()
        columns.add("v")
        options = java.org.apache.parquet.hadoop.rewrite.RewriteOptions.Builder(
            hadoop_conf(spark), inputs, java.org.apache.hadoop.fs.Path(hidden.as_uri())
        )
        rewriter = java.org.apache.parquet.hadoop.rewrite.ParquetRewriter(
            options.encrypt(columns).encryptionProperties(properties).build()
        )
        rewriter.processBlocks()
        rewriter.close()
        path.unlink()
    inputs = _footers(spark, "parquet", data_files(data_dir))
    assert all(f.encrypted for f in inputs) and plan_concat(inputs, 1, 1 << 30).groups == ()
    on_disk = _on_disk(data_dir)

    (result,) = compact_table(spark, database, "ev", CONCATENATING)

    # routed to the Spark rewrite, which has no key here: the unit fails, nothing changed
    assert result.status == UnitStatus.FAILED and not result.files_byte_merged
    assert "could not read or write" in result.reason
    assert _on_disk(data_dir) == on_disk and not hidden_dirs(data_dir)


def test_a_concatenation_that_loses_row_groups_is_given_up_for_a_spark_rewrite(spark, database, data_dir, monkeypatch):
    table = _table(spark, database, data_dir)
    for first in (0, 3000):
        _write(spark, data_dir.as_uri(), first, 3000)
    before = rows_of(spark, table)
    monkeypatch.setenv("LAKEKEEPER_FAULT", "drop-concatenated-row-groups")

    (result,) = compact_table(spark, database, "ev", CONCATENATING)

    monkeypatch.delenv("LAKEKEEPER_FAULT")
    assert (result.status, result.files_byte_merged, result.files_after) == (UnitStatus.COMPACTED, 0, 1)
    assert "byte merge given up" in result.reason and "not a byte copy" in result.reason
    assert "fewer than its inputs" in result.reason
    assert not [p for p in data_files(data_dir) if p.name.startswith("lk-merged-")] and not hidden_dirs(data_dir)
    assert rows_of(spark, table) == before


@pytest.mark.parametrize(("fmt", "copy", "magic"), [("parquet", _parquet, 4), ("orc", _orc, 3)])
def test_a_concatenation_is_proven_byte_for_byte_and_a_changed_byte_or_order_fails(spark, data_dir, fmt, copy, magic):
    for first in (0, 5000):
        _write(spark, data_dir.as_uri(), first, 5000, fmt)
    inputs = [f"file://{p}" for p in data_files(data_dir)]
    output = data_dir.parent / f"copy.{fmt}"
    copy(spark, inputs, f"file://{output}", None)

    proof = prove_copy(spark, fmt, f"file://{output}", inputs, "test")
    assert (proof["rows"], proof["output_bytes"]) == (10000, output.stat().st_size)
    with pytest.raises(UnitFailure, match=r"not a byte copy of them: (row group|stripe) 0 .*(rows|statistics)"):
        prove_copy(spark, fmt, f"file://{output}", inputs[::-1], "test")  # the inputs in another order
    copied = bytearray(output.read_bytes())
    copied[magic + 100] ^= 0xFF  # inside the first column chunk / stripe, which starts right after the magic number
    output.write_bytes(bytes(copied))
    (data_dir.parent / f".copy.{fmt}.crc").unlink()  # a copier's bug, not a disk's: the sidecar checksum would agree
    with pytest.raises(UnitFailure, match=r"(row group|stripe) 0 .*: its byte 100 differs from the input's"):
        prove_copy(spark, fmt, f"file://{output}", inputs, "test")


def test_a_parquet_concatenation_keeps_its_inputs_bloom_filters_byte_for_byte(spark, data_dir):
    for first in (0, 5000):
        _write(spark, data_dir.as_uri(), first, 5000, **{"parquet.bloom.filter.enabled#v": "true"})
    inputs = [f"file://{p}" for p in data_files(data_dir)]
    output = data_dir.parent / "copy.parquet"
    _parquet(spark, inputs, f"file://{output}", None)

    java = jvm(spark)
    footer = java.org.apache.parquet.hadoop.ParquetFileReader.readFooter(
        hadoop_conf(spark), java.org.apache.hadoop.fs.Path(f"file://{output}")
    )
    filters = [c for b in footer.getBlocks() for c in b.getColumns() if c.getPath().toDotString() == "v"]
    assert filters and all(c.getBloomFilterOffset() >= 0 and c.getBloomFilterLength() > 0 for c in filters)

    assert prove_copy(spark, "parquet", f"file://{output}", inputs, "test")["rows"] == 10000
    assert spark.read.parquet(f"file://{output}").where("v = 'v7777'").count() == 1
    copied = bytearray(output.read_bytes())
    copied[filters[0].getBloomFilterOffset() + 100] ^= 0xFF
    output.write_bytes(bytes(copied))
    (data_dir.parent / ".copy.parquet.crc").unlink()
    with pytest.raises(UnitFailure, match="column v's bloom filter: its byte 100 differs"):
        prove_copy(spark, "parquet", f"file://{output}", inputs, "test")


def test_two_groups_of_one_partition_are_each_proven_and_credited_with_their_inputs(spark, database, data_dir):
    table = _table(spark, database, data_dir)
    for first, codec in ((0, "snappy"), (3000, "snappy"), (6000, "gzip"), (9000, "gzip")):
        _write(spark, data_dir.as_uri(), first, 3000, compression=codec)

    _compacts_intact(spark, database, table, merged=4, files_after=2, rows=12000)


def test_an_input_that_cannot_be_decoded_is_never_concatenated_with_healthy_ones(spark, database, data_dir):
    """A byte copy would carry a damaged page into a file shared with healthy row groups: the inputs are still
    decoded once, so the unit fails and nothing changes."""
    _table(spark, database, data_dir)
    for first in (0, 3000):
        _write(spark, data_dir.as_uri(), first, 3000)
    damaged = data_files(data_dir)[1]
    content = bytearray(damaged.read_bytes())
    content[4 : 4 + 16] = b"\xff" * 16  # the first page header of its first column chunk
    damaged.write_bytes(bytes(content))
    (damaged.parent / f".{damaged.name}.crc").unlink()
    on_disk = _on_disk(data_dir)

    (result,) = compact_table(spark, database, "ev", CONCATENATING)

    assert result.status == UnitStatus.FAILED and damaged.name in result.reason, result.reason
    assert _on_disk(data_dir) == on_disk and not hidden_dirs(data_dir)


def test_a_proven_output_changed_before_verification_is_given_up_for_a_spark_rewrite(
    spark, database, data_dir, monkeypatch
):
    table = _table(spark, database, data_dir)
    for first in (0, 3000):
        _write(spark, data_dir.as_uri(), first, 3000)
    before = rows_of(spark, table)

    def proven_other_size(*arguments):  # as if the file were replaced after its proof
        proof = prove_copy(*arguments)
        return {**proof, "output_bytes": proof["output_bytes"] + 1}

    monkeypatch.setattr(concat, "prove_copy", proven_other_size)
    (result,) = compact_table(spark, database, "ev", CONCATENATING)

    assert (result.status, result.files_byte_merged, result.files_after) == (UnitStatus.COMPACTED, 0, 1)
    assert "changed since it was proven a byte copy" in result.reason
    assert rows_of(spark, table) == before and not hidden_dirs(data_dir)


def test_an_orc_concatenation_that_loses_the_calendar_flag_is_given_up_for_a_spark_rewrite(spark, database, data_dir):
    """ORC's mergeFiles writes the hybrid calendar whatever its inputs used: dates before 1582 of files written in
    the proleptic Gregorian calendar (Hive 3) would read back shifted; the proof finds the calendar changed, and
    Spark rewrites the unit."""
    table = _table(spark, database, data_dir, "orc", "id BIGINT, v STRING, n INT, d DATE")
    old_dates = ("date_add(DATE'1000-01-01', cast(id AS int)) AS d",)
    for first in (0, 5000):
        _write(spark, data_dir.as_uri(), first, 5000, "orc", old_dates, **{"orc.proleptic.gregorian": "true"})
    before = rows_of(spark, table)

    (result,) = compact_table(spark, database, "ev", CONCATENATING)

    assert (result.status, result.files_byte_merged, result.files_after) == (UnitStatus.COMPACTED, 0, 1)
    assert "byte merge given up" in result.reason and "its calendar (proleptic Gregorian or hybrid)" in result.reason
    assert rows_of(spark, table) == before and result.checksum_matches
    assert not hidden_dirs(data_dir)


def test_recompression_keeps_content_and_changes_the_codec(spark, database, data_dir):
    spark.sql(
        f"CREATE EXTERNAL TABLE `{database}`.ev (id BIGINT, v STRING, n INT) PARTITIONED BY (p STRING) "
        f"STORED AS PARQUET LOCATION '{data_dir.as_uri()}'"
    )
    table = f"{database}.ev"
    parts = {"merged": ("snappy", 2), "rewritten": ("snappy", 0), "single": ("snappy", 1), "done": ("zstd", 1)}
    for number, (name, (codec, files)) in enumerate(parts.items()):
        for index in range(files):
            location = f"{data_dir.as_uri()}/p={name}"  # as_uri() would escape the "="
            _write(spark, location, number * 10000 + index * 3000, 3000, compression=codec)
    small = data_dir / "p=rewritten"
    for first in (13000, 13010):  # two files of one tiny row group each: never concatenated
        _write(spark, f"{data_dir.as_uri()}/p=rewritten", first, 10, compression="snappy")
    for name in parts:
        spark.sql(f"ALTER TABLE {table} ADD PARTITION (p='{name}')")
    before, done = rows_of(spark, table), _on_disk(data_dir / "p=done")
    large = _footers(spark, "parquet", data_files(data_dir / "p=merged") + data_files(data_dir / "p=single"))
    smallest = min(size for f in large for _, size in f.row_groups)  # the threshold: every row group of these
    assert all(size < smallest for f in _footers(spark, "parquet", data_files(small)) for _, size in f.row_groups)
    options = dataclasses.replace(CONCATENATING, concat_min_row_group_bytes=smallest, codec="zstd")

    results = {r.partition: r for r in compact_table(spark, database, "ev", options)}

    assert results["p=done"].status == UnitStatus.SKIPPED and _on_disk(data_dir / "p=done") == done
    assert (results["p=merged"].files_byte_merged, results["p=single"].files_byte_merged) == (2, 1)
    assert results["p=rewritten"].files_byte_merged == 0  # its 10-row file's row group is below the threshold
    for name in ("merged", "rewritten", "single"):
        result = results[f"p={name}"]
        assert result.status == UnitStatus.COMPACTED and result.checksum_matches, result.reason
        (output,) = _footers(spark, "parquet", data_files(data_dir / f"p={name}"))
        assert output.codecs == ("ZSTD",)
    assert rows_of(spark, table) == before


def test_a_codec_the_format_does_not_know_is_refused_before_anything_changes(spark, database, data_dir):
    table = _table(spark, database, data_dir)
    for first in (0, 3000):
        _write(spark, data_dir.as_uri(), first, 3000)
    on_disk = _on_disk(data_dir)
    with pytest.raises(ConfigError, match=f"{table}: codec: unknown codec 'zlib' for parquet tables; allowed: gzip"):
        compact_table(spark, database, "ev", dataclasses.replace(OPTIONS, codec="zlib"))
    assert _on_disk(data_dir) == on_disk
