"""The one place engine and resource errors become Dagster failures."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from lakekeeper_dagster.engine.errors import LakekeeperError
from spark_resources.errors import ResourceError

ENGINE_ERRORS = (LakekeeperError, ResourceError)  # the errors the engine or the resource layer raises on purpose


def fail_for_tables(failed: dict[str, str], metadata: dict) -> None:
    """Fail the step once, naming every table whose work failed (`db.table` -> its error), with the `metadata` of
    the work done on the others; nothing when none failed."""
    if failed:
        lines = [f"{table}: {error}" for table, error in failed.items()]
        raise dg.Failure(description=f"{len(failed)} table(s) failed:\n" + "\n".join(lines), metadata=metadata)


@contextmanager
def engine_failures() -> Iterator[None]:
    """Fail the step with the error's message (what, where, what to do) rather than a stack trace, for every error
    the engine or the resource layer raises on purpose."""
    try:
        yield
    except ENGINE_ERRORS as error:
        raise dg.Failure(description=str(error)) from None
