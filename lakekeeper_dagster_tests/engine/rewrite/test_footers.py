"""What a file's own metadata says, read through the JVM from files Spark wrote (the fields a byte-level
merge groups its inputs by): row groups / stripes, codecs, physical schema, writer, key-value metadata."""

from __future__ import annotations

from lakekeeper_dagster.engine.rewrite.footers import SPARK_VERSION_KEY, read_footers
from lakekeeper_dagster_tests.tables import data_files

WIDE = ("id", "sha2(cast(id AS string), 256) AS s", "cast(id AS decimal(10, 2)) AS d")


def test_parquet_footer_lists_row_groups_codec_writer_and_key_values(spark, tmp_path):
    out = tmp_path / "p"
    df = spark.range(0, 20_000, numPartitions=1).selectExpr(*WIDE)
    df.write.option("compression", "zstd").option("parquet.block.size", 64 * 1024).parquet(out.as_uri())
    (path,) = data_files(out)

    (footer,) = read_footers(spark, "parquet", [path.as_uri()], "p")

    assert len(footer.row_groups) >= 2
    assert footer.rows == sum(rows for rows, _ in footer.row_groups) == spark.read.parquet(out.as_uri()).count()
    assert all(size > 0 for _, size in footer.row_groups) and sum(s for _, s in footer.row_groups) < path.stat().st_size
    assert footer.codecs == ("ZSTD",)
    assert footer.columns == ("id", "s", "d")
    assert footer.physical_schema.startswith("message spark_schema {")
    assert "optional int64 d (DECIMAL(10,2));" in footer.physical_schema
    assert footer.writer.startswith("parquet-mr version ")
    keys = dict(footer.key_values)
    assert keys[SPARK_VERSION_KEY] == spark.version and [k for k, _ in footer.key_values] == sorted(keys)
    assert footer.encrypted is False
    assert (footer.timestamp_type, footer.decimal_legacy) == (None, False)


def test_orc_footer_lists_stripes_codec_writer_and_key_values(spark, tmp_path):
    out = tmp_path / "o"
    df = spark.range(0, 30_000, numPartitions=1).selectExpr(*WIDE)
    writer = df.write.option("compression", "zlib").option("orc.stripe.size", 64 * 1024)
    writer.option("orc.rows.between.memory.checks", 1000).orc(out.as_uri())
    (path,) = data_files(out)

    (footer,) = read_footers(spark, "orc", [path.as_uri()], "o")

    assert len(footer.row_groups) >= 2
    assert footer.rows == sum(rows for rows, _ in footer.row_groups) == spark.read.orc(out.as_uri()).count()
    assert all(size > 0 for _, size in footer.row_groups)
    assert footer.codecs == ("ZLIB",)
    assert footer.columns == ("id", "s", "d")
    assert footer.physical_schema == "struct<id:bigint,s:string,d:decimal(10,2)>"
    version, writer_version, software = footer.writer.split("|")
    assert version == "0.12" and writer_version.startswith("ORC_") and software.startswith("ORC Java ")
    assert dict(footer.key_values)[SPARK_VERSION_KEY] == spark.version
    assert footer.encrypted is False
