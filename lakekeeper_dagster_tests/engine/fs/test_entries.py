"""A listing read as one JSON document (`fs/entries.py`) says exactly what the getters say, on the local filesystem
and on HDFS, for names that need escaping in a URI."""

from __future__ import annotations

import pytest

from lakekeeper_dagster.engine.fs.entries import EntryReader, by_getters, path_string
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster_tests.hdfs import dfs, jpath

NAMES = ["a b.parquet", "100%.parquet", "ünï.parquet", "date=2024-01-01%3A00", "#1?.parquet", ".hidden", "_SUCCESS"]


def _both(spark, location: str):
    statuses = dfs(spark, location).listStatus(jpath(spark, location))
    reader = EntryReader(spark.sparkContext._jvm)
    fast = reader.from_json(statuses)
    assert fast is not None  # the one-call path was taken, not the fallback
    assert reader.read(statuses, location) == fast  # and the first listing's check against the getters agreed
    return sorted(fast, key=lambda e: e.path), sorted(by_getters(statuses), key=lambda e: e.path)


def test_a_local_listing_as_json_equals_the_getters(spark, tmp_path):
    for name in NAMES:
        (tmp_path / name).write_bytes(b"x" * len(name))
    (tmp_path / "sub dir=1").mkdir()

    fast, slow = _both(spark, tmp_path.as_uri())

    assert fast == slow
    assert {e.name for e in fast} >= set(NAMES) | {"sub dir=1"}
    assert [e.is_directory for e in fast if e.name == "sub dir=1"] == [True]
    assert {e.name: e.size for e in fast if e.name in NAMES} == {n: len(n) for n in NAMES}


@pytest.mark.hdfs
def test_an_hdfs_listing_as_json_equals_the_getters(spark, hdfs_dir):
    fs = dfs(spark, hdfs_dir)
    for name in NAMES:
        stream = fs.create(jpath(spark, f"{hdfs_dir}/{name}"))
        stream.write(bytearray(name.encode()))
        stream.close()
    fs.mkdirs(jpath(spark, f"{hdfs_dir}/sub dir=1"))

    fast, slow = _both(spark, hdfs_dir)

    assert fast == slow
    assert len(fast) == len(NAMES) + 1 and [e.name for e in fast if e.is_directory] == ["sub dir=1"]
    assert Storage(spark).list_entries(hdfs_dir).directories == ["sub dir=1"]


@pytest.mark.pure
def test_path_string_prints_what_hadoop_prints():
    assert path_string("file:///tmp/a%20b/100%25.parquet") == "file:/tmp/a b/100%.parquet"
    assert path_string("hdfs://nn:8020/t/dt=1") == "hdfs://nn:8020/t/dt=1"
    assert path_string("hdfs://nn:8020/t/x#frag") is None
