"""The swap guards: what makes a swap safe to start, judged right before it from one listing of the live directory
(some also before a unit is written)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from lakekeeper_dagster.engine.errors import UnitFailure
from lakekeeper_dagster.engine.fs.access import foreign_ownership, hadoop_user
from lakekeeper_dagster.engine.fs.hdfs import is_encryption_zone_root, is_hdfs, open_files, snapshots
from lakekeeper_dagster.engine.fs.locations import is_hidden
from lakekeeper_dagster.engine.fs.storage import DataFile, DirEntries, Storage
from lakekeeper_dagster.engine.protocol import writers

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def refuse_subdirectories(directories: list[str], label: str) -> None:
    """Data in subdirectories (e.g. Hive's HIVE_UNION_SUBDIR_1) would move with the swap and never come back."""
    nested = [n for n in directories if not is_hidden(n)]
    if nested:
        raise UnitFailure(
            f"{label}: its directory holds subdirectories ({', '.join(nested[:3])}) whose files this compaction would "
            "not rewrite; nothing was changed. Move their files up into the partition directory first."
        )


def changed_files(snapshot: dict[str, tuple[int, int] | None], files: list[DataFile]) -> list[str]:
    """Names of the snapshot files that are missing from `files`, or whose size or modification time differ.

    A snapshot entry of None (a journal written before sizes and times were recorded) is compared by name only.
    Modification time matters: a writer that replaces a file under the same name (`INSERT OVERWRITE` reuses
    `000000_0`) with the same size is told apart only by it.
    """
    now = {f.name: (f.size, f.modification_time) for f in files}
    return sorted(
        name
        for name, recorded in snapshot.items()
        if name not in now or (recorded is not None and tuple(recorded) != now[name])
    )


def refuse_encryption_zone_root(storage: Storage, live: str, label: str) -> None:
    """A directory that is an HDFS encryption zone root cannot be renamed away: the swap would fail half-way."""
    if is_encryption_zone_root(storage, live):
        raise UnitFailure(
            f"{label}: its directory {live} is the root of an HDFS encryption zone, which cannot be renamed; "
            "lakekeeper-dagster cannot swap it. Nothing was changed; exclude it from compaction."
        )


def refuse_snapshottable(storage: Storage, live: str, label: str) -> None:
    """A snapshottable directory cannot be swapped: HDFS refuses to rename it away while it has snapshots, and the
    new directory put in its place would not be snapshottable (its snapshot schedule would fail)."""
    taken = snapshots(storage, live)
    if taken is None:
        return
    held = f", with {len(taken)} snapshot(s) (e.g. {taken[0]})" if taken else ""
    raise UnitFailure(
        f"{label}: its directory {live} is snapshottable (HDFS snapshots){held}; a swap replaces the directory, "
        "which HDFS refuses while it has snapshots, and the new directory would not be snapshottable. Nothing was "
        "changed; exclude it from compaction, or make a parent directory snapshottable instead of it (`hdfs dfs "
        "-deleteSnapshot`, then `hdfs dfsadmin -disallowSnapshot`)."
    )


def refuse_unswappable(storage: Storage, live: str, label: str) -> None:
    """A directory HDFS would not let the swap rename away: an encryption zone root, or a snapshottable one."""
    refuse_encryption_zone_root(storage, live, label)
    refuse_snapshottable(storage, live, label)


def wait_for_open_files(
    storage: Storage,
    live: str,
    entries: DirEntries,
    label: str,
    deadline: float | None = None,
    waiting: Callable[[str], None] | None = None,
) -> DirEntries:
    """`entries` (a listing of `live`) once no file of it is held open by a writer (HDFS only: `fs/hdfs.py`), or a
    fresh listing after a wait (a closed file shows its final size and time); a UnitFailure naming the file when
    one is still open at `deadline` (default: `writers.WRITER_WAIT_SECONDS` from now). `waiting` is told once.

    A file closed between a listing and the question is found closed with the size it had while open: the directory
    is listed again once all are closed, and asked again until two listings agree."""
    if not is_hdfs(storage, live):
        return entries
    timeout = writers.WRITER_WAIT_SECONDS
    deadline = time.monotonic() + timeout if deadline is None else deadline
    while True:
        held = open_files(storage, entries.files)
        if not held:
            again = storage.list_entries(live)
            if _same(again, entries):
                return entries
            entries = again
            continue
        if time.monotonic() > deadline:
            raise UnitFailure(
                f"{label}: its file {held[0]} is held open by a writer ({len(held)} file(s) not closed) and was not "
                f"closed within {timeout:.0f}s; what the writer appends does not show until it closes the file. "
                "Nothing was changed; retry when the writer is done (a writer that died leaves the file open until "
                f"the NameNode recovers its lease, within an hour, or `hdfs debug recoverLease -path {held[0]}`)."
            )
        if waiting is not None:
            waiting(f"{held[0]}, held open by a writer, up to {timeout:.0f} s")
            waiting = None
        time.sleep(0.5)
        entries = storage.list_entries(live)


def _same(one: DirEntries, other: DirEntries) -> bool:
    """Two listings of a directory show the same subdirectories and files, of the same sizes and times."""
    return one.directories == other.directories and one.files == other.files


def refuse_owner_change(spark: SparkSession, live: str, files: list[DataFile], label: str) -> None:
    """New files that could not be given the owner or group of those they replace (`fs/access.py`
    `foreign_ownership`) would change who owns, and may read, the data: refused before anything is written (unless
    `accept_owner_change`, checked by the caller)."""
    kept = foreign_ownership(spark, live, files[0].path if files else None)
    if kept is None:
        return
    user = hadoop_user(spark)
    owner = kept.split()[1]  # `owner hive (group hadoop)`, `group analysts`
    who = f"{owner}, an HDFS superuser or a proxy user for {owner}" if kept.startswith("owner") else "a member of it"
    raise UnitFailure(
        f"{label}: user {user} may not give new files the {kept} of {live} and its files; compacting would change "
        f"who owns the data (and may read it). Nothing was changed; run it as {who}, or set accept_owner_change: "
        f"true to compact anyway (the new files then keep {user}'s owner and group and the result names what was "
        "not carried)."
    )


def guard_swap(storage: Storage, live: str, snapshot: list[DataFile], label: str) -> None:
    """No writer at work in `live` (waited for up to `writers.WRITER_WAIT_SECONDS`: a hidden directory of its
    commit, a file it holds open on HDFS), no subdirectories, not an encryption zone root nor snapshottable, and every
    snapshot file still there with the same size and modification time."""
    timeout = writers.WRITER_WAIT_SECONDS
    deadline = time.monotonic() + timeout
    if not storage.exists(live):
        raise UnitFailure(
            f"{label}: its directory {live} was deleted during compaction (by another job, or a DROP PARTITION). "
            "Nothing was changed; the staged copy is removed."
        )
    entries = storage.list_entries(live)
    while busy := [n for n in entries.directories if is_hidden(n)]:
        # A writer committing straight into the directory keeps its work in hidden subdirectories (`_temporary`,
        # `.spark-staging-*`): swapping under it would strand its output, so wait for it to finish, or give up.
        if time.monotonic() > deadline:
            raise UnitFailure(
                f"{label}: a write into it is in progress ({', '.join(busy)}) and did not finish within "
                f"{timeout:.0f}s. Nothing was changed; retry when the writer is done."
            )
        time.sleep(0.5)
        entries = storage.list_entries(live)
    entries = wait_for_open_files(storage, live, entries, label, deadline)
    refuse_subdirectories(entries.directories, label)
    refuse_unswappable(storage, live, label)
    changed = changed_files({f.name: (f.size, f.modification_time) for f in snapshot}, entries.files)
    if changed:
        raise UnitFailure(
            f"{label}: {len(changed)} of its files were removed, rewritten or appended to during compaction (e.g. "
            f"{next(f.path for f in snapshot if f.name == changed[0])}); another job overwrote it. Nothing was "
            "changed; retry when that job is done."
        )
