"""Every status vocabulary of the engine, as enums whose values are the strings journals and reports carry."""

from __future__ import annotations

from enum import Enum


class Vocabulary(str, Enum):
    """A str enum that prints, formats, hashes and serialises as its value (journals stay plain JSON)."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    __hash__ = str.__hash__


class RunKind(Vocabulary):
    """What a journaled run does to its units."""

    COMPACT = "compact"  # replace each unit's files by a rewritten copy; the originals go to the backup
    ROLLBACK = "rollback"  # put a compaction's originals back from its backup
    RETENTION = "retention"  # drop old partitions: metastore entry, then data (to the Trash)
    MERGE = "merge"  # copy old fine partitions into a coarse one of a merged table, behind a union view


class Operation(Vocabulary):
    """What a history record says was done (`protocol/history.py`): a run's kind, or what it served."""

    COMPACT = "compact"
    ARCHIVE = "archive"  # a compaction run recompressing archive-aged partitions
    ROLLBACK = "rollback"
    RETENTION = "retention"
    MERGE = "merge"
    RECOVER = "recover"  # an interrupted run finished or undone by recovery
    CLEANUP = "cleanup"


class RunStep(Vocabulary):
    """Journal records about the run as a whole."""

    PLAN = "plan"
    BACKUP = "backup"
    DONE = "done"


class UnitState(Vocabulary):
    """A unit's state in its run's journal, in protocol order. Before SWAPPING a crash rolls it back; from SWAPPING
    on it rolls forward."""

    PLANNED = "planned"
    WRITTEN = "written"
    BACKED_UP = "backed_up"
    SWAPPING = "swapping"
    INSTALLED = "installed"
    COMMITTED = "committed"
    FAILED = "failed"
    ABORTED = "aborted"
    ROLLED_BACK = "rolled_back"
    # A retention run's partition: DROPPING (intent, with the partition's identity) -> UNREGISTERED (metastore entry
    # gone, data kept) -> DROPPED (data in the Trash). A crash before DROPPING changed nothing (recover aborts the
    # unit); from DROPPING on recover rolls forward, unless the partition was re-added since (then left alone).
    DROPPING = "dropping"
    UNREGISTERED = "unregistered"
    DROPPED = "dropped"
    # A merge run's period (`protocol/merge.py`): WRITTEN (copy verified) -> PENDING (the view hides the period from
    # the merged side) -> REGISTERED (the copy is the merged table's partition) -> SWITCHED (the view reads the
    # period from the merged table: from here recover rolls forward) -> CLEARED (the planned fine files gone) ->
    # MERGED (the view unfiltered again). Before SWITCHED recover rolls back to ROLLED_BACK.
    PENDING = "pending"
    REGISTERED = "registered"
    SWITCHED = "switched"
    CLEARED = "cleared"
    MERGED = "merged"


TERMINAL = frozenset(
    {
        UnitState.COMMITTED,
        UnitState.FAILED,
        UnitState.ABORTED,
        UnitState.ROLLED_BACK,
        UnitState.DROPPED,
        UnitState.MERGED,
    }
)
# INSTALLED: a per-unit step of compaction journals written before batched commits, and of rollbacks.
SWAP_BEGUN = frozenset({UnitState.SWAPPING, UnitState.INSTALLED})


class UnitStatus(Vocabulary):
    """How an operation ended for one unit (a result, not a journal state)."""

    COMPACTED = "compacted"
    SKIPPED = "skipped"
    FAILED = "failed"
    SUSPENDED = "suspended"  # not tried: it failed `suspend_after_failures` runs in a row (`protocol/suspension.py`)


class PlanStatus(Vocabulary):
    """The plan's decision for a unit or a table."""

    NEEDS_COMPACTION = "NEEDS COMPACTION"
    OK = "OK"
    SKIPPED = "SKIPPED"
    SUSPENDED = "SUSPENDED"  # failed too many runs in a row: left alone until resumed (`protocol/suspension.py`)


class Recovery(Vocabulary):
    """What recovery did with an interrupted unit."""

    ROLLED_FORWARD = "rolled forward"
    ROLLED_BACK = "rolled back"


class ProgressStep(Vocabulary):
    """What a progress event reports (`plan/progress.py`): a run's plan, a batch, a unit's steps, a wait."""

    PLANNED = "planned"  # the run's units to compact, batches and bytes
    BATCH = "batch"  # a batch starts: its units and bytes
    WAITING = "waiting"  # for a writer, a long Spark job
    WRITTEN = "written"
    VERIFIED = "verified"
    SWAPPED = "swapped"
    COMMITTED = "committed"
    SKIPPED = "skipped"
    FAILED = "failed"
    RECOVERED = "recovered"  # an interrupted run's unit finished or undone
    RESTORED = "restored"  # a rollback's unit
    CLEANED = "cleaned"  # a backup dropped (or kept) by cleanup
