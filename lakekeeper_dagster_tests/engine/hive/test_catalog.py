"""Catalog reading on a real metastore: structured metadata, custom locations, escaped values."""

from __future__ import annotations

import pytest

from lakekeeper_dagster.engine.errors import OperationError
from lakekeeper_dagster.engine.hive.catalog import (
    UNREAD_PARTITION_FIELDS,
    CatalogError,
    find_partition,
    list_partitions,
    partition_unit,
    path_string,
    read_table,
)
from lakekeeper_dagster.engine.hive.model import HIVE_DEFAULT_PARTITION, TableInfo, partition_clause, partition_name
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.ops.merge import merge_table
from lakekeeper_dagster.engine.ops.retention import retain_table
from lakekeeper_dagster.engine.policies import TablePolicies
from lakekeeper_dagster_tests.tables import OPTIONS, make_table
from spark_resources.py4j import as_python

AWKWARD_VALUES = ["a/b=c:d", "it's é", "sp ace", "per%cent", "日本"]


def test_reads_external_parquet_table(spark, database, data_dir):
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.ev (id INT, v STRING) PARTITIONED BY (date STRING) STORED AS PARQUET "
        f"LOCATION '{data_dir.as_uri()}' TBLPROPERTIES ('parquet.compression'='GZIP')"
    )
    info = read_table(spark, database, "ev")
    assert info.table_type == "EXTERNAL"
    assert info.file_format == "parquet"
    assert info.partition_columns == ("date",)
    assert [c.name for c in info.data_columns] == ["id", "v"]
    assert info.codec_property == "GZIP"
    assert info.location.rstrip("/").endswith(str(data_dir))
    assert info.skip_reason() is None


def test_partitions_with_escaped_values_and_custom_location(spark, database, data_dir, tmp_path):
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.p (id INT) PARTITIONED BY (k STRING) STORED AS PARQUET "
        f"LOCATION '{data_dir.as_uri()}'"
    )
    for i, value in enumerate(AWKWARD_VALUES):
        clause = partition_clause({"k": value})
        spark.sql(f"INSERT INTO {database}.p {clause} VALUES ({i})")
    custom = tmp_path / "elsewhere"
    spark.sql(f"ALTER TABLE {database}.p ADD PARTITION (k='custom') LOCATION '{custom.as_uri()}'")
    spark.sql(f"INSERT INTO {database}.p PARTITION (k='custom') VALUES (99)")
    spark.sql(f"INSERT INTO {database}.p PARTITION (k) VALUES (100, NULL)")

    info = read_table(spark, database, "p")
    partitions = list_partitions(spark, info)
    shown = sorted(r[0] for r in spark.sql(f"SHOW PARTITIONS {database}.p").collect())
    assert sorted(p.partition for p in partitions) == shown
    values = {p.spec["k"] for p in partitions}
    assert set(AWKWARD_VALUES) <= values
    assert HIVE_DEFAULT_PARTITION in values or None in values
    custom_partition = find_partition(spark, info, "k=custom")
    assert custom_partition.location.rstrip("/").endswith(str(custom))
    # The name round-trips through partition_clause: reading via the raw value finds the row.
    for i, value in enumerate(AWKWARD_VALUES):
        part = find_partition(spark, info, partition_name({"k": value}))
        rows = spark.sql(f"SELECT id FROM {database}.p WHERE k = '{value.replace(chr(39), chr(92) + chr(39))}'")
        assert [r.id for r in rows.collect()] == [i]
        assert part.spec == {"k": value}


URIS = [
    "file:/tmp/t/k=a%252Fb%253Dc%253Ad",
    "file:/tmp/t/sp%20ace/it's%20%C3%A9/日本",
    "file:///tmp/t/empty-authority",
    "hdfs://nameservice1/warehouse/t/dt=2024010100",
    "hdfs://nn.example.com:8020/warehouse/t/%23hash/%3Fquestion/trailing/",
    "file:/tmp/t/./dot/../dotdot",
    "file:/tmp/t//double",
    "hdfs://nn/%E6%97%A5",
    "hdfs://u@nn:8020/a%2Fb",
    "HDFS://NN/x",
    "hdfs://[::1]:8020/x",
    "file:/a%25b",
    "file:/%C2%A0nbsp",
    "file:/%F0%9F%98%80",
    "file:/a+b;c=d,e@f$g",
    "file:/",
    "/warehouse/t/no%20scheme",
    "file:/%C3",
    "file:/%FF%FE",
    "relative/path",
]


