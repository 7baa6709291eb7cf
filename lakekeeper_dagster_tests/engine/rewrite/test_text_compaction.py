"""Delimited TEXTFILE compaction: files concatenated byte for byte, every row read back identically
through Hive's SerDe (Spark's HiveTableScanExec on the metastore table) and through Spark's text source; what cannot
be reproduced exactly is refused, nothing changed."""

from __future__ import annotations

import bz2
import gzip
import zlib
from pathlib import Path

import pytest

from lakekeeper_dagster.engine.errors import ConfigError, OperationError
from lakekeeper_dagster.engine.ops.archive import archive_table
from lakekeeper_dagster.engine.ops.audit import verify_against_backup
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.merge import merge_table
from lakekeeper_dagster.engine.ops.options import CompactionOptions
from lakekeeper_dagster.engine.ops.rollback import rollback_table
from lakekeeper_dagster.engine.policies import TablePolicies
from lakekeeper_dagster.engine.protocol import writers
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster_tests.tables import OPTIONS, data_files, hidden_dirs

DELIMITED = (
    "ROW FORMAT DELIMITED FIELDS TERMINATED BY '|' ESCAPED BY '\\\\' COLLECTION ITEMS TERMINATED BY ',' "
    "MAP KEYS TERMINATED BY ':' STORED AS TEXTFILE"
)
COLUMNS = "(id INT, v STRING, tags ARRAY<STRING>, attrs MAP<STRING,INT>)"
# file contents: escaped field and collection delimiters and backslashes, null markers, an empty string, CRLF line
# ends, and a last line without its line end (the next file must not run into it)
FILES = [
    b"1|a\\|b|x,y|k:1\n2|NIL|NIL|NIL\n",
    b"3|back\\\\slash|p\\,q,r|a:1,b:2\r\n4||NIL|c:NIL\r\n",
    b"5|no line end|z|d:5",
    b"6|after|w|e:6\n",
]
EXPECTED = {
    (1, "a|b", ("x", "y"), (("k", 1),)),
    (2, None, None, None),
    (3, "back\\slash", ("p,q", "r"), (("a", 1), ("b", 2))),
    (4, "", None, (("c", None),)),
    (5, "no line end", ("z",), (("d", 5),)),
    (6, "after", ("w",), (("e", 6),)),
}
COMPRESS = {"": lambda data: data, ".gz": gzip.compress, ".deflate": zlib.compress}


def _table(spark, database: str, name: str, location: Path, partitions: list[str], properties: str = "") -> str:
    partitioned = "PARTITIONED BY (date STRING)" if partitions else ""
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.{name} {COLUMNS} {partitioned} {DELIMITED} "
        f"LOCATION '{location.as_uri()}' {properties}"
    )
    # Spark's DDL does not store NULL DEFINED AS where Hive's SerDe reads it from: set as Hive does
    spark.sql(f"ALTER TABLE {database}.{name} SET SERDEPROPERTIES ('serialization.null.format'='NIL')")
    for date in partitions:
        spark.sql(f"ALTER TABLE {database}.{name} ADD PARTITION (date='{date}')")
    return f"{database}.{name}"


def _write(directory: Path, extension: str = "") -> bytes:
    """The test files into `directory`, compressed by `extension`; their lines' bytes, concatenated."""
    directory.mkdir(parents=True, exist_ok=True)
    for number, content in enumerate(FILES):
        (directory / f"part-{number:05d}{extension}").write_bytes(COMPRESS[extension](content))
    return b"".join(c if c.endswith(b"\n") else c + b"\n" for c in FILES)


def _hive_rows(spark, table: str) -> set[tuple]:
    """Every row as Hive's SerDe reads it (HiveTableScanExec), arrays and maps as tuples, partition column aside."""
    spark.catalog.refreshTable(table)
    plan = spark.table(table)._jdf.queryExecution().executedPlan().toString()
    assert "Scan hive" in plan and "LazySimpleSerDe" in plan  # HiveTableScanExec, not a datasource scan
    rows = set()
    for row in spark.table(table).collect():
        tags = tuple(row.tags) if row.tags is not None else None
        attrs = tuple(sorted(row.attrs.items())) if row.attrs is not None else None
        rows.add((row.id, row.v, tags, attrs))
    return rows


def _lines(spark, directory: Path) -> list[str]:
    """The lines as Spark's text source (a datasource read) gives them."""
    return sorted(r.value for r in spark.read.text(directory.as_uri()).collect())


def test_delimited_text_with_nulls_escapes_and_nested_values_compacts_identically(spark, database, data_dir):
    dates = ["2024-01-01", "2024-01-02"]
    table = _table(spark, database, "events", data_dir, dates)
    concatenated = [_write(data_dir / f"date={date}") for date in dates][0]
    rows, lines = _hive_rows(spark, table), _lines(spark, data_dir)
    assert rows == EXPECTED  # the same rows in both partitions

    results = compact_table(spark, database, "events", OPTIONS)

    assert [r.status for r in results] == [UnitStatus.COMPACTED] * 2
    assert all(r.rows_before == r.rows_after == 6 and r.checksum_before == r.checksum_after for r in results)
    assert _hive_rows(spark, table) == EXPECTED and spark.table(table).count() == 12
    assert _lines(spark, data_dir) == lines
    for date in dates:
        (output,) = data_files(data_dir / f"date={date}")
        assert output.read_bytes() == concatenated  # byte for byte, a line end added after the file without one
    assert [c.matches for c in verify_against_backup(spark, database, "events")] == [True, True]

    assert len(rollback_table(spark, database, "events")) == 2  # the originals back, as they were
    for date in dates:
        assert [f.read_bytes() for f in data_files(data_dir / f"date={date}")] == FILES
    assert _hive_rows(spark, table) == EXPECTED and _lines(spark, data_dir) == lines


