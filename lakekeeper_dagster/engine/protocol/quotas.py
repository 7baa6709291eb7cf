"""HDFS quotas a compaction's staged copies would exceed, found before anything is written.

A unit is staged whole beside its original (`.lk-staging-*`, a sibling of its directory), and the original stays,
retired, until cleanup: the run adds the staged copy to every quota above it. Asked (`fs/hdfs.py`, once per
directory per run) of the directories from the staging sibling's parent up to the table's location, whose subtree
the run lists anyway: the NameNode sums a directory's subtree when it has no quota, so a directory above the table
(a database's, a warehouse's) is not asked; the NameNode refuses the write there (`ops/write.py` says so).

What a unit's copy needs (HDFS charges a file's block in full, times its replication, until the file is closed):
- space: each of its files' bytes rounded up to whole blocks, times the replication a write there uses;
- names: its directory, its files, and the Spark write's own (`_temporary`, `0`, `_temporary`, one task directory
  per file, `_SUCCESS`).
The units a run admits earlier count with their bytes (closed files) and names against the same quotas.
"""

from __future__ import annotations

from lakekeeper_dagster.engine.fs import hdfs
from lakekeeper_dagster.engine.fs.locations import child, split_location
from lakekeeper_dagster.engine.fs.storage import Storage

_SPARK_WRITE_NAMES = 4  # `_temporary/0/_temporary` and `_SUCCESS` (besides one task directory per file)


def _admitted(amount: int, unit: str) -> str:
    return f" and {amount}{unit} more by this run's other partitions" if amount else ""


def _ceil(value: int, step: int) -> int:
    return -(-value // step) * step


class StagingQuotas:
    """The quota check of one compaction run: `refusal` admits a unit (and counts its copy) or says why not."""

    def __init__(self, storage: Storage, table_location: str):
        self._storage = storage
        self._table = table_location.rstrip("/")
        self._on_hdfs = hdfs.is_hdfs(storage, table_location)
        self._quotas: dict[str, hdfs.Quota | None] = {}
        self._admitted: dict[str, tuple[int, int]] = {}  # per directory with a quota: (space, names) of this run

    def _directories(self, live: str) -> list[str]:
        """The directories from `live`'s parent (where its staging sibling goes) up to the table's location; none
        for an unpartitioned table (its staging sibling is beside the table)."""
        directory, found = split_location(live)[0], []
        while directory.startswith(child(self._table, "")) or directory == self._table:
            found.append(directory)
            directory = split_location(directory)[0]
        return found

    def _quota(self, directory: str) -> hdfs.Quota | None:
        if directory not in self._quotas:
            self._quotas[directory] = hdfs.quota(self._storage, directory)
        return self._quotas[directory]

    def refusal(self, live: str, label: str, input_bytes: int, files: int) -> str | None:
        """Why the staged copy of the unit at `live` (`input_bytes` rewritten into `files` files) may not be
        written: a quota above it it would exceed; None (and the copy counted) when it fits."""
        if not self._on_hdfs or files <= 0:
            return None
        quotas = [q for q in map(self._quota, self._directories(live)) if q is not None]
        if not quotas:
            return None
        replication, block = hdfs.write_layout(self._storage, split_location(live)[0])
        space = replication * files * _ceil(-(-input_bytes // files), block)
        names = 1 + 2 * files + _SPARK_WRITE_NAMES
        for q in quotas:
            space_before, names_before = self._admitted.get(q.directory, (0, 0))
            if 0 <= q.space_quota < q.space_used + space_before + space:
                return (
                    f"{label}: its staged copy would exceed the space quota of {q.directory}: quota {q.space_quota} B, "
                    f"used {q.space_used} B{_admitted(space_before, ' B')}, the copy needs {space} B ({input_bytes} B "
                    f"in {files} file(s), each charged in whole blocks of {block} B while written, x replication "
                    f"{replication}). Nothing was changed; raise the quota (hdfs dfsadmin -setSpaceQuota) or free "
                    f"space under {q.directory}, then retry."
                )
            if 0 <= q.names_quota < q.names_used + names_before + names:
                return (
                    f"{label}: its staged copy would exceed the namespace quota of {q.directory}: quota "
                    f"{q.names_quota} files and directories, used {q.names_used}{_admitted(names_before, '')}, the "
                    f"copy needs {names} (its directory, its {files} file(s) and the Spark write's temporary ones). "
                    f"Nothing was changed; raise the quota (hdfs dfsadmin -setQuota) or remove files under "
                    f"{q.directory}, then retry."
                )
        for q in quotas:
            space_before, names_before = self._admitted.get(q.directory, (0, 0))
            self._admitted[q.directory] = (space_before + replication * input_bytes, names_before + 1 + files)
        return None
