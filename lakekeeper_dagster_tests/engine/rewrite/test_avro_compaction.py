"""Avro compaction: blocks appended as they are encoded, one output per writer schema, codec and metadata;
every row read back identically through Hive's AvroSerDe (Spark's HiveTableScanExec on the metastore table) and by
fastavro resolving each file against the table's schema; what cannot be copied exactly is refused, nothing changed."""

from __future__ import annotations

import datetime
import decimal
import json
from dataclasses import replace
from pathlib import Path

import fastavro
import pytest

from lakekeeper_dagster.engine.errors import ConfigError
from lakekeeper_dagster.engine.hive.catalog import read_table
from lakekeeper_dagster.engine.hive.eligibility import refusal
from lakekeeper_dagster.engine.hive.model import escape_partition_value
from lakekeeper_dagster.engine.ops.archive import archive_table
from lakekeeper_dagster.engine.ops.audit import verify_against_backup
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.diff import diff_run
from lakekeeper_dagster.engine.ops.options import CompactionOptions
from lakekeeper_dagster.engine.ops.rollback import rollback_table
from lakekeeper_dagster.engine.policies import TablePolicies
from lakekeeper_dagster.engine.protocol.history import HistorySink, recorded
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster_tests.tables import OPTIONS, data_files, hidden_dirs

V1 = {
    "type": "record",
    "name": "Event",
    "namespace": "lk.test",
    "fields": [
        {"name": "id", "type": "int"},
        {"name": "name", "type": ["null", "string"], "default": None},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": ["null", "int"]}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
    ],
}
# schema evolution: a field with a default added; files written before it read it as 1.5
V2 = {**V1, "fields": [*V1["fields"], {"name": "score", "type": "double", "default": 1.5}]}


def _records(start: int, count: int, score: float | None = None) -> list[dict]:
    records = []
    for n in range(start, start + count):
        record = {
            "id": n,
            "name": None if n % 3 == 0 else f"name|{n}\n\u00e9",  # nulls, delimiters, a line end, non-ASCII
            "tags": [f"t{n}", ""],
            "attrs": {"k": n, "none": None},
            "amount": decimal.Decimal(n) / 4,
            "day": datetime.date(2024, 1, 1) + datetime.timedelta(days=n),
            "kind": "AB"[n % 2],
        }
        if score is not None:
            record["score"] = score
        records.append(record)
    return records


def _write(directory: Path, files: list[tuple[dict, str, list[dict]]]) -> None:
    """Avro files (schema, codec, records) into `directory`, one small file each."""
    directory.mkdir(parents=True, exist_ok=True)
    for number, (schema, codec, records) in enumerate(files):
        with open(directory / f"part-{number:05d}.avro", "wb") as out:
            fastavro.writer(out, fastavro.parse_schema(schema), records, codec=codec, metadata={"writer": "ingest"})


def _table(spark, database: str, name: str, location: Path, schema_property: str, partitions: list[str]) -> str:
    partitioned = "PARTITIONED BY (date STRING)" if partitions else ""
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.{name} {partitioned} STORED AS AVRO LOCATION '{location.as_uri()}' "
        f"TBLPROPERTIES ({schema_property})"
    )
    for date in partitions:
        spark.sql(f"ALTER TABLE {database}.{name} ADD PARTITION (date='{date}')")
    return f"{database}.{name}"


def _literal(schema: dict) -> str:
    return "'avro.schema.literal'='" + json.dumps(schema).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _hive_rows(spark, table: str) -> list[tuple]:
    """Every row as Hive's AvroSerDe reads it (HiveTableScanExec), sorted, maps and arrays as tuples."""
    spark.catalog.refreshTable(table)
    plan = spark.table(table)._jdf.queryExecution().executedPlan().toString()
    assert "Scan hive" in plan and "AvroSerDe" in plan  # the Hive SerDe path, not a datasource scan
    rows = []
    for row in spark.table(table).collect():
        values = row.asDict()
        values["tags"] = tuple(values["tags"])
        values["attrs"] = tuple(sorted(values["attrs"].items()))
        rows.append(tuple(sorted(values.items())))
    return sorted(rows)


def _resolved(directory: Path, reader_schema: dict) -> list[str]:
    """Every record of the directory's files resolved against the table's schema by fastavro, sorted."""
    found = []
    for path in data_files(directory):
        with open(path, "rb") as stream:
            found += [repr(sorted(r.items())) for r in fastavro.reader(stream, reader_schema=reader_schema)]
    return sorted(found)


def _bytes(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in data_files(directory)}


