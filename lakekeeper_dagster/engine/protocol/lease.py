"""One writer of lakekeeper state per table: an exclusive lease file beside the table's journals.

The lease is created exclusively (atomic on HDFS), names its owner and is renewed by a background thread (its
modification time only) while work goes on.

Staleness. A holder on this host, in this process's pid namespace and boot (`/proc/sys/kernel/random/boot_id`,
the inode of `/proc/self/ns/pid`) is dead at once when no process has its pid or the process with that pid started
at another time (`/proc/<pid>/stat` field 22: a reused pid); while it lives its lease is held. Any other holder
(another host, another container sharing the hostname, a lease without these fields) is stale only when its lease
was not renewed within the timeout, judged by the filesystem's own clock (modification times), never by comparing
two hosts' clocks. An unreadable lease is judged by its age alone.

Takeover. A taker first claims the specific stale lease: it creates `lease.takeover-<stale token>` exclusively, so
of the processes that judged one lease stale exactly one goes on. The claimant reads the lease back (it must
still be the stale one), renames it to `lease.stale-<stale token>` (a rename never lands on an existing name, so
this too succeeds once per stale lease), creates its own lease exclusively and reads it back before returning; it
then removes its claim. Everyone else gets `LeaseHeldError` naming the holder or the claimant. A claim left by a
taker that died mid-takeover is judged like a lease (its claimant's process, or the renewal timeout by its age)
and moved aside once stale, so it never blocks a table for ever.

Fencing. A process that stalls past the timeout can lose its lease without knowing; `ensure_held` reads the lease
back and raises unless it is still ours. Every step that changes what readers see calls it first (the swaps and
commits of a run and of recovery, recovery of each journal, every journal record recovery writes, cleanup's
deletes), so a process that lost its lease stops before changing data; the new holder recovers the table.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, fields

from lakekeeper_dagster.engine.errors import LeaseHeldError, StorageError
from lakekeeper_dagster.engine.faults import kill_point
from lakekeeper_dagster.engine.fs.locations import child
from lakekeeper_dagster.engine.fs.storage import Storage

DEFAULT_TIMEOUT_SECONDS = 120.0
DEFAULT_RENEW_SECONDS = 10.0
TAKEOVER_POINT = "lease_judged_stale"  # fault point between judging a lease stale and claiming it (race tests)


def _read(path: str) -> str:
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def process_start(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, `/proc/<pid>/stat` field 22); None when it is gone."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return None
    return int(stat.rpartition(")")[2].split()[19])  # fields after the command name start at field 3


def boot_id() -> str:
    return _read("/proc/sys/kernel/random/boot_id")


def pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


@dataclass(frozen=True)
class LeaseOwner:
    host: str
    pid: int
    run_id: str
    owner: str
    started_at: float
    token: str
    boot_id: str = ""  # empty (0) in leases written before these were recorded: judged by the timeout alone
    pid_namespace: int = 0
    process_start: int = 0

    @classmethod
    def current(cls, run_id: str, owner: str) -> LeaseOwner:
        pid = os.getpid()
        identity = (boot_id(), pid_namespace(), process_start(pid) or 0)
        return cls(socket.gethostname(), pid, run_id, owner, time.time(), uuid.uuid4().hex, *identity)

    @classmethod
    def parse(cls, text: str) -> LeaseOwner | None:
        """The owner a lease (or claim) file names; None when it is empty or torn."""
        try:
            data = json.loads(text)
            return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})
        except (ValueError, TypeError):
            return None

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
        self.me = LeaseOwner.current(run_id, owner)
        self.timeout = timeout_seconds or float(os.environ.get("LAKEKEEPER_LEASE_TIMEOUT", DEFAULT_TIMEOUT_SECONDS))
        self.renew_every = renew_seconds or min(DEFAULT_RENEW_SECONDS, self.timeout / 4)
        self.lost = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _payload(self) -> str:
        return json.dumps(self.me.__dict__, sort_keys=True)

    def _create(self, location: str, attempts: int = 3) -> bool:
        """Create `location` exclusively with our payload; False when it exists.

        A file deleted between a failed exclusive create and its existence check (a claim removed by the process
        that just finished with it) makes `create_exclusive` raise: that is a race, and the create is retried.
        """
        for attempt in range(attempts):
            try:
                return self.storage.create_exclusive(location, self._payload())
            except StorageError:
                if attempt == attempts - 1:
                    raise
        return False

    def _owner_of(self, location: str) -> LeaseOwner | None:
        try:
            text = self.storage.read_text(location)
        except Exception:  # missing file (py4j FileNotFoundException)
            return None
        return LeaseOwner.parse(text)

    def holder(self) -> LeaseOwner | None:
        """The current holder, or None when there is no (readable) lease."""
        return self._owner_of(self.location)

    def _filesystem_now(self) -> int:
        """The filesystem's clock (ms): the modification time of a probe file written now."""
        probe = child(self.state_directory, f".probe-{self.me.token}")
        self.storage.write_text(probe, "")
        try:
            return self.storage.modification_time(probe)
        finally:
            self.storage.delete(probe)

    def _same_process_space(self, holder: LeaseOwner) -> bool:
        """Whether `holder`'s pid means a process we can see: same host, boot and pid namespace, start recorded."""
        me = self.me
        return bool(
            holder.process_start
            and me.boot_id
            and me.pid_namespace
            and (holder.host, holder.boot_id, holder.pid_namespace) == (me.host, me.boot_id, me.pid_namespace)
        )

    def is_stale(self, holder: LeaseOwner, location: str | None = None) -> bool:
        """Dead at once when its process is visible and gone (or its pid reused); else not renewed in time."""
        if self._same_process_space(holder):
            return process_start(holder.pid) != holder.process_start
        return self._expired(location or self.location)

    def _expired(self, location: str) -> bool:
        """Not renewed within the timeout, by the filesystem's clock."""
        return (self._filesystem_now() - self.storage.modification_time(location)) / 1000.0 > self.timeout

    def _settled_holder(self, attempts: int = 10, pause: float = 0.2) -> LeaseOwner | None:
        """The holder, read again briefly while the file is unreadable: a lease just created may not be written."""
        for _ in range(attempts):
            holder = self.holder()
            if holder is not None:
                return holder
            time.sleep(pause)
        return None

    def _held(self, reason: str) -> LeaseHeldError:
        return LeaseHeldError(f"table {self.table}: {reason}")

    def acquire(self) -> TableLease:
        """Take the lease, taking over a stale one; fail fast naming the holder when it is live."""
        self.storage.mkdirs(self.state_directory)
        for _ in range(3):  # a lease released while we judged it: create again
            if self._create(self.location) or self._take_over():
                break
        else:
            raise self._held("its lease was taken and released repeatedly while this process tried; retry")
        self._read_back()
        self._thread = threading.Thread(target=self._renew, name=f"lease-{self.table}", daemon=True)
        self._thread.start()
        return self

    def _stale_identity(self) -> str | None:
        """The token of the stale lease there now (or an identity of an unreadable one); raise when it is live.

        None when the lease is gone meanwhile (its holder released it).
        """
        holder = self._settled_holder()
        if holder is None:
            modified = self._modified_or_none()
            if modified is None:
                return None
            if not self._expired(self.location):  # unreadable: judged by its age alone, never taken at once
                raise self._held(
                    f"its lease {self.location} cannot be read (being written, or damaged). Retry; a damaged lease "
                    f"is taken over once it has not been renewed for {self.timeout:.0f}s."
                )
            return f"unreadable-{modified}"
        if not self.is_stale(holder):
            raise LeaseHeldError(
                f"table {self.table} is being changed by another lakekeeper process ({holder.describe()}). "
                "Wait for it to finish; if that process is gone, its lease expires after "
                f"{self.timeout:.0f}s without renewal and the next run recovers the table."
            )
        return holder.token

    def _claim(self, stale: str) -> str:
        """Exclusively claim the takeover of the stale lease `stale`; only one process can hold a claim."""
        claim = child(self.state_directory, f"lease.takeover-{stale}")
        if self._create(claim):
            return claim
        busy = "another process{} is taking over its stale lease at this moment; retry"
        claimant = self._owner_of(claim)
        try:  # a claim is judged like a lease: its claimant's process, else its age (a torn claim: its age alone)
            dead = self.is_stale(claimant, claim) if claimant is not None else self._expired(claim)
            identity = claimant.token if claimant is not None else f"unreadable-{self.storage.modification_time(claim)}"
        except Exception:  # the claim vanished: its claimant finished (the lease is now its) or gave up
            raise self._held(busy.format("")) from None
        if not dead:
            raise self._held(busy.format(f" ({claimant.describe()})" if claimant is not None else ""))
        aside = f"{claim}.dead-{identity}"
        try:  # the claimant died mid-takeover: move its claim aside (keyed by its identity: one mover only)
            self.storage.rename_strict(claim, aside)
        except StorageError:
            raise self._held(busy.format("")) from None
        self._moved_what_was_judged(aside, claim, identity, busy.format(""))
        self.storage.delete(aside)
        if not self._create(claim):
            raise self._held(busy.format(""))
        return claim

    def _take_over(self) -> bool:
        """Replace the stale lease there by ours, exactly once among all the processes that judged it stale.

        False when there was no lease any more (released meanwhile): the caller creates one.
        """
        stale = self._stale_identity()
        if stale is None:
            return False
        kill_point(TAKEOVER_POINT)
        claim = self._claim(stale)
        try:
            holder = self.holder()
            now = holder.token if holder is not None else f"unreadable-{self._modified_or_none()}"
            if now != stale:
                raise self._held("another process took over its stale lease at the same moment; retry")
            retired = child(self.state_directory, f"lease.stale-{stale}")
            try:
                self.storage.rename_strict(self.location, retired)
            except StorageError:
                raise self._held("another process took over its stale lease at the same moment; retry") from None
            self._moved_what_was_judged(
                retired, self.location, stale, "another process took over its stale lease at the same moment; retry"
            )
            self.storage.delete(retired)
            if not self._create(self.location):
                raise self._held("another process took the lease at the same moment; retry")
            return True
        finally:
            if (claimant := self._owner_of(claim)) is not None and claimant.token == self.me.token:
                self.storage.delete(claim)

    def _moved_what_was_judged(self, moved: str, origin: str, identity: str, why: str) -> None:
        """Read back what a takeover rename moved: when it is not the lease or claim judged stale (`identity`) but a
        newer one another taker created meanwhile, put it back and give up, so that one stays the only winner."""
        owner = self._owner_of(moved)
        now = owner.token if owner is not None else f"unreadable-{self.storage.modification_time(moved)}"
        if now != identity:
            self.storage.rename_strict(moved, origin)
            raise self._held(why)

    def _modified_or_none(self) -> int | None:
        try:
            return self.storage.modification_time(self.location)
        except Exception:  # gone
            return None

    def _read_back(self) -> None:
        """The lease file now names us (a taker that raced us would have replaced it); else fail naming who."""
        holder = self.holder()
        if holder is None or holder.token != self.me.token:
            now = f" ({holder.describe()})" if holder is not None else ""
            raise self._held(f"another process{now} took the lease at the same moment; retry")

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
