"""The operations beyond plain compaction on a real HDFS (the session's minicluster): retention and merge putting what
they clear in the NameNode's Trash, archive with the history and diff of its run, byte-level concatenation of Parquet
and ORC, text and Avro tables compacted; content checked each time."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import urllib.parse
from datetime import datetime

import fastavro
import pytest
from fastavro.schema import to_parsing_canonical_form as canonical

from lakekeeper_dagster.engine.hive.catalog import list_partitions, read_table
from lakekeeper_dagster.engine.hive.history_table import read_rows
from lakekeeper_dagster.engine.ops.archive import archive_table
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.diff import diff_run, render_diff
from lakekeeper_dagster.engine.ops.merge import merge_table
from lakekeeper_dagster.engine.ops.retention import retain_table
from lakekeeper_dagster.engine.plan.partition_time import utc_now
from lakekeeper_dagster.engine.policies import TablePolicies
from lakekeeper_dagster.engine.protocol.history import HistorySink, recorded
from lakekeeper_dagster.engine.rewrite.fingerprint import aggregates
from lakekeeper_dagster.engine.rewrite.footers import read_footers
from lakekeeper_dagster.engine.rewrite.schema import data_schema
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster_tests.engine.rewrite.test_avro_compaction import V1, _records
from lakekeeper_dagster_tests.engine.rewrite.test_avro_compaction import _hive_rows as avro_rows
from lakekeeper_dagster_tests.engine.rewrite.test_text_compaction import COLUMNS, DELIMITED, EXPECTED, FILES
from lakekeeper_dagster_tests.engine.rewrite.test_text_compaction import _hive_rows as text_rows
from lakekeeper_dagster_tests.hdfs import contents, data_files, exists, hidden_dirs, listing, write_bytes
from lakekeeper_dagster_tests.tables import DATES, OPTIONS, make_table, rows_of

pytestmark = pytest.mark.hdfs

NOW = datetime(2024, 6, 1)
DAYS = [{"dt": d} for d in ("20190413", "20190414", "20240531", "latest")]
OLD = ["dt=20190413", "dt=20190414"]  # older than 90 days at NOW, of one month
NEW = ("20240531", "latest")


def trash_of(spark, location: str) -> str:
    """Where the NameNode's Trash keeps `location` once moved there: `/user/<user>/.Trash/Current/<its path>`."""
    user = spark.sparkContext._jvm.org.apache.hadoop.security.UserGroupInformation.getCurrentUser().getShortUserName()
    parsed = urllib.parse.urlparse(location)
    return f"{parsed.scheme}://{parsed.netloc}/user/{user}/.Trash/Current{parsed.path}"


def names(spark, location: str) -> list[str]:
    return [str(s.getPath().getName()) for s in listing(spark, location)]


def partitions(spark, database: str, name: str) -> list[str]:
    return [u.partition for u in list_partitions(spark, read_table(spark, database, name))]


def test_retention_moves_the_dropped_partitions_to_the_namenodes_trash(spark, database, hdfs_dir):
    root = f"{hdfs_dir}/ret"
    table = make_table(spark, database, "ret", root, partitions=DAYS, files=2, rows=10)
    rows = rows_of(spark, table)
    originals = {p: contents(spark, f"{root}/{p}") for p in OLD}
    policy = TablePolicies(partition_time={"dt": "%Y%m%d"}, retention={"older_than": "90d"})

    done = retain_table(spark, database, "ret", policy, now=NOW)

    trash = trash_of(spark, root)
    assert done.dropped == OLD and done.files == 4, done.lines
    assert done.places == {p: f"moved to the Trash ({trash}/{p})" for p in OLD}
    assert {p: contents(spark, f"{trash}/{p}") for p in OLD} == originals  # byte for byte, 2 files each
    assert all(len(files) == 2 for files in originals.values())
    assert partitions(spark, database, "ret") == names(spark, root) == ["dt=20240531", "dt=latest"]
    assert rows_of(spark, table) == [r for r in rows if r[3] in NEW]
    assert names(spark, f"{hdfs_dir}/.lakekeeper-ret/journal") == []  # the run's journal finished


