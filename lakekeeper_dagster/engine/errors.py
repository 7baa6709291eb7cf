"""Errors the engine raises for a whole table: each says what, where and what to do."""

from __future__ import annotations


class CompactionError(RuntimeError):
    """A table or partition cannot be compacted, rolled back, cleaned up or recovered; nothing was changed."""


class LeaseHeldError(CompactionError):
    """Another lakekeeper process holds the table's lease."""
