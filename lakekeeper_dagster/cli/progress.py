"""How the command line shows an operation's progress: a bar on a terminal, plain lines anywhere else.

The engine reports typed events (`engine/plan/progress.py`); here they become, on a terminal, a `rich` progress bar
(units done of the units to compact) with each event's line printed above it, and otherwise one plain line per
event, no bar and no terminal codes, for logs and pipes. Progress goes to stderr: stdout keeps the command's report.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as Bar

from lakekeeper_dagster.engine.plan.progress import Progress, ProgressEvent
from lakekeeper_dagster.engine.statuses import ProgressStep

DONE = frozenset({ProgressStep.COMMITTED, ProgressStep.FAILED, ProgressStep.RESTORED, ProgressStep.CLEANED})


@contextmanager
def shown(title: str, stream: TextIO | None = None) -> Iterator[Progress]:
    """A progress callback for an operation on `title` (a table), shown on `stream` (stderr) while it runs."""
    stream = sys.stderr if stream is None else stream
    if not stream.isatty():

        def line(event: ProgressEvent) -> None:
            print(event.describe(), file=stream, flush=True)

        yield line
        return
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Bar(*columns, TimeElapsedColumn(), console=Console(file=stream), transient=False) as bar:
        task = bar.add_task(title, total=None)

        def update(event: ProgressEvent) -> None:
            bar.console.print(event.describe(), markup=False, highlight=False)
            if event.step == ProgressStep.PLANNED:
                bar.update(task, total=event.units)
            elif event.step in DONE:
                bar.advance(task)

        yield update