def test_merge_keeps_every_row_and_puts_the_fine_partitions_in_the_namenodes_trash(spark, database, hdfs_dir):
    root = f"{hdfs_dir}/mg"
    table = make_table(spark, database, "mg", root, partitions=DAYS, files=2, rows=10)
    rows = rows_of(spark, table)
    originals = {p: contents(spark, f"{root}/{p}") for p in OLD}
    merge = {"into": "%Y%m", "older_than": "90d", "view": "mg_all", "settle_seconds": 0.5}  # days into months
    policy = TablePolicies(partition_time={"dt": "%Y%m%d"}, merge=merge)

    done = merge_table(spark, database, "mg", policy, now=NOW)

    assert done.merged == ["dt=201904"] and not done.failed, done.lines
    assert (done.partitions, done.files, done.rows) == (2, 4, 20)
    assert sorted(tuple(r) for r in spark.table(f"{database}.mg_all").collect()) == rows  # the union view
    assert partitions(spark, database, "mg") == names(spark, root) == ["dt=20240531", "dt=latest"]
    assert read_table(spark, database, "mg__merged").location == f"{hdfs_dir}/mg__merged"
    assert partitions(spark, database, "mg__merged") == ["dt=201904"]
    merged = rows_of(spark, f"{database}.mg__merged")  # id, v, n, dt__fine (the day), dt (the month)
    assert [r[:4] for r in merged] == [r for r in rows if r[3] not in NEW] and {r[4] for r in merged} == {"201904"}
    trash = trash_of(spark, root)
    held = {name.split("-", 4)[-1]: name for name in names(spark, trash)}  # .lk-held-<run>-<partition>
    assert sorted(held) == OLD and all(name.startswith(".lk-held-") for name in held.values())
    assert {p: contents(spark, f"{trash}/{held[p]}") for p in OLD} == originals  # byte for byte
    assert hidden_dirs(spark, root) == [] and names(spark, f"{hdfs_dir}/.lakekeeper-mg/journal") == []


def codecs(spark, directory: str) -> set[str]:
    paths = [f"{directory}/{name}" for name in data_files(spark, directory)]
    return {"+".join(f.codecs) for f in read_footers(spark, "parquet", paths, directory) if f.rows}


@pytest.fixture
def history_on_hdfs(spark, database, hdfs_dir, tmp_path):
    """A history table whose database (and so its directory) is on the test HDFS."""
    spark.sql(f"CREATE DATABASE `{database}_h` LOCATION '{hdfs_dir}/history'")
    yield HistorySink(f"{database}_h.history", tmp_path / "pending", dagster_run_id="run-1")
    spark.sql(f"DROP DATABASE IF EXISTS `{database}_h` CASCADE")


