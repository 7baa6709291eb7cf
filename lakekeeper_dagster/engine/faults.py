"""Fault injection points, for tests that provoke crashes and corrupt outputs for real.

`LAKEKEEPER_FAULT=kill@<point>` kills the process with SIGKILL when it reaches `<point>` (a journal step, or a
step of the swap: `retired`, `installed_dir`, `installed`; `record_written:<step>` between writing a journal
record's temporary file and renaming it into place; `lease_judged_stale` between judging a lease stale and
claiming its takeover). Recovery passes the same points, so a recovery can be killed too;
`LAKEKEEPER_FAULT=sleep@<point>:<seconds>` pauses there (to hold a table's lease while another process tries);
`LAKEKEEPER_FAULT=drop-staged-file` deletes one file of the temporary output before verification.
Unset (the default), every point is a no-op.
"""

from __future__ import annotations

import os
import signal
import time

ENV = "LAKEKEEPER_FAULT"


def kill_point(point: str) -> None:
    """Die here, like a crashed driver (or pause), when the environment asks for it."""
    fault = os.environ.get(ENV, "")
    if fault == f"kill@{point}":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault.startswith(f"sleep@{point}:"):
        time.sleep(float(fault.rsplit(":", 1)[1]))


def wants(fault: str) -> bool:
    return os.environ.get(ENV) == fault
