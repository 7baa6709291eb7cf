"""File operations through the Hadoop FileSystem API of the Spark JVM (hdfs:// and file:// alike)."""

from __future__ import annotations

from contextlib import suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from lakekeeper_dagster.engine.errors import StorageError
from lakekeeper_dagster.engine.fs.entries import Entry, EntryReader
from lakekeeper_dagster.engine.fs.locations import is_hidden
from spark_resources.bulk import driver_bulk
from spark_resources.py4j import gateway, hadoop_conf, is_java_error, java_class, java_messages, jvm

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


SMALL_FILE_BLOCK = 1024 * 1024  # HDFS's default dfs.namenode.fs-limits.min-block-size
_KEPT_PATHS = 4096  # Hadoop Paths a Storage keeps (a py4j round trip to make, and another to free)


@dataclass(frozen=True)
class DataFile:
    path: str
    size: int
    modification_time: int

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class DirEntries:
    """What one listing of a directory shows: its subdirectories' names and its data files."""

    directories: list[str]
    files: list[DataFile]


def _filesystem_root(location: str) -> str:
    """`scheme://authority` of a location (empty for a path without scheme: the default filesystem)."""
    parsed = urlsplit(location)
    return f"{parsed.scheme}://{parsed.netloc}" if parsed.scheme else ""


def _cause(error: BaseException) -> str:
    """The first line of the Java exception's message (or of the error's own)."""
    return (java_messages(error) or [str(error)])[0].splitlines()[0]