def test_archive_recompresses_old_partitions_and_its_history_and_diff_match_the_data(
    spark, database, hdfs_dir, history_on_hdfs
):
    root = f"{hdfs_dir}/ar"
    today = {"date": utc_now().strftime("%Y-%m-%d")}  # never archive-aged
    table = make_table(spark, database, "ar", root, partitions=[*DATES, today], files=3, codec="snappy")
    rows, newest = rows_of(spark, table), f"{root}/date={today['date']}"
    untouched = contents(spark, newest)
    schema = data_schema(read_table(spark, database, "ar"))
    found = spark.read.parquet(root).groupBy("date").agg(*aggregates(schema)).collect()  # the engine's row hash
    before = {f"date={r['date']}": (int(r["rows"]), str(r["checksum"])) for r in found}
    policy = {"partition_time": {"date": "%Y-%m-%d"}, "archive": {"older_than": "30d"}}

    def size(directory: str) -> int:
        return sum(int(s.getLen()) for s in listing(spark, directory) if s.isFile() and s.getLen() > 0)

    sizes = {f"date={d['date']}": size(f"{root}/date={d['date']}") for d in DATES}
    with recorded(history_on_hdfs):
        resolved, results = archive_table(
            spark, database, "ar", OPTIONS, TablePolicies.model_validate(policy).archive_rule(table)
        )

    old = [f"date={d['date']}" for d in DATES]
    assert resolved.codec == "gzip" and rows_of(spark, table) == rows
    assert [(r.partition, r.status, r.files_before, r.files_after) for r in results] == [
        (p, UnitStatus.COMPACTED, 3, 1) for p in old
    ]
    assert [codecs(spark, f"{root}/{p}") for p in old] == [{"GZIP"}, {"GZIP"}]
    assert contents(spark, newest) == untouched and codecs(spark, newest) == {"SNAPPY"}  # newer: left alone
    run = results[0].run_id
    assert hidden_dirs(spark, root) == [f".lk-old-{run}-{p}" for p in old]  # the originals kept

    # the history: one record per partition, on HDFS, with the figures of the data
    history = read_table(spark, f"{database}_h", "history").location
    (day,) = names(spark, history)  # the records renamed into a day partition, no staging left
    assert history == f"{hdfs_dir}/history/history" and day.startswith("day=") and data_files(spark, f"{history}/{day}")
    records = read_rows(spark, f"{database}_h", "history", source=table)
    assert [(r["operation"], r["partition_name"], r["status"], r["run_id"]) for r in records] == [
        ("archive", p, "committed", run) for p in old
    ]
    for r in records:
        p = r["partition_name"]
        assert (r["rows_before"], r["checksum_before"]) == (r["rows_after"], r["checksum_after"]) == before[p]
        assert (r["files_before"], r["files_after"], r["bytes_before"]) == (3, 1, sizes[p])
        assert r["bytes_after"] == size(f"{root}/{p}") and r["location"] == f"{root}/{p}"

    # the diff: both sides re-read from HDFS, the codecs from the files' footers
    diff = diff_run(spark, history_on_hdfs.table, database, "ar", verify=True)
    assert (diff.run_id, diff.operation) == (run, "archive")
    assert [(u.partition, u.location, u.location_unchanged, u.verified) for u in diff.units] == [
        (p, f"{root}/{p}", True, True) for p in old
    ]
    for u in diff.units:
        assert (u.files_before, u.files_after, u.codecs_before, u.codecs_after) == (3, 1, ("SNAPPY",), ("GZIP",))
        assert u.schema_unchanged and u.checksum_before == u.checksum_after == before[u.partition][1]
        assert u.originals == f"{root}/.lk-old-{run}-{u.partition}" and exists(spark, u.originals)
        assert u.backup_table == f"{database}.{results[0].backup_table}" and u.statistics["numFiles"] == ["3", "1"]
    shown = render_diff(diff)
    assert f"| date=2024-01-01 | unchanged {root}/date=2024-01-01 | 3 -> 1 |" in shown
    assert "| SNAPPY -> GZIP | unchanged |" in shown and "| equal | equal |" in shown


CONCATENATING = dataclasses.replace(OPTIONS, concat_min_row_group_bytes=1)  # KB-sized row groups count as large


@pytest.mark.parametrize("fmt", ["parquet", "orc"])
def test_alike_files_on_hdfs_are_concatenated_at_the_byte_level(spark, database, hdfs_dir, fmt):
    root = f"{hdfs_dir}/bm"
    spark.sql(f"CREATE EXTERNAL TABLE `{database}`.bm (id BIGINT, v STRING, n INT) STORED AS {fmt} LOCATION '{root}'")
    small = {"parquet.block.size": "8192"} if fmt == "parquet" else {"orc.stripe.size": "4096"}  # many row groups
    for first in (0, 5000):
        df = spark.range(first, first + 5000, numPartitions=1)
        df = df.selectExpr("id", "concat('v', cast(id AS string)) AS v", "cast(id % 7 AS int) AS n")
        df.write.mode("append").format(fmt).options(**small).save(root)
    inputs = read_footers(spark, fmt, [f"{root}/{name}" for name in data_files(spark, root)], root)
    rows = rows_of(spark, f"{database}.bm")

    (result,) = compact_table(spark, database, "bm", CONCATENATING)

    assert (result.status, result.files_byte_merged, result.files_after) == (UnitStatus.COMPACTED, 2, 1)
    assert result.rows_after == 10000 and result.checksum_matches
    (name,) = data_files(spark, root)
    (output,) = read_footers(spark, fmt, [f"{root}/{name}"], root)
    assert name.startswith("lk-merged-") and output.rows == 10000  # row groups (stripes) copied, never decoded
    assert len(output.row_groups) == sum(len(f.row_groups) for f in inputs) > 2
    assert output.physical_schema == inputs[0].physical_schema and output.codecs == inputs[0].codecs
    assert rows_of(spark, f"{database}.bm") == rows


