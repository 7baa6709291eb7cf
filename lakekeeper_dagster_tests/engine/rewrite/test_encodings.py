"""A rewrite keeps the physical form of its input: Parquet timestamp type, rebase mode of old dates, decimal layout,
and the table's format properties. The output files' footers are read back and compared."""

from __future__ import annotations

import pytest

from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.rewrite.footers import LEGACY_DATETIME_KEY, LEGACY_INT96_KEY, read_footers
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster_tests.engine.rewrite.test_verification import _on_disk, careless_cluster
from lakekeeper_dagster_tests.tables import OPTIONS, data_files, make_table, rows_of
from spark_resources.py4j import gateway, hadoop_conf, jvm

OLD_VALUES = (
    "id",
    "cast(timestamp'1500-01-01 10:00:00' + make_interval(0, 0, 0, cast(id AS int)) AS timestamp) AS ts",
    "date_add(date'1500-01-01', cast(id AS int)) AS dt",
    "cast(id / 4 AS decimal(10, 2)) AS d",
)


def _write(spark, location: str, first: int, settings: dict[str, str], files: int = 3) -> None:
    with careless_cluster(spark, settings):
        df = spark.range(first, first + 30, numPartitions=files).selectExpr(*OLD_VALUES)
        df.write.mode("append").parquet(location)


def _table(spark, database: str, data_dir) -> str:
    spark.sql(
        f"CREATE EXTERNAL TABLE `{database}`.ev (id BIGINT, ts TIMESTAMP, dt DATE, d DECIMAL(10, 2)) "
        f"STORED AS PARQUET LOCATION '{data_dir.as_uri()}'"
    )
    return f"{database}.ev"


def _metadata_keys(spark, path) -> set[str]:
    java = jvm(spark)
    reader = java.org.apache.parquet.hadoop.ParquetFileReader.open(
        java.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(
            java.org.apache.hadoop.fs.Path(str(path)), hadoop_conf(spark)
        )
    )
    try:
        return {str(k) for k in reader.getFooter().getFileMetaData().getKeyValueMetaData().keySet()}
    finally:
        reader.close()


@pytest.mark.parametrize(
    ("settings", "timestamp_type", "decimal_legacy", "key"),
    [
        (
            {
                "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MILLIS",
                "spark.sql.parquet.datetimeRebaseModeInWrite": "LEGACY",
                "spark.sql.parquet.writeLegacyFormat": "false",
            },
            "TIMESTAMP_MILLIS",
            False,
            LEGACY_DATETIME_KEY,
        ),
        (
            {
                "spark.sql.parquet.outputTimestampType": "INT96",
                "spark.sql.parquet.int96RebaseModeInWrite": "LEGACY",
                "spark.sql.parquet.datetimeRebaseModeInWrite": "LEGACY",
                "spark.sql.parquet.writeLegacyFormat": "true",
            },
            "INT96",
            True,
            LEGACY_INT96_KEY,
        ),
    ],
    ids=["millis-legacy-dates-int64-decimal", "int96-legacy-int96-fixed-decimal"],
)
def test_rewrite_keeps_the_input_encodings(spark, database, data_dir, settings, timestamp_type, decimal_legacy, key):
    table = _table(spark, database, data_dir)
    _write(spark, data_dir.as_uri(), 0, settings)
    before = rows_of(spark, table)
    assert before[0][2].year == 1500
    (source,) = {
        (f.timestamp_type, f.decimal_legacy)
        for f in read_footers(spark, "parquet", [str(p) for p in data_files(data_dir)], "in")
    }
    assert source == (timestamp_type, decimal_legacy)

    (result,) = compact_table(spark, database, "ev", OPTIONS)

    assert (result.status, result.rows_before, result.rows_after) == (UnitStatus.COMPACTED, 30, 30)
    (output,) = data_files(data_dir)
    (footer,) = read_footers(spark, "parquet", [str(output)], "out")
    assert (footer.timestamp_type, footer.decimal_legacy, footer.rows) == (timestamp_type, decimal_legacy, 30)
    assert key in _metadata_keys(spark, output)
    assert rows_of(spark, table) == before


def test_files_disagreeing_on_the_timestamp_type_are_refused(spark, database, data_dir):
    table = _table(spark, database, data_dir)
    _write(spark, data_dir.as_uri(), 0, {"spark.sql.parquet.outputTimestampType": "INT96"}, files=2)
    _write(spark, data_dir.as_uri(), 100, {"spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS"}, files=2)
    before, on_disk = rows_of(spark, table), _on_disk(data_dir)

    (result,) = compact_table(spark, database, "ev", OPTIONS)

    assert result.status == UnitStatus.FAILED and "disagree on timestamp type" in result.reason
    assert "INT96" in result.reason and "TIMESTAMP_MICROS" in result.reason and "Nothing was changed" in result.reason
    assert _on_disk(data_dir) == on_disk
    assert rows_of(spark, table) == before


def test_parquet_format_properties_reach_the_output(spark, database, data_dir):
    properties = {"parquet.bloom.filter.enabled#id": "true", "parquet.enable.dictionary": "false"}
    table = make_table(spark, database, "ev", data_dir, files=4, properties=properties)
    before = rows_of(spark, table)

    (result,) = compact_table(spark, database, "ev", OPTIONS)

    assert result.status == UnitStatus.COMPACTED
    (output,) = data_files(data_dir)
    java = jvm(spark)
    reader = java.org.apache.parquet.hadoop.ParquetFileReader.open(
        java.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(
            java.org.apache.hadoop.fs.Path(str(output)), hadoop_conf(spark)
        )
    )
    try:
        columns = {str(c.getPath().toDotString()): c for c in reader.getFooter().getBlocks().get(0).getColumns()}
    finally:
        reader.close()
    assert columns["id"].getBloomFilterOffset() >= 0 and columns["v"].getBloomFilterOffset() < 0
    assert not any(c.hasDictionaryPage() for c in columns.values())
    assert rows_of(spark, table) == before


def test_orc_format_properties_reach_the_output(spark, database, data_dir):
    properties = {"orc.bloom.filter.columns": "id", "orc.row.index.stride": "5000", "orc.stripe.size": "1048576"}
    table = make_table(spark, database, "ev", data_dir, fmt="orc", files=4, properties=properties)
    before = rows_of(spark, table)

    (result,) = compact_table(spark, database, "ev", OPTIONS)

    assert result.status == UnitStatus.COMPACTED
    (output,) = data_files(data_dir)
    java = jvm(spark)
    reader = java.org.apache.orc.OrcFile.createReader(
        java.org.apache.hadoop.fs.Path(str(output)), java.org.apache.orc.OrcFile.readerOptions(hadoop_conf(spark))
    )
    try:
        assert reader.getRowIndexStride() == 5000
        rows = reader.rows()
        wanted = gateway(spark).new_array(java.boolean, 4)  # the root struct, id, v, n
        for column in range(4):
            wanted[column] = True
        blooms = rows.readRowIndex(0, wanted, wanted).getBloomFilterIndex()
        rows.close()
    finally:
        reader.close()
    assert blooms[1] is not None and blooms[2] is None  # column 1 is id, 2 is v
    assert rows_of(spark, table) == before
