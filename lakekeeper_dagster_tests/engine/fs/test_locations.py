"""Locations as strings, and which names of a directory are markers (dropped with it) rather than data."""

from __future__ import annotations

import pytest

from lakekeeper_dagster.engine.errors import StorageError
from lakekeeper_dagster.engine.fs.locations import child, is_marker, split_location

pytestmark = pytest.mark.pure


def test_a_location_splits_into_its_parent_and_name():
    assert split_location("hdfs://nn:8020/w/t/date=1/") == ("hdfs://nn:8020/w/t", "date=1")
    assert child("file:/w/t/", "date=1") == "file:/w/t/date=1"
    with pytest.raises(StorageError, match="location t has no parent"):
        split_location("t")


def test_markers_are_success_files_and_checksums_of_markers_or_of_files_gone():
    """One rule for the swap and the merge: `_SUCCESS` and its checksum are markers; a data file's checksum is a
    marker only once the file is gone; a writer's hidden file never is."""
    names = ["_SUCCESS", "._SUCCESS.crc", "part-0.parquet", ".part-0.parquet.crc", ".part-1.parquet.crc", ".x.pending"]
    assert [n for n in names if is_marker(n, names)] == ["_SUCCESS", "._SUCCESS.crc", ".part-1.parquet.crc"]