def test_delimited_text_on_hdfs_is_concatenated_byte_for_byte_plain_and_gzip(spark, database, hdfs_dir):
    root, table = f"{hdfs_dir}/tx", f"{database}.tx"
    spark.sql(f"CREATE EXTERNAL TABLE {table} {COLUMNS} PARTITIONED BY (date STRING) {DELIMITED} LOCATION '{root}'")
    spark.sql(f"ALTER TABLE {table} SET SERDEPROPERTIES ('serialization.null.format'='NIL')")  # as Hive stores it
    for date, extension, compress in (("2024-01-01", "", bytes), ("2024-01-02", ".gz", gzip.compress)):
        for number, content in enumerate(FILES):
            write_bytes(spark, f"{root}/date={date}/part-{number:05d}{extension}", compress(content))
        spark.sql(f"ALTER TABLE {table} ADD PARTITION (date='{date}')")
    assert text_rows(spark, table) == EXPECTED  # the same rows in both partitions, through Hive's SerDe

    results = compact_table(spark, database, "tx", OPTIONS)

    assert [(r.status, r.files_before, r.files_after) for r in results] == [(UnitStatus.COMPACTED, 4, 1)] * 2
    assert all(r.rows_before == r.rows_after == 6 and r.checksum_before == r.checksum_after for r in results)
    assert text_rows(spark, table) == EXPECTED and spark.table(table).count() == 12
    lines = b"".join(c if c.endswith(b"\n") else c + b"\n" for c in FILES)  # a line end after the file without
    assert list(contents(spark, f"{root}/date=2024-01-01").values()) == [lines]
    ((name, zipped),) = contents(spark, f"{root}/date=2024-01-02").items()
    assert name.endswith(".gz") and gzip.decompress(zipped) == lines  # the gzip members one after the other


def avro_records(files: dict[str, bytes]) -> list[str]:
    """Every record of these Avro files, resolved against the table's schema by fastavro, sorted."""
    return sorted(repr(sorted(r.items())) for data in files.values() for r in fastavro.reader(io.BytesIO(data), V1))


def test_avro_on_hdfs_with_its_schema_file_on_hdfs_compacts_block_for_block(spark, database, hdfs_dir):
    root, schema_url, table = f"{hdfs_dir}/av", f"{hdfs_dir}/schemas/event.avsc", f"{database}.av"
    write_bytes(spark, schema_url, json.dumps(V1).encode())
    properties = f"TBLPROPERTIES ('avro.schema.url'='{schema_url}')"
    spark.sql(f"CREATE EXTERNAL TABLE {table} STORED AS AVRO LOCATION '{root}' {properties}")
    pieces = [("null", 0, 3), ("null", 3, 4), ("deflate", 7, 2), ("deflate", 9, 2)]  # small files of two codecs
    for number, (codec, first, count) in enumerate(pieces):
        out = io.BytesIO()
        fastavro.writer(out, V1, _records(first, count), codec=codec, metadata={"writer": "ingest"})
        write_bytes(spark, f"{root}/part-{number:05d}.avro", out.getvalue())
    rows, records = avro_rows(spark, table), avro_records(contents(spark, root))
    assert len(rows) == len(records) == 11

    (result,) = compact_table(spark, database, "av", OPTIONS)

    assert (result.status, result.files_before, result.files_after) == (UnitStatus.COMPACTED, 4, 2)
    assert result.rows_before == result.rows_after == 11 and result.checksum_before == result.checksum_after
    assert avro_rows(spark, table) == rows
    outputs = contents(spark, root)
    assert avro_records(outputs) == records
    readers = [fastavro.reader(io.BytesIO(data)) for data in outputs.values()]
    assert sorted(r.codec for r in readers) == ["deflate", "null"]  # one per codec: blocks copied, not recompressed
    assert all(r.metadata["writer"] == "ingest" and canonical(r.writer_schema) == canonical(V1) for r in readers)
