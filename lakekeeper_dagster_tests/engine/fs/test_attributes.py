"""Attributes read in one call (the local filesystem's without forking `ls`) and carried to a staged copy."""

from __future__ import annotations

import stat
import time

import pytest

from lakekeeper_dagster.engine.fs.attributes import copy_attributes, read_attributes
from lakekeeper_dagster.engine.fs.storage import Storage


@pytest.fixture
def storage(spark) -> Storage:
    return Storage(spark)


@pytest.mark.parametrize("mode", [0o1777, 0o2750, 0o640, 0o4755])
def test_attributes_read_in_bulk_are_what_hadoops_file_status_says(storage, tmp_path, mode):
    """The operating system's answer, read through Java, equals Hadoop's local status (which forks `ls`): mode as
    `FsPermission.toShort()` (sticky bit kept, setuid and setgid not), owner and group."""
    directory, file = tmp_path / "d", tmp_path / "d" / "f.parquet"
    directory.mkdir()
    file.write_bytes(b"x")
    for path in (file, directory):
        path.chmod(mode)
    locations = [directory.as_uri(), file.as_uri()]
    found = read_attributes(storage, locations)
    for location, attributes in zip(locations, found, strict=True):
        fs, path = storage.java(location)
        status = fs.getFileStatus(path)
        hadoop = (int(status.getPermission().toShort()), str(status.getOwner()), str(status.getGroup()), False)
        assert (attributes.mode, attributes.owner, attributes.group, attributes.extended) == hadoop


def test_permissions_are_copied(storage, tmp_path):
    src, dst = tmp_path / "a", tmp_path / "b"
    src.mkdir()
    dst.mkdir()
    src.chmod(0o750)
    copy_attributes(storage, src.as_uri(), dst.as_uri())
    assert dst.stat().st_mode & 0o777 == 0o750


def _live_and_staged(tmp_path):
    """A partition directory and its staged copy, each with a data file `part-0.parquet`."""
    src, dst = tmp_path / "live", tmp_path / "staged"
    for directory in (src, dst):
        directory.mkdir()
        (directory / "part-0.parquet").write_bytes(b"x")
    return src, dst


def test_only_differing_file_attributes_are_set(storage, tmp_path):
    src, dst = _live_and_staged(tmp_path)
    (src / "part-0.parquet").chmod(0o640)
    (dst / "part-0.parquet").chmod(0o644)  # what a write under umask 022 gives
    (dst / "part-1.parquet").write_bytes(b"y")
    (dst / "part-1.parquet").chmod(0o640)  # already as the original
    untouched = (dst / "part-1.parquet").stat().st_ctime_ns
    time.sleep(0.05)  # past the filesystem's timestamp granularity: a chmod, even to the same mode, moves the ctime

    assert copy_attributes(storage, src.as_uri(), dst.as_uri()) == []

    assert stat.S_IMODE((dst / "part-0.parquet").stat().st_mode) == 0o640
    assert stat.S_IMODE((dst / "part-1.parquet").stat().st_mode) == 0o640
    assert (dst / "part-1.parquet").stat().st_ctime_ns == untouched  # equal attributes were not set again


def test_modes_without_owner_bits_are_carried(storage, tmp_path):
    """A permission below 0o100 (`FsPermission` parses three octal digits at least) is carried like any other."""
    src, dst = _live_and_staged(tmp_path)
    (src / "part-0.parquet").chmod(0o040)
    assert copy_attributes(storage, src.as_uri(), dst.as_uri()) == []
    assert stat.S_IMODE((dst / "part-0.parquet").stat().st_mode) == 0o040


def test_attributes_through_a_symbolic_link_are_its_targets_as_hadoop_reads_them(storage, tmp_path):
    """A partition directory or data file that is a symbolic link: its target's attributes, as Hadoop's status
    gives them (the link's own, 0o777, would be given to the new files)."""
    directory, file = tmp_path / "d", tmp_path / "d" / "f.parquet"
    directory.mkdir()
    file.write_bytes(b"x")
    file.chmod(0o640)
    directory.chmod(0o750)
    (tmp_path / "d-link").symlink_to(directory)
    (tmp_path / "f-link.parquet").symlink_to(file)
    locations = [(tmp_path / "d-link").as_uri(), (tmp_path / "f-link.parquet").as_uri()]
    found = read_attributes(storage, locations)
    assert [a.mode for a in found] == [0o750, 0o640]
    for location, attributes in zip(locations, found, strict=True):
        fs, path = storage.java(location)
        assert attributes.mode == int(fs.getFileStatus(path).getPermission().toShort())
