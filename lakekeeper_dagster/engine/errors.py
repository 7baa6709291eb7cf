"""The engine's errors: one base, so the CLI and the Dagster surface map every refusal to a clear message in one place.

Every message says what (table, partition, setting), what happened to the data (usually: nothing was changed) and
what to do.
"""

from __future__ import annotations


class LakekeeperError(Exception):
    """Base of every error the engine raises on purpose."""


class ConfigError(LakekeeperError, ValueError):
    """The configuration file, a setting in it or a command-line value is not valid."""


class CatalogError(LakekeeperError, LookupError):
    """A table, database or partition was not found, or the metastore could not be read."""


class StorageError(LakekeeperError, OSError):
    """A filesystem operation failed or would be unsafe."""


class OperationError(LakekeeperError, RuntimeError):
    """An operation (compaction, rollback, cleanup, recovery) refused or stopped; the message says what changed."""


class LeaseHeldError(OperationError):
    """Another lakekeeper process holds the table's lease."""


class UnitFailure(LakekeeperError):
    """One unit could not be processed; the live data is untouched and the run goes on with the other units."""
