"""Stopping a server process this package started (a metastore, a test cluster's JVMs): done only once it is gone."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

KILLED_WITHIN = 10.0  # seconds for a SIGKILLed JVM to release its memory and sockets


def stop_process(pid: int, timeout: float) -> None:
    """SIGTERM, then SIGKILL after `timeout` seconds; returns once the process is gone (its port free), or
    KILLED_WITHIN seconds after the SIGKILL."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if not gone_within(pid, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        gone_within(pid, KILLED_WITHIN)


def gone_within(pid: int, timeout: float) -> bool:
    """Whether process `pid` exits within `timeout` seconds. A child of this process is reaped; an exited process
    another parent has not reaped yet counts as gone once it is a zombie with no thread left (its files, sockets
    included, are closed only when its last thread exits)."""
    deadline = time.monotonic() + timeout
    while True:
        _reap(pid)
        try:
            status = dict(
                line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line
            )
        except OSError:
            return True
        if status["State"].split()[0] == "Z" and status["Threads"].strip() == "1":
            _reap(pid)  # exited since the first look: reaped now when ours
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def _reap(pid: int) -> None:
    """Collect a child that exited, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