@pytest.mark.parametrize("extension", [".gz", ".deflate"])
def test_compressed_text_is_concatenated_compressed(spark, database, data_dir, extension):
    table = _table(spark, database, "zipped", data_dir, [])
    concatenated = _write(data_dir, extension)
    lines = _lines(spark, data_dir)
    assert _hive_rows(spark, table) == EXPECTED

    (result,) = compact_table(spark, database, "zipped", OPTIONS)

    assert result.status == UnitStatus.COMPACTED and result.rows_before == result.rows_after == 6
    (output,) = data_files(data_dir)
    assert output.suffix == extension
    decompress = gzip.decompress if extension == ".gz" else _inflate_all
    assert decompress(output.read_bytes()) == concatenated
    assert _hive_rows(spark, table) == EXPECTED and _lines(spark, data_dir) == lines


def _inflate_all(data: bytes) -> bytes:
    """Concatenated zlib streams, decompressed one after the other."""
    out = b""
    while data:
        stream = zlib.decompressobj()
        out += stream.decompress(data)
        data = stream.unused_data
    return out


def test_text_that_cannot_be_reproduced_exactly_is_refused_unchanged(spark, database, data_dir, monkeypatch):
    header = _table(spark, database, "header", data_dir / "h", [], "TBLPROPERTIES ('skip.header.line.count'='1')")
    _write(data_dir / "h")
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.csv (id STRING) ROW FORMAT SERDE "
        f"'org.apache.hadoop.hive.serde2.OpenCSVSerde' STORED AS TEXTFILE LOCATION '{(data_dir / 'c').as_uri()}'"
    )
    bzip = _table(spark, database, "bzip", data_dir / "b", [])
    for number in range(2):
        (data_dir / "b" / f"part-{number}.bz2").write_bytes(bz2.compress(b"1|x|y|k:1\n"))
    plain = _table(spark, database, "plain", data_dir / "p", [])
    _write(data_dir / "p")
    flume = _table(spark, database, "flume", data_dir / "f", [])
    _write(data_dir / "f")
    (data_dir / "f" / "FlumeData.1700000000000.tmp").write_bytes(b"7|open|v|k:7\n")  # Flume is still writing it
    spark.sql(
        f"CREATE TABLE {database}.whole (value STRING) USING text OPTIONS (wholetext 'true') "
        f"LOCATION '{(data_dir / 'w').as_uri()}'"
    )
    _write(data_dir / "w")  # each file one row: concatenated, rows would be lost
    dated = _table(spark, database, "dated", data_dir / "d", ["2019-01-01"])
    _write(data_dir / "d" / "date=2019-01-01")
    monkeypatch.setattr(writers, "WRITER_WAIT_SECONDS", 1.0)
    before = {d: [(f.name, f.read_bytes()) for f in data_files(data_dir / d)] for d in "hbpfwd"}

    with pytest.raises(OperationError, match=f"{header}.*skip.header.line.count=1"):
        compact_table(spark, database, "header", OPTIONS)
    with pytest.raises(OperationError, match=f"{database}.csv.*OpenCSVSerde"):
        compact_table(spark, database, "csv", OPTIONS)
    (failed,) = compact_table(spark, database, "bzip", OPTIONS)
    assert failed.status == UnitStatus.FAILED and "BZip2Codec" in failed.reason and bzip in failed.reason
    (failed,) = compact_table(spark, database, "flume", OPTIONS)
    assert (
        failed.status == UnitStatus.FAILED and "FlumeData.1700000000000.tmp" in failed.reason and flume in failed.reason
    )
    for asked in ({"codec": "gzip"}, {"sort_columns": ("id",)}):
        with pytest.raises(ConfigError, match=f"{plain}: text tables are compacted by concatenating"):
            compact_table(spark, database, "plain", CompactionOptions(OPTIONS.thresholds, **asked))
    rule = TablePolicies.model_validate({"partition_time": {"date": "%Y-%m-%d"}, "archive": {"older_than": "30d"}})
    with pytest.raises(ConfigError, match=f"{plain}: text tables .* recompress cannot apply"):
        archive_table(spark, database, "plain", OPTIONS, rule.archive_rule(plain))
    with pytest.raises(OperationError, match=f"{database}.whole.*USING text.*wholetext"):
        compact_table(spark, database, "whole", OPTIONS)
    merge = {"into": "%Y-%m", "older_than": "30d", "view": "dated_all"}
    with pytest.raises(OperationError, match=f"{dated} cannot be merged: its format text is not one merge writes"):
        merge_table(spark, database, "dated", TablePolicies(partition_time={"date": "%Y-%m-%d"}, merge=merge))
    assert {d: [(f.name, f.read_bytes()) for f in data_files(data_dir / d)] for d in "hbpfwd"} == before
    assert hidden_dirs(data_dir) == []
