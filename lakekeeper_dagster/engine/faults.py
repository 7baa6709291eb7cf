"""Fault injection points, for tests that provoke crashes and corrupt outputs for real.

`LAKEKEEPER_FAULT=kill@<point>` kills the process with SIGKILL when it reaches `<point>` (a journal step, or a
step of the swap: `retiring` (swap guards passed, right before the retire rename), `retired`, `installed_dir`,
`installed`; `carrying_kept` after each kept (large) file moved from the retired directory into the incoming one,
and back when a swap is undone, `kept_carried` once they all are, right before the install rename; `copy_retired`
after a rollback retired the compacted copy; a retention run's partition: `dropping` (its intent journaled),
`unregistered` (its metastore entry removed, data kept), `dropped` (its directory moved away);
a merge run's period (`protocol/merge.py`): `written` (its copy verified), `pending`, `registered`, `switched`,
`cleared`, `merged`; `clearing`: a planned fine partition checked, before its planned files are taken aside;
`held`: a fine partition's planned files taken aside, before the next partition is checked; `undoing`: a replaced
fine partition found and the period's undoing journaled, before any taken file goes back; `dropped`: a fine
partition's directory removed, before it is unregistered;
`record_written:<step>` between writing a
journal record's temporary file and renaming it into place;
`lease_judged_stale` between judging a lease stale and claiming its takeover). Recovery passes the same points, so
a recovery can be killed too;
`LAKEKEEPER_FAULT=sleep@<point>:<seconds>` pauses there (to hold a table's lease while another process tries, or
to let a test change files at that moment), after printing `lakekeeper fault: sleeping at <point>` on stderr;
`LAKEKEEPER_FAULT=pause@<point>:<file>` pauses there until `<file>` exists (at most `PAUSE_AT_MOST_SECONDS`), after
printing `lakekeeper fault: pausing at <point> until <file> exists`: a test acts at that moment, then creates the
file, so the run goes on as soon as the test is done, however loaded the machine;
`LAKEKEEPER_FAULT=fail@<point>` raises `InjectedFault` at a `fail_point(<point>)` (`attributes`: setting the
attributes of a staged directory or file fails; `observations_recorded`: an observation run fails after recording;
`backlog_kept`: it fails between keeping a table's backlog count and its figures; `history_appended`: a history
flush fails right after a pending file's records landed in the history table, also a kill point);
`LAKEKEEPER_FAULT=drop-staged-file` deletes one file of the temporary output before verification (of every unit;
`drop-staged-file@<partition>`: of that partition only);
`LAKEKEEPER_FAULT=drop-input-file` deletes one input file after its footer was read, before Spark reads it.
`LAKEKEEPER_FAULT=drop-concatenated-row-groups` makes a byte-level concatenation leave out its last input
(`rewrite/concat.py`).
Several faults are separated by `;` (`sleep@retiring:4;kill@installed_dir`). Unset (the default), every point is a
no-op.
"""

from __future__ import annotations

import os
import signal
import sys
import time

ENV = "LAKEKEEPER_FAULT"
PAUSE_AT_MOST_SECONDS = 600.0


def _faults() -> list[str]:
    """The faults asked for: `LAKEKEEPER_FAULT`, several separated by `;` (e.g. a pause, then a kill)."""
    return [f for f in os.environ.get(ENV, "").split(";") if f]


def kill_point(point: str) -> None:
    """Die here, like a crashed driver (or pause), when the environment asks for it."""
    for fault in _faults():
        if fault == f"kill@{point}":
            os.kill(os.getpid(), signal.SIGKILL)
        if fault.startswith(f"sleep@{point}:"):
            print(f"lakekeeper fault: sleeping at {point}", file=sys.stderr, flush=True)
            time.sleep(float(fault.rsplit(":", 1)[1]))
        if fault.startswith(f"pause@{point}:"):
            release = fault[len(f"pause@{point}:") :]
            print(f"lakekeeper fault: pausing at {point} until {release} exists", file=sys.stderr, flush=True)
            deadline = time.monotonic() + PAUSE_AT_MOST_SECONDS
            while not os.path.exists(release) and time.monotonic() < deadline:
                time.sleep(0.05)


class InjectedFault(Exception):
    """The failure a `fail@<point>` fault raises."""


def fail_point(point: str) -> None:
    """Fail here, like a refused filesystem call, when the environment asks for it."""
    if f"fail@{point}" in _faults():
        raise InjectedFault(f"injected failure at {point}")


def wants(fault: str) -> bool:
    return fault in _faults()