class Storage:
    """Thin wrapper over `org.apache.hadoop.fs.FileSystem`, one instance per Spark session."""

    def __init__(self, spark: SparkSession):
        self._spark = spark
        self.jvm = jvm(spark)
        self._gateway = gateway(spark)
        self.conf = hadoop_conf(spark)
        hadoop_fs = self.jvm.org.apache.hadoop.fs  # each py4j class lookup is a round trip: look up once
        self._path_class = hadoop_fs.Path
        self._file_context_class = hadoop_fs.FileContext
        self._reader = EntryReader(self.jvm)
        self._io_utils = java_class(spark, "org.apache.commons.io.IOUtils")
        self._paths: dict[str, Any] = {}
        self._qualified: dict[str, str] = {}
        self.without_acls: set[str] = set()  # filesystems found not to support ACLs (`fs/attributes.py`)
        self._no_overwrite, self._overwrite = (self._gateway.new_array(hadoop_fs.Options.Rename, 1) for _ in "ab")
        self._no_overwrite[0], self._overwrite[0] = hadoop_fs.Options.Rename.NONE, hadoop_fs.Options.Rename.OVERWRITE
        # Per filesystem (scheme and authority): looking one up costs a user lookup and a cache probe in the JVM.
        self._filesystems: dict[str, object] = {}
        self._contexts: dict[str, object] = {}
        self._schemes: dict[str, str] = {}

    def _path(self, location: str):
        """The Hadoop Path of `location`: made once (a Path is immutable), as a run asks of the same few again."""
        if (path := self._paths.get(location)) is None:
            if len(self._paths) >= _KEPT_PATHS:
                self._paths.clear()
            path = self._paths[location] = self._path_class(location)
        return path

    def _fs(self, location: str):
        root = _filesystem_root(location)
        if root not in self._filesystems:
            self._filesystems[root] = self._path(location).getFileSystem(self.conf)
        return self._filesystems[root]

    def scheme(self, location: str) -> str:
        """The scheme of `location`'s filesystem (`hdfs`, `file`, `viewfs`...), asked once per filesystem."""
        root = _filesystem_root(location)
        if root not in self._schemes:
            self._schemes[root] = str(self._fs(location).getScheme())
        return self._schemes[root]

    def _context(self, location: str):
        root = _filesystem_root(location)
        if root not in self._contexts:
            self._contexts[root] = self._file_context_class.getFileContext(self._path(location).toUri(), self.conf)
        return self._contexts[root]

    def java(self, location: str) -> tuple[Any, Any]:
        """The Java FileSystem of `location` and its Path, for questions only one filesystem answers (`fs/hdfs.py`)."""
        return self._fs(location), self._path(location)

    def qualify(self, location: str) -> str:
        """Fully qualified form of a location (scheme and authority filled in), asked once per location."""
        if (qualified := self._qualified.get(location)) is None:
            if len(self._qualified) >= _KEPT_PATHS:
                self._qualified.clear()
            qualified = str(self._fs(location).makeQualified(self._path(location)).toString())
            self._qualified[location] = qualified
        return qualified

    def exists(self, location: str) -> bool:
        return bool(self._fs(location).exists(self._path(location)))

    def _list(self, location: str) -> list[Entry] | None:
        """The entries directly under `location`, from one listing call; None when it does not exist."""
        fs, path = self._fs(location), self._path(location)
        try:
            return self._read(fs.listStatus(path), location)
        except Exception:  # py4j wraps FileNotFoundException
            if not fs.exists(path):
                return None
            raise

    def _read(self, statuses, location: str) -> list[Entry]:
        """A `FileStatus[]`'s entries: its JSON in one round trip (`fs/entries.py`), else field by field."""
        return self._reader.read(statuses, _filesystem_root(location))

    def list_entries(self, location: str) -> DirEntries:
        """Subdirectory names and data files (size, mtime) directly under `location`, from one listing call."""
        entries = self._list(location)
        if entries is None:
            raise StorageError(f"location {location} does not exist")
        directories = sorted(e.name for e in entries if e.is_directory)
        files = [DataFile(e.path, e.size, e.modification_time) for e in entries if not e.is_directory]
        return DirEntries(directories, sorted((f for f in files if not is_hidden(f.name)), key=lambda f: f.path))

    def stat(self, location: str) -> DataFile | None:
        """A file's size and modification time now, or None when nothing is there."""
        fs = self._fs(location)
        try:
            status = fs.getFileStatus(self._path(location))
        except Exception:  # py4j wraps FileNotFoundException
            if not fs.exists(self._path(location)):
                return None
            raise
        return DataFile(location, int(status.getLen()), int(status.getModificationTime()))

    def list_data_files(self, location: str) -> list[DataFile]:
        """Data files directly under `location` with size and mtime; one listing call for the directory."""
        return self.list_entries(location).files

    def list_names(self, location: str, directories: bool) -> list[str]:
        """Names of the subdirectories (or files) directly under `location`; empty when it does not exist."""
        return sorted(e.name for e in self._list(location) or [] if e.is_directory == directories)

    def glob(self, pattern: str) -> list[tuple[str, bool, int]]:
        """(path, is directory, modification time ms) of what a Hadoop glob pattern matches; one listing call."""
        statuses = self._fs(pattern).globStatus(self._path(pattern))
        entries = [] if statuses is None else self._read(statuses, pattern)
        return [(e.path, e.is_directory, e.modification_time) for e in entries]

    def newest_modification_time(self, location: str, limit: int) -> int | None:
        """The newest modification time of `location` and the files below it (recursively), or None when more than
        `limit` files would have to be looked at (the caller cannot tell how recent the newest is)."""
        fs = self._fs(location)
        path = self._path(location)
        newest = int(fs.getFileStatus(path).getModificationTime())
        files = fs.listFiles(path, True)
        for _ in range(limit):
            if not files.hasNext():
                return newest
            newest = max(newest, int(files.next().getModificationTime()))
        return None if files.hasNext() else newest

    def mkdirs(self, location: str) -> None:
        if not self._fs(location).mkdirs(self._path(location)):
            raise StorageError(
                f"could not create directory {location}: permission denied or a file in the way; check that the "
                "user running lakekeeper may write in its parent directory"
            )

    def delete(self, location: str, recursive: bool = True) -> bool:
        """Delete a file or directory; False when it did not exist."""
        fs = self._fs(location)
        path = self._path(location)
        if not fs.exists(path):
            return False
        if not fs.delete(path, recursive):
            raise StorageError(f"could not delete {location}")
        return True

    def rename_strict(self, source: str, target: str) -> None:
        """Rename `source` (file or directory) to exactly `target`, atomically refusing an existing target.

        `FileSystem.rename` moves a directory *into* an existing target directory on HDFS, which would corrupt a
        swap; `FileContext.rename` without OVERWRITE fails instead, atomically in the NameNode. On the local filesystem
        it checks, then renames (not atomic there either), forking `stat` per check: the same checks are made here.
        """
        src, dst = self._path(source), self._path(target)
        try:
            if self.scheme(source) != "file":
                self._context(source).rename(src, dst, self._no_overwrite)
            elif self.exists(target):
                raise StorageError(f"{target} exists")
            elif not self._fs(source).exists(dst.getParent()):
                raise StorageError(f"the parent directory of {target} does not exist")
            elif not self._fs(source).rename(src, dst):
                raise StorageError("the filesystem refused it")
        except Exception as error:  # py4j wraps the Java exception; name the cause in our words
            cause = _cause(error)
            if is_java_error(error, "FileAlreadyExistsException") or self.exists(target):
                raise StorageError(f"refusing to rename {source} onto {target}: the target already exists") from None
            if not self.exists(source):
                raise StorageError(f"cannot rename {source}: it does not exist") from None
            raise StorageError(f"rename of {source} to {target} failed: {cause}") from None

    def replace_file(self, source: str, target: str) -> None:
        """Rename the file `source` onto `target`, replacing it: one rename with OVERWRITE, atomic in HDFS's NameNode
        (readers see the old file or the new one, never none); a local filesystem deletes, then renames, in one call."""
        try:
            self._context(source).rename(self._path(source), self._path(target), self._overwrite)
        except Exception as error:
            raise StorageError(f"rename of {source} onto {target} failed: {_cause(error)}") from None

    def delete_empty_dir(self, location: str) -> bool:
        """Delete a directory only if it is empty (non-recursive); False when it is not (or is gone)."""
        fs = self._fs(location)
        try:
            return bool(fs.delete(self._path(location), False))
        except Exception:  # PathIsNotEmptyDirectoryException (HDFS) / IOException (local)
            return False

    def read_text(self, location: str) -> str:
        """A small file's UTF-8 text, read in one call."""
        stream = self._fs(location).open(self._path(location))
        try:
            return str(self._io_utils.toString(stream, "UTF-8"))
        finally:
            stream.close()

    def _create_small(self, location: str, overwrite: bool):
        """An output stream for a small file: on HDFS in blocks of 1 MiB (the NameNode's default minimum), since a
        file being written is charged a whole block, times its replication, against a space quota: a journal record
        or a lease then costs ~1 MiB each, not 128."""
        fs, path = self._fs(location), self._path(location)
        if self.scheme(location) != "hdfs":
            return fs.create(path, overwrite)
        try:
            return fs.create(path, overwrite, 4096, fs.getDefaultReplication(path), SMALL_FILE_BLOCK)
        except Exception as error:  # a NameNode whose minimum block size is larger: its default then
            if "block size is less than" not in _cause(error):
                raise
            return fs.create(path, overwrite)

    def write_text(self, location: str, text: str, overwrite: bool = True) -> None:
        """Write a small text file durably (hflush/hsync before close where the filesystem supports it)."""
        stream = self._create_small(location, overwrite)
        try:
            stream.write(bytearray(text.encode("utf-8")))
            stream.hsync()
        finally:
            stream.close()

    def create_exclusive(self, location: str, text: str) -> bool:
        """Create a file only if it does not exist, atomically; False when it already existed."""
        fs = self._fs(location)
        path = self._path(location)
        overwrite = False  # HDFS refuses an existing path atomically in the NameNode
        try:
            if self.scheme(location) == "file":
                # The local filesystem's create(overwrite=False) checks, then creates: two processes can both
                # succeed. Claim the name with an exclusive create (O_EXCL) first, then write our own file.
                no_attributes = self._gateway.new_array(self.jvm.java.nio.file.attribute.FileAttribute, 0)
                fs.mkdirs(path.getParent())  # as create() would
                self.jvm.java.nio.file.Files.createFile(fs.pathToFile(path).toPath(), no_attributes)
                overwrite = True
            stream = self._create_small(location, overwrite)
        except Exception as error:  # py4j wraps FileAlreadyExistsException
            if fs.exists(path):
                return False
            raise StorageError(f"could not create {location}: {error}") from None
        try:
            stream.write(bytearray(text.encode("utf-8")))
            stream.hsync()
            stream.close()
        except Exception as error:  # e.g. an HDFS quota without a block to spare: our empty file is removed
            with suppress(Exception):
                stream.close()
            fs.delete(path, False)
            quota = "; raise that quota or free space below its directory" if "QuotaExceeded" in _cause(error) else ""
            raise StorageError(f"could not write {location}: {_cause(error)}{quota}") from None
        return True

    def modification_time(self, location: str) -> int:
        return int(self._fs(location).getFileStatus(self._path(location)).getModificationTime())

    def set_modification_time(self, location: str, millis: int) -> None:
        self._fs(location).setTimes(self._path(location), millis, -1)

    @property
    def bulk(self) -> Any:
        """The driver's bulk helper (`spark_resources.bulk`), compiled on first use."""
        return driver_bulk(self._spark)