def test_avro_with_a_schema_literal_compacts_block_for_block(spark, database, data_dir, tmp_path):
    dates = ["2024-01-01", "2024-01-02 10:00"]  # the second's directory is escaped: `date=2024-01-02 10%3A00`
    table = _table(spark, database, "events", data_dir, _literal(V1), dates)
    for date in dates:
        files = [(V1, "null", _records(0, 3)), (V1, "null", _records(3, 4)), (V1, "null", _records(7, 1))]
        _write(
            data_dir / f"date={escape_partition_value(date)}",
            [*files, (V1, "deflate", _records(8, 2)), (V1, "deflate", _records(10, 2))],
        )
    originals = {date: _bytes(data_dir / f"date={escape_partition_value(date)}") for date in dates}
    rows, resolved = _hive_rows(spark, table), _resolved(data_dir / "date=2024-01-01", V1)
    assert len(rows) == 24 and len(resolved) == 12

    sink = HistorySink(f"{database}.history", tmp_path / "pending")
    with recorded(sink):
        results = compact_table(spark, database, "events", OPTIONS)

    assert [r.status for r in results] == [UnitStatus.COMPACTED] * 2
    assert all(r.rows_before == r.rows_after == 12 and r.checksum_before == r.checksum_after for r in results)
    assert _hive_rows(spark, table) == rows
    for date in dates:
        outputs = data_files(data_dir / f"date={escape_partition_value(date)}")
        assert len(outputs) == 2  # one per codec: the blocks are copied, never recompressed
        assert _resolved(data_dir / f"date={escape_partition_value(date)}", V1) == resolved
        for output in outputs:
            with open(output, "rb") as stream:
                reader = fastavro.reader(stream)
                assert reader.codec in ("null", "deflate") and reader.metadata["writer"] == "ingest"
    audit = verify_against_backup(spark, database, "events")  # each side found by its directory, none missed
    assert [(c.matches, c.live_rows, c.backup_rows) for c in audit] == [(True, 12, 12)] * 2
    diff = diff_run(spark, sink.table, database, "events", verify=True)  # from the Avro headers, re-read
    assert [(u.files_before, u.files_after, u.codecs_before, u.schema_unchanged, u.verified) for u in diff.units] == [
        (5, 2, ("deflate", "null"), True, True)
    ] * 2
    assert all(u.codecs_after == ("deflate", "null") and u.statistics["numFiles"][1] == "2" for u in diff.units)

    assert len(rollback_table(spark, database, "events")) == 2  # the originals back, byte for byte
    assert {date: _bytes(data_dir / f"date={escape_partition_value(date)}") for date in dates} == originals
    assert _hive_rows(spark, table) == rows


def test_avro_whose_schema_evolved_keeps_each_files_writer_schema(spark, database, data_dir, tmp_path):
    schema_file = tmp_path / "event.avsc"
    schema_file.write_text(json.dumps(V2))
    table = _table(spark, database, "evolved", data_dir, f"'avro.schema.url'='{schema_file.as_uri()}'", [])
    v1 = [(V1, "snappy", _records(0, 2)), (V1, "snappy", _records(2, 2))]
    _write(data_dir, [*v1, (V2, "snappy", _records(4, 2, score=2.5)), (V2, "snappy", _records(6, 1, score=3.5))])
    rows, resolved = _hive_rows(spark, table), _resolved(data_dir, V2)
    assert sorted(dict(r)["score"] for r in rows) == [1.5] * 4 + [2.5, 2.5, 3.5]  # the default for old files

    (result,) = compact_table(spark, database, "evolved", OPTIONS)

    assert result.status == UnitStatus.COMPACTED and result.rows_before == result.rows_after == 7
    assert _hive_rows(spark, table) == rows and _resolved(data_dir, V2) == resolved
    schemas = []
    for output in data_files(data_dir):
        with open(output, "rb") as stream:
            schemas.append(len(fastavro.reader(stream).writer_schema["fields"]))
    assert sorted(schemas) == [7, 8]  # old records still under the old schema, resolved by the reader as before


def test_avro_that_cannot_be_copied_exactly_is_refused_unchanged(spark, database, data_dir):
    plain = _table(spark, database, "plain", data_dir / "p", _literal(V1), [])
    _write(data_dir / "p", [(V1, "null", _records(0, 2)), (V1, "null", _records(2, 2))])
    broken = _table(spark, database, "broken", data_dir / "b", _literal(V1), [])
    _write(data_dir / "b", [(V1, "null", _records(0, 2))])
    (data_dir / "b" / "part-00001.avro").write_bytes(b"Obj\x01 not really")  # truncated header
    before = {d: _bytes(data_dir / d) for d in "pb"}

    for asked in ({"codec": "gzip"}, {"sort_columns": ("id",)}):
        with pytest.raises(ConfigError, match=f"{plain}: avro tables are compacted by appending"):
            compact_table(spark, database, "plain", CompactionOptions(OPTIONS.thresholds, **asked))
    rule = TablePolicies.model_validate({"archive": {"older_than": "30d"}, "partition_time": {"date": "%Y-%m-%d"}})
    with pytest.raises(ConfigError, match=f"{plain}: avro tables .* recompress cannot apply"):
        archive_table(spark, database, "plain", OPTIONS, rule.archive_rule(plain))
    (failed,) = compact_table(spark, database, "broken", OPTIONS)
    assert failed.status == UnitStatus.FAILED and "part-00001.avro" in failed.reason and broken in failed.reason
    info = read_table(spark, database, "plain")
    assert "USING avro" in refusal(replace(info, provider="avro"))  # a datasource table: spark-avro's, not Hive's
    assert "SequenceFileInputFormat" in refusal(
        replace(info, input_format="org.apache.hadoop.mapred.SequenceFileInputFormat")
    )
    assert {d: _bytes(data_dir / d) for d in "pb"} == before
    assert hidden_dirs(data_dir) == []