def test_location_strings_are_the_jvm_s_own(spark):
    """Partition locations are turned into strings in Python for the plain URIs the metastore gives (and through the
    JVM for the others): every one equals Hadoop's `new Path(new URI(uri)).toString()`."""
    java = spark._jvm
    for uri in URIS:
        assert path_string(spark, uri) == str(java.org.apache.hadoop.fs.Path(java.java.net.URI(uri)).toString()), uri


def test_plain_locations_are_made_without_the_jvm(spark):
    """The plain URIs (all a metastore gives in practice) cost no py4j call: they are made with no Spark session at
    all; the others still need the JVM."""
    jvm_made = ["file:/tmp/t/./dot/../dotdot", "file:/tmp/t//double", "file:/%C3", "file:/%FF%FE", "relative/path"]
    for uri in URIS:
        if uri in jvm_made:
            with pytest.raises(AttributeError):  # no session: no JVM to reach
                path_string(None, uri)
        else:
            assert path_string(None, uri) == path_string(spark, uri), uri


def test_a_partition_without_a_location_is_refused_by_name(spark):
    info = TableInfo("db", "t", "EXTERNAL", "hive", None, None, None, "file:/w/t", (), ("dt",))
    with pytest.raises(CatalogError, match=r"partition dt=2024 of db\.t has no location in the metastore"):
        partition_unit(spark, info, {"spec": {"dt": "2024"}, "storage": {"locationUri": None}})


def test_partitions_come_without_the_fields_not_read(spark, database, data_dir):
    """Each partition's parameters, statistics and SerDe properties (a copied Avro schema can be tens of KB) stay in
    the JVM: only its values and location are serialized."""
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.heavy (id INT) PARTITIONED BY (k STRING) STORED AS PARQUET "
        f"LOCATION '{data_dir.as_uri()}'"
    )
    spark.sql(f"ALTER TABLE {database}.heavy ADD PARTITION (k='a')")
    spark.sql(f"ALTER TABLE {database}.heavy PARTITION (k='a') SET SERDEPROPERTIES ('big' = '{'x' * 10_000}')")
    jvm_catalog = spark._jsparkSession.sharedState().externalCatalog()
    partitions = jvm_catalog.listPartitions(database, "heavy", spark._jvm.scala.Option.empty())
    whole = as_python(spark, partitions)
    assert whole[0]["storage"]["properties"]["big"] == "x" * 10_000 and "parameters" in whole[0]
    [trimmed] = as_python(spark, partitions, UNREAD_PARTITION_FIELDS)
    assert set(trimmed) == {"spec", "storage", "createTime", "lastAccessTime"}
    assert set(trimmed["storage"]) == {"locationUri", "compressed"}
    assert trimmed["spec"] == {"k": "a"} and trimmed["storage"]["locationUri"].endswith("/k=a")


def test_partitions_read_in_one_document_match_the_jvm_s_objects(spark, database, data_dir, tmp_path):
    """Every partition's values and location as the per-partition JVM objects give them: awkward values, a NULL,
    custom locations with spaces, escapes, non-ASCII characters and a `..` segment."""
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.q (id INT) PARTITIONED BY (k STRING, n STRING) STORED AS PARQUET "
        f"LOCATION '{data_dir.as_uri()}'"
    )
    for i, value in enumerate(AWKWARD_VALUES):
        spark.sql(f"ALTER TABLE {database}.q ADD {partition_clause({'k': value, 'n': str(i)})}")
    spark.sql(f"INSERT INTO {database}.q PARTITION (k, n) VALUES (100, NULL, 'x')")
    for i, place in enumerate(["sp ace/é", "per%25cent", "a/../b", "x#y"]):
        location = f"file:{tmp_path}/{place}"
        spark.sql(f"ALTER TABLE {database}.q ADD PARTITION (k='custom', n='{i}') LOCATION '{location}'")
    info = read_table(spark, database, "q")
    java = spark._jvm
    catalog = spark._jsparkSession.sharedState().externalCatalog()
    iterator = catalog.listPartitions(database, "q", java.scala.Option.empty()).iterator()
    expected = []
    while iterator.hasNext():
        partition = iterator.next()
        spec = {c: partition.spec().apply(c) for c in ("k", "n")}
        expected.append((spec, str(java.org.apache.hadoop.fs.Path(partition.location()).toString())))
    found = [(p.spec, p.location) for p in list_partitions(spark, info)]
    assert len(found) == len(AWKWARD_VALUES) + 1 + 4
    assert sorted(found, key=repr) == sorted(expected, key=repr)


