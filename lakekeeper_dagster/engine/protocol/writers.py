"""Writers the partition-level swap guards cannot see: staging directories at the table root, in-progress files.

Spark (`.spark-staging-*`, `_temporary`), Hive (`.hive-staging*`) and Impala (`_impala_insert_staging`) stage a write
at the table root and move finished partition directories into place at their commit; Flink and `hdfs dfs -put` keep
a file being written inside the partition (`.part-*.inprogress.*`, `_part-*.pending`, `*._COPYING_`; Flume's HDFS
sink `*.tmp`, its default in-use suffix, until it closes and renames the file). Right before
a swap each is found by one glob and judged by its modification times (the newest of the entry and the files below
it) against the filesystem's own clock:
- fresh (younger than `STALE_WRITER_SECONDS`): a live writer, waited for up to `WRITER_WAIT_SECONDS`, then the unit
  fails with nothing changed;
- stale at the table root: a leftover of a writer that died; the swap does not touch it, so the unit proceeds and a
  warning names it, its age and what to do (remove it);
- stale inside the partition: the swap would move it away from a writer that may still resume it (Flink resumes
  in-progress files from its checkpoint), so the unit fails naming it, its age and what to do.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from lakekeeper_dagster.engine.errors import UnitFailure
from lakekeeper_dagster.engine.fs.locations import child
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.protocol.journal import state_dir

log = logging.getLogger(__name__)

WRITER_WAIT_SECONDS = 30.0
STALE_WRITER_SECONDS = 6 * 3600.0  # a writer silent this long is taken for dead (a long Spark job writes more often)
_NEWEST_OF_AT_MOST = 200  # files looked at below a staging directory; more than that counts as a live writer
ROOT_STAGING = "{.spark-staging-*,.hive-staging*,_impala_insert_staging*,_temporary}"
IN_PROGRESS = "{*.inprogress*,*.in-progress*,[._]*.pending,*._COPYING_,*.tmp}"
_GLOB_CHARACTERS = "\\{}[]*?"


@dataclass(frozen=True)
class Writer:
    """A writer's trace: where it is, how old its newest change is (seconds; None: too big to tell), and whether it
    is inside the unit (an in-progress file) or at the table root (a staging directory)."""

    path: str
    age: float | None
    in_unit: bool

    @property
    def stale(self) -> bool:
        return self.age is not None and self.age > STALE_WRITER_SECONDS

    def describe(self) -> str:
        age = "its size hides its age" if self.age is None else f"last changed {self.age / 3600:.1f} h ago"
        return f"{self.path} ({age})"


def _literal(location: str) -> str:
    return "".join(f"\\{c}" if c in _GLOB_CHARACTERS else c for c in location.rstrip("/"))


def _filesystem_now(storage: Storage, table_location: str) -> int:
    """The filesystem's clock (ms): the modification time of a probe written in the table's state directory."""
    probe = child(state_dir(table_location), f".probe-writers-{uuid.uuid4().hex}")
    storage.write_text(probe, "")
    try:
        return storage.modification_time(probe)
    finally:
        storage.delete(probe)


def find_writers(storage: Storage, table_location: str, live: str | None) -> list[Writer]:
    """Staging directories at the table root (when `live` is None) or in-progress files in `live`, with their age.

    One glob: the root's lists the table's top directory (every partition of its first level), so it is done once
    per batch, not once per unit. For an unpartitioned table the root is the unit: its staging directories are
    waited for by `guard_swap`.
    """
    if live is None:
        found = [(p, d, m, False) for p, d, m in storage.glob(f"{_literal(table_location)}/{ROOT_STAGING}")]
    else:
        found = [(p, d, m, True) for p, d, m in storage.glob(f"{_literal(live)}/{IN_PROGRESS}")]
    if not found:
        return []
    now = _filesystem_now(storage, table_location)
    writers = []
    for path, directory, modified, in_unit in found:
        newest = storage.newest_modification_time(path, _NEWEST_OF_AT_MOST) if directory else modified
        writers.append(Writer(path, None if newest is None else max(0.0, (now - newest) / 1000.0), in_unit))
    return writers


def wait_for_writers(
    storage: Storage,
    table_location: str,
    live: str | None,
    label: str,
    timeout: float | None = None,
    waiting: Callable[[str], None] | None = None,
) -> None:
    """Wait until no live writer stages at the table root (`live` None) or writes a file in `live`; fail otherwise.

    Stale leftovers at the root are logged and let through; stale ones in `live` fail the unit (see the module).
    `waiting` is told once what it waits for, when a live writer makes it wait.
    """
    timeout = WRITER_WAIT_SECONDS if timeout is None else timeout
    deadline = time.monotonic() + timeout
    told = waiting is None
    while True:
        writers = find_writers(storage, table_location, live)
        live_writers = [w for w in writers if not w.stale]
        if not live_writers:
            break
        if not told:
            waiting(f"a write into the table ({', '.join(w.describe() for w in live_writers)}), up to {timeout:.0f} s")
            told = True
        if time.monotonic() > deadline:
            raise UnitFailure(
                f"{label}: a write into the table is in progress ({', '.join(w.describe() for w in live_writers)}) "
                f"and did not finish within {timeout:.0f}s. Nothing was changed; retry when the writer is done."
            )
        time.sleep(0.5)
    stale_in_unit = [w for w in writers if w.in_unit]
    if stale_in_unit:
        raise UnitFailure(
            f"{label}: it holds a file a writer left in progress ({', '.join(w.describe() for w in stale_in_unit)}); "
            f"older than {STALE_WRITER_SECONDS / 3600:.0f} h, it looks stale, but the swap would take it from a writer "
            "that resumes it. Nothing was changed; finish or stop that writer and remove the file, then retry."
        )
    for writer in writers:
        log.warning(
            "%s: a stale leftover of a writer at the table root: %s, older than %.0f h; it is left alone (the swap "
            "does not touch it). Remove it once no job uses it.",
            label,
            writer.describe(),
            STALE_WRITER_SECONDS / 3600,
        )
