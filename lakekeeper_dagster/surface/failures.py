"""The one place engine and resource errors become Dagster failures."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import dagster as dg

from lakekeeper_dagster.engine.errors import LakekeeperError
from lakekeeper_dagster.engine.ops.options import UnitResult
from lakekeeper_dagster.engine.statuses import UnitStatus
from spark_resources.errors import ResourceError

ENGINE_ERRORS = (LakekeeperError, ResourceError)  # the errors the engine or the resource layer raises on purpose


def fail_for_tables(failed: dict[str, str], metadata: dict) -> None:
    """Fail the step once, naming every table whose work failed (`db.table` -> its error), with the `metadata` of
    the work done on the others; nothing when none failed."""
    if failed:
        lines = [f"{table}: {error}" for table, error in failed.items()]
        raise dg.Failure(description=f"{len(failed)} table(s) failed:\n" + "\n".join(lines), metadata=metadata)


def partitions_not(verb: str, failed: dict[str, str]) -> str:
    """A table's error when some of its partitions failed: how many, and each with its reason."""
    return f"{len(failed)} partition(s) not {verb}: " + "; ".join(f"{p}: {why}" for p, why in failed.items())


@contextmanager
def engine_failures() -> Iterator[None]:
    """Fail the step with the error's message (what, where, what to do) rather than a stack trace, for every error
    the engine or the resource layer raises on purpose."""
    try:
        yield
    except ENGINE_ERRORS as error:
        raise dg.Failure(description=str(error)) from None


def fail_on_failed_units(results: Iterable[UnitResult], what: str) -> None:
    """Fail the step when a unit failed, naming each with its reason after `what` (`unit(s) of D.T failed`);
    called once the run's figures are recorded."""
    failed = [r for r in results if r.status == UnitStatus.FAILED]
    if failed:
        raise dg.Failure(
            description=f"{len(failed)} {what}: "
            + "; ".join(f"{r.partition or '(table)'}: {r.reason}" for r in failed)[:4000]
        )