def test_skip_reasons(spark, database, data_dir):
    spark.sql(f"CREATE TABLE {database}.managed (id INT) STORED AS PARQUET")
    spark.sql(f"CREATE VIEW {database}.vw AS SELECT 1 AS x")
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.bucketed (id INT) CLUSTERED BY (id) INTO 4 BUCKETS STORED AS ORC "
        f"LOCATION '{data_dir.as_uri()}/b'"
    )
    spark.sql(
        f"CREATE TABLE {database}.acid (id INT) CLUSTERED BY (id) INTO 2 BUCKETS STORED AS ORC "
        "TBLPROPERTIES ('transactional'='true')"
    )
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.ice (id INT) STORED AS PARQUET LOCATION '{data_dir.as_uri()}/i' "
        "TBLPROPERTIES ('metadata_location'='/x/00001.metadata.json')"
    )
    spark.sql(f"CREATE EXTERNAL TABLE {database}.seq (id INT) STORED AS SEQUENCEFILE LOCATION '{data_dir.as_uri()}/s'")
    reasons = {
        t: read_table(spark, database, t).skip_reason() for t in ("managed", "vw", "bucketed", "acid", "ice", "seq")
    }
    assert reasons["managed"].startswith("managed table")
    assert reasons["vw"].startswith("view")
    assert reasons["bucketed"].startswith("bucketed table")
    assert reasons["acid"].startswith("transactional")
    assert reasons["ice"].startswith("iceberg")
    assert reasons["seq"].startswith("unsupported file format")


def test_a_table_whose_partitions_hive_discovers_is_refused_by_every_operation(spark, database, data_dir):
    """With 'discover.partitions'='true' a Hive 3/4 metastore drops a partition whose directory is missing
    (a swap's moment) and re-adds one being dropped; every operation refuses the table, naming the property and the
    statement that sets it aside, and changes nothing."""
    specs = [{"dt": "2019041316"}, {"dt": "2019041317"}]
    make_table(spark, database, "dp", data_dir, partitions=specs, files=3, properties={"discover.partitions": "TRUE"})
    files = sorted(p.relative_to(data_dir) for p in data_dir.rglob("*"))
    policies = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, retention={"older_than": "1d"})
    aside = rf"'discover.partitions'='true'.*ALTER TABLE `{database}`.`dp` SET TBLPROPERTIES \('discover.partitions'"
    with pytest.raises(OperationError, match=f"cannot be compacted: .*{aside}"):
        compact_table(spark, database, "dp", OPTIONS)
    with pytest.raises(OperationError, match=f"cannot be managed by retention: .*{aside}"):
        retain_table(spark, database, "dp", policies)
    merge = {"into": "%Y%m%d", "older_than": "1d", "view": "v"}
    merging = TablePolicies(partition_time={"dt": "%Y%m%d%H"}, merge=merge)
    with pytest.raises(OperationError, match=f"cannot be merged: .*{aside}"):
        merge_table(spark, database, "dp", merging)
    assert sorted(p.relative_to(data_dir) for p in data_dir.rglob("*")) == files
    assert [u.partition for u in list_partitions(spark, read_table(spark, database, "dp"))] == [
        "dt=2019041316",
        "dt=2019041317",
    ]


def test_missing_table_and_partition_are_clear_errors(spark, database, data_dir):
    with pytest.raises(CatalogError, match=f"table {database}.nope does not exist"):
        read_table(spark, database, "nope")
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.p (id INT) PARTITIONED BY (k STRING) STORED AS PARQUET "
        f"LOCATION '{data_dir.as_uri()}'"
    )
    info = read_table(spark, database, "p")
    with pytest.raises(CatalogError, match="partition 'k=zz' does not exist"):
        find_partition(spark, info, "k=zz")
