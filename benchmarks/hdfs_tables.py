"""Table copies on a local HDFS (`spark_resources.hadoop.LocalHadoop`, Hadoop's minicluster), side by side with the
local filesystem's: `--filesystem local --filesystem hdfs` runs every contender on both, the HDFS runs labelled
`<contender>@hdfs`.

`HdfsTables` starts the HDFS in the benchmark's work dir (stopped and removed at the end), makes the admin Spark
session one of its clients, copies the master data in through the Hadoop FileSystem API and deletes a run's copy
without the Trash (`FileSystem.delete`). `HdfsPath` is the little of `pathlib.Path` the benchmarks' checks use
(`/`, name, parent, exists, is_dir, is_file, iterdir, stat, as_uri), over the same API: a file's `st_ino` is its
HDFS file id (kept by a rename, new for a rewrite), `st_mtime_ns` its modification time (milliseconds on HDFS).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import NamedTuple

FILESYSTEMS = ("local", "hdfs")


def filesystem_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--filesystem", action="append", dest="filesystems", choices=FILESYSTEMS,
                        help="where the table copies live, repeatable (side by side, interleaved): local "
                             "(default) or hdfs (a local HDFS started for the benchmark; runs labelled "
                             "<contender>@hdfs)")  # fmt: skip


def filesystems_of(args: argparse.Namespace) -> list[str]:
    return list(dict.fromkeys(args.filesystems or ["local"]))


def suffix_of(filesystem: str) -> str:
    """The label suffix of the runs whose table copies are on `filesystem`: none on the local one, else `@hdfs`."""
    return "" if filesystem == "local" else f"@{filesystem}"


class Stat(NamedTuple):
    st_size: int
    st_ino: int
    st_mtime_ns: int


class HdfsPath:
    """A path on HDFS, read through the Hadoop FileSystem API of `spark`'s JVM. A path that `iterdir` returns keeps
    the status the listing gave (as `os.DirEntry` does): its is_dir/is_file/stat cost no further RPC."""

    def __init__(self, spark, uri: str, status=None) -> None:
        self.spark = spark
        self.uri = uri.rstrip("/")
        self._status = status

    def __repr__(self) -> str:
        return f"HdfsPath({self.uri!r})"

    def __str__(self) -> str:
        return self.uri

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HdfsPath) and other.uri == self.uri

    def __hash__(self) -> int:
        return hash(self.uri)

    def __lt__(self, other: HdfsPath) -> bool:
        return self.uri < other.uri

    def __truediv__(self, name: str) -> HdfsPath:
        return HdfsPath(self.spark, f"{self.uri}/{name}")

    @property
    def name(self) -> str:
        return self.uri.rsplit("/", 1)[1]

    @property
    def parent(self) -> HdfsPath:
        return HdfsPath(self.spark, self.uri.rsplit("/", 1)[0])

    def as_uri(self) -> str:
        return self.uri

    def _jpath(self):
        return self.spark._jvm.org.apache.hadoop.fs.Path(self.uri)

    def _fs(self):
        return self._jpath().getFileSystem(self.spark._jsc.hadoopConfiguration())

    def _file_status(self):
        if self._status is None:
            path = self._jpath()
            fs = self._fs()
            if not fs.exists(path):
                return None
            self._status = fs.getFileStatus(path)
        return self._status

    def exists(self) -> bool:
        return self._file_status() is not None

    def is_dir(self) -> bool:
        status = self._file_status()
        return status is not None and bool(status.isDirectory())

    def is_file(self) -> bool:
        status = self._file_status()
        return status is not None and bool(status.isFile())

    def iterdir(self):
        if not self.is_dir():
            raise FileNotFoundError(f"no directory {self.uri}")
        for status in self._fs().listStatus(self._jpath()):
            yield HdfsPath(self.spark, f"{self.uri}/{status.getPath().getName()}", status)

    def stat(self) -> Stat:
        status = self._file_status()
        if status is None:
            raise FileNotFoundError(f"no file {self.uri}")
        return Stat(int(status.getLen()), int(status.getFileId()), int(status.getModificationTime()) * 1_000_000)

    def delete(self) -> None:
        """Delete the tree here, not through the Trash."""
        self._fs().delete(self._jpath(), True)
        self._status = None


class HdfsTables:
    """A local HDFS for the benchmark's table copies, under `home` (removed by `stop`)."""

    def __init__(self, home: Path) -> None:
        from spark_resources.hadoop import LocalHadoop

        self.hadoop = LocalHadoop(home=home)

    def start(self, spark) -> str:
        """Start the HDFS and make `spark` (the admin session) a client of it; its URI."""
        uri = self.hadoop.start()
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        for key, value in self.hadoop.client_conf().items():
            conf.set(key, value)
        self.spark = spark
        return uri

    def spark_conf(self) -> dict[str, str]:
        """The Spark conf a contender's session needs to write to this HDFS."""
        return self.hadoop.spark_conf()

    def copy(self, source: Path, destination: str, leave_out: str) -> HdfsPath:
        """A copy of local directory `source` at `destination` (a path on the HDFS), without its file `leave_out`."""
        target = HdfsPath(self.spark, f"{self.hadoop.uri}/{destination.strip('/')}")
        jvm = self.spark._jvm
        target._fs().copyFromLocalFile(False, False, jvm.org.apache.hadoop.fs.Path(source.as_uri()), target._jpath())
        (target / leave_out).delete()
        return HdfsPath(self.spark, target.uri)

    def stop(self) -> None:
        self.hadoop.stop()
        shutil.rmtree(self.hadoop.home, ignore_errors=True)
