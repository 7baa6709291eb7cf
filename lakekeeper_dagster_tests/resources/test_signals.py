"""The test processes' signal dispositions: what every process they start inherits."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from lakekeeper_dagster_tests.tables import REPO

PROBE = textwrap.dedent(
    """
    import signal
    from dagster._utils.interrupts import capture_interrupts
    def test_probe():
        with capture_interrupts():  # what an in-process Dagster run does
            pass
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN
    """
)


@pytest.mark.pure
def test_a_suite_started_as_a_background_job_never_makes_its_children_ignore_sigterm(tmp_path):
    """pytest started with SIGINT ignored (as `sh` starts a background job) must not leave SIGTERM ignored after an
    in-process Dagster run: the metastores, daemons and CLIs it starts then would not stop on SIGTERM."""
    (tmp_path / "test_probe.py").write_text(PROBE)
    probe = str(tmp_path / "test_probe.py")
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "lakekeeper_dagster_tests.conftest",
        probe,
    ]
    ignoring_sigint = f"import os, signal; signal.signal(signal.SIGINT, signal.SIG_IGN); os.execv(*{(argv[0], argv)!r})"
    done = subprocess.run(
        [sys.executable, "-c", ignoring_sigint],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
