"""One writer of lakekeeper state per table: an exclusive lease file beside the table's journals.

The lease is created exclusively (atomic on HDFS), names its owner (host, pid, run id, start time) and is renewed by
a background thread while work goes on. A lease is stale when its owner process is gone (same host) or when it was
not renewed within the timeout (another host); staleness is judged by the filesystem's own clock (modification
times), never by comparing two hosts' clocks. A stale lease is taken over by an atomic rename, so of two processes
racing for it exactly one wins; the winner then makes the table consistent (recover) before touching it.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from lakekeeper_dagster.engine.errors import LeaseHeldError, StorageError
from lakekeeper_dagster.engine.fs.storage import Storage, child

DEFAULT_TIMEOUT_SECONDS = 120.0
DEFAULT_RENEW_SECONDS = 10.0


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class LeaseOwner:
    host: str
    pid: int
    run_id: str
    owner: str
    started_at: float
    token: str

    def describe(self) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started_at))
        who = f" ({self.owner})" if self.owner else ""
        return f"host {self.host}, pid {self.pid}, run {self.run_id}{who}, since {started}"


class TableLease:
    """The exclusive lease of one table; use as a context manager around any change to the table."""

    def __init__(
        self,
        storage: Storage,
        state_directory: str,
        table: str,
        run_id: str,
        owner: str = "",
        timeout_seconds: float | None = None,
        renew_seconds: float | None = None,
    ):
        self.storage = storage
        self.state_directory = state_directory
        self.location = child(state_directory, "lease")
        self.table = table
        self.me = LeaseOwner(socket.gethostname(), os.getpid(), run_id, owner, time.time(), uuid.uuid4().hex)
        self.timeout = timeout_seconds or float(os.environ.get("LAKEKEEPER_LEASE_TIMEOUT", DEFAULT_TIMEOUT_SECONDS))
        self.renew_every = renew_seconds or min(DEFAULT_RENEW_SECONDS, self.timeout / 4)
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _payload(self) -> str:
        return json.dumps(self.me.__dict__, sort_keys=True)

    def holder(self) -> LeaseOwner | None:
        """The current holder, or None when there is no (readable) lease."""
        try:
            data = json.loads(self.storage.read_text(self.location))
        except Exception:  # missing file (py4j FileNotFoundException) or a torn write
            return None
        return LeaseOwner(**data)

    def _filesystem_now(self) -> int:
        """The filesystem's clock (ms): the modification time of a probe file written now."""
        probe = child(self.state_directory, f".probe-{self.me.token}")
        self.storage.write_text(probe, "")
        try:
            return self.storage.modification_time(probe)
        finally:
            self.storage.delete(probe)

    def is_stale(self, holder: LeaseOwner) -> bool:
        """Owner gone (same host) or not renewed within the timeout (judged by the filesystem's clock)."""
        if holder.host == socket.gethostname():
            return not process_alive(holder.pid)
        return self._expired()

    def _expired(self) -> bool:
        """Not renewed within the timeout, by the filesystem's clock."""
        return (self._filesystem_now() - self.storage.modification_time(self.location)) / 1000.0 > self.timeout

    def _settled_holder(self, attempts: int = 10, pause: float = 0.2) -> LeaseOwner | None:
        """The holder, read again briefly while the file is unreadable: a lease just created may not be written."""
        for _ in range(attempts):
            holder = self.holder()
            if holder is not None:
                return holder
            time.sleep(pause)
        return None

    def acquire(self) -> TableLease:
        """Take the lease, taking over a stale one; fail fast naming the holder when it is live."""
        self.storage.mkdirs(self.state_directory)
        if not self.storage.create_exclusive(self.location, self._payload()):
            holder = self._settled_holder()
            if holder is None and not self._expired():  # unreadable: judged by its age alone, never taken at once
                raise LeaseHeldError(
                    f"table {self.table}: its lease {self.location} cannot be read (being written, or damaged). "
                    f"Retry; a damaged lease is taken over once it has not been renewed for {self.timeout:.0f}s."
                )
            if holder is not None and not self.is_stale(holder):
                raise LeaseHeldError(
                    f"table {self.table} is being changed by another lakekeeper process ({holder.describe()}). "
                    "Wait for it to finish; if that process is gone, its lease expires after "
                    f"{self.timeout:.0f}s without renewal and the next run recovers the table."
                )
            stale = child(self.state_directory, f"lease.stale-{self.me.token}")
            try:
                self.storage.rename_file(self.location, stale)
            except StorageError:
                raise LeaseHeldError(
                    f"table {self.table}: another process took over the stale lease at the same moment; retry"
                ) from None
            self.storage.delete(stale)
            if not self.storage.create_exclusive(self.location, self._payload()):
                raise LeaseHeldError(f"table {self.table}: another process took the lease at the same moment; retry")
        self._thread = threading.Thread(target=self._renew, name=f"lease-{self.table}", daemon=True)
        self._thread.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(self.renew_every):
            holder = self.holder()
            if holder is None or holder.token != self.me.token:
                self.lost = True  # taken over after we stalled: stop renewing someone else's lease
                return
            try:  # renew the time only: never rewrite the content, which may by now be a taker's lease
                self.storage.set_modification_time(self.location, self._filesystem_now())
            except Exception:  # a renewal that cannot be written may let the lease expire under us
                self.lost = True
                return

    def ensure_held(self, what: str) -> None:
        """Fence before a step readers see: raise unless this process still holds the lease (read back now)."""
        holder = self.holder()
        if self.lost or holder is None or holder.token != self.me.token:
            self.lost = True
            now = f" (now: {holder.describe()})" if holder is not None and holder.token != self.me.token else ""
            raise LeaseHeldError(
                f"table {self.table}: this process lost its lease before {what}{now}, so it stops without "
                "swapping. The holder recovers the table; nothing readers see was changed by this run."
            )

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        holder = self.holder()
        if holder is not None and holder.token == self.me.token:
            self.storage.delete(self.location)

    def __enter__(self) -> TableLease:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()
