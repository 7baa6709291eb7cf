"""The checks right before a swap, from one listing of the live directory: what makes a swap safe to start."""

from __future__ import annotations

import time

from lakekeeper_dagster.engine.errors import UnitFailure
from lakekeeper_dagster.engine.fs.storage import DataFile, Storage, is_hidden

WRITER_WAIT_SECONDS = 30.0


def refuse_subdirectories(directories: list[str], label: str) -> None:
    """Data in subdirectories (e.g. Hive's HIVE_UNION_SUBDIR_1) would move with the swap and never come back."""
    nested = [n for n in directories if not is_hidden(n)]
    if nested:
        raise UnitFailure(
            f"{label}: its directory holds subdirectories ({', '.join(nested[:3])}) whose files this compaction would "
            "not rewrite; nothing was changed. Move their files up into the partition directory first."
        )


def check_before_swap(
    storage: Storage, live: str, snapshot: list[DataFile], label: str, timeout: float = WRITER_WAIT_SECONDS
) -> None:
    """No writer at work in `live` (waited for), no subdirectories, and every snapshot file still there, unchanged."""
    deadline = time.monotonic() + timeout
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
    refuse_subdirectories(entries.directories, label)
    now = {f.name: f.size for f in entries.files}
    changed = [f.path for f in snapshot if now.get(f.name) != f.size]
    if changed:
        raise UnitFailure(
            f"{label}: {len(changed)} of its files were removed or rewritten during compaction (e.g. {changed[0]}); "
            "another job overwrote it. Nothing was changed; retry when that job is done."
        )
