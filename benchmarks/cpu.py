"""Wall time and CPU seconds of a contender's whole process tree: its Python process and the JVM it starts.

pyspark never waits for its JVM (it dies when its stdin closes, after Python exits), so the JVM's CPU time would be
lost to `RUSAGE_CHILDREN`. Here the benchmark process becomes a child subreaper (Linux `prctl`): when the
contender's Python exits, its JVM is re-parented to us and we reap it with `wait4`, which returns its exact
resource usage (the JVM's own and that of anything it waited for, such as Spark's launcher). The contender runs in
its own process group, so only its own descendants are reaped (never the benchmark's own Spark JVM or metastore).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time

PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> bool:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _children_in_group(group: int) -> list[int]:
    """Our direct children in process group `group` (the contender's re-parented descendants)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and int(fields[2]) == group:
            found.append(int(entry))
    return found


def _wait(pid: int, deadline: float) -> tuple[int, os.struct_rusage | None]:
    """wait4 with a deadline (then SIGKILL): (exit code, resource usage)."""
    while True:
        reaped, status, usage = os.wait4(pid, os.WNOHANG)
        if reaped:
            return os.waitstatus_to_exitcode(status), usage
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            return os.waitstatus_to_exitcode(status), usage
        time.sleep(0.05)


def _seconds(usage: os.struct_rusage | None) -> float:
    return usage.ru_utime + usage.ru_stime if usage else 0.0


def run(command: list[str], timeout: float = 3600, **popen: object) -> tuple[int, float, dict]:
    """Run `command` (Popen keyword arguments as given): (exit code, wall seconds until it exited, CPU figures).

    The wall time is the contender's own process, as its user sees it; its JVM's shutdown after that is reaped
    but not timed. CPU figures: `cpu_python_s` (the contender process), `cpu_jvm_s` (its re-parented descendants:
    the JVM), `cpu_s` (both), `max_rss_mb` (the largest resident set among them), `python_rss_mb` and `jvm_rss_mb`
    (the peak resident set of the contender process and the largest of its JVM's); `cpu_measured` is false where
    the subreaper is not available (then the JVM's share is missing)."""
    complete = _become_subreaper()
    started = time.perf_counter()
    process = subprocess.Popen(command, process_group=0, **popen)  # type: ignore[call-overload]
    try:
        code, usage = _wait(process.pid, time.monotonic() + timeout)
    except BaseException:
        os.killpg(process.pid, signal.SIGKILL)
        raise
    wall = time.perf_counter() - started
    process.returncode = code  # reaped here, not by Popen
    others = [_wait(pid, time.monotonic() + 120)[1] for pid in _children_in_group(process.pid)]
    rss = [u.ru_maxrss for u in [usage, *others] if u]
    figures = {
        "cpu_python_s": round(_seconds(usage), 3),
        "cpu_jvm_s": round(sum(_seconds(u) for u in others), 3),
        "max_rss_mb": round(max(rss, default=0) / 1024, 1),
        "python_rss_mb": round(usage.ru_maxrss / 1024, 1) if usage else None,
        "jvm_rss_mb": round(max((u.ru_maxrss for u in others if u), default=0) / 1024, 1),
        "cpu_measured": complete,
    }
    figures["cpu_s"] = round(figures["cpu_python_s"] + figures["cpu_jvm_s"], 3)
    return code, wall, figures
