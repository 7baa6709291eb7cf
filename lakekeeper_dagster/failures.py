"""The one place engine and resource errors become Dagster failures."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from lakekeeper_dagster.engine.errors import LakekeeperError
from spark_resources.errors import ResourceError


@contextmanager
def engine_failures() -> Iterator[None]:
    """Fail the step with the error's message (what, where, what to do) rather than a stack trace, for every error
    the engine or the resource layer raises on purpose."""
    try:
        yield
    except (LakekeeperError, ResourceError) as error:
        raise dg.Failure(description=str(error)) from None
