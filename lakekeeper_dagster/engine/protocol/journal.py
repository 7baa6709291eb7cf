"""The run journal: every step of a compaction or rollback, recorded durably before it happens.

A journal lives beside the table, in the table's hidden state directory, on the same filesystem as the data:
`<parent of table location>/.lakekeeper-<table dir>/journal/<run id>/`. Each record is a small JSON file
(`00000.json` is the plan, the rest are steps, each for one unit or for a batch of units), written whole under a
hidden temporary name (`.NNNNN.json.tmp-<token>`) and renamed into place; the rename refuses an existing record, so
two writers of one journal collide instead of interleaving. A crash leaves at worst a temporary file, which loading
ignores. A record that is nevertheless unreadable (written by an older version that wrote in place, or damaged)
is treated as absent, with a warning, wherever it is, and the run goes on after the highest record present. The
state of a run is the plan with its steps folded in.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from lakekeeper_dagster.engine.errors import StorageError
from lakekeeper_dagster.engine.faults import kill_point
from lakekeeper_dagster.engine.fs.locations import child, split_location
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.statuses import Operation, RunKind, RunStep, UnitState
from spark_resources.py4j import is_java_error

HIDDEN_PREFIX = ".lk-"
HELD_ROLE = "held"  # a merge's taken fine-partition files, beside their directory (`protocol/merge_clear.py`)
RECORD_WRITTEN_POINT = "record_written"  # fault point: a record's temporary file is written, not yet renamed

log = logging.getLogger(__name__)


def _unfenced(what: str) -> None:
    """The default fence of a journal: its writer's lease is checked elsewhere (or there is none)."""


def state_dir(table_location: str) -> str:
    """The table's hidden state directory (journals and lease), a sibling of its location."""
    parent, name = split_location(table_location)
    return child(parent, f".lakekeeper-{name}")


def new_run_id() -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def sibling(live: str, role: str, run_id: str) -> str:
    """A hidden sibling of a unit directory (`.lk-<role>-<run>-<name>`): never taken for a partition or data."""
    parent, name = split_location(live)
    return child(parent, f"{HIDDEN_PREFIX}{role}-{run_id}-{name}")


@dataclass
class UnitRecord:
    """One unit of a run: a partition (or a whole unpartitioned table) and the directories of its swap.

    The swap moves `live` to `retired` and `incoming` to `live`; files found in the retired directory that are not
    in `known` arrived after the snapshot and are carried over into the new live directory exactly once. `snapshot`
    holds each known file's `[size, modification time (ms)]`, so a file rewritten under the same name is told apart
    (empty in journals written before it was recorded). `kept` names the known files the run leaves as they are
    (a compaction's large files; a rollback's, the compaction's large files to bring back): the swap carries them
    from `retired` into `incoming` before installing it, so they stay in `live` (empty in older journals).
    """

    partition: str | None
    spec: dict[str, str | None] | None
    live: str
    incoming: str
    retired: str
    known: list[str]
    target_files: int = 0
    kept: list[str] = field(default_factory=list)
    snapshot: dict[str, list[int]] = field(default_factory=dict)
    state: UnitState = UnitState.PLANNED
    details: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.state = UnitState(self.state)  # a plain string when loaded from a record

    @property
    def label(self) -> str:
        return self.partition or "(whole table)"

    def retired_snapshot(self) -> dict[str, list[int] | None]:
        """The snapshot of the files the swap leaves in `retired` (the kept ones go back to `live`); an old journal
        without sizes and times gives None per name."""
        kept = set(self.kept)
        return {name: self.snapshot.get(name) for name in self.known if name not in kept}


@dataclass
class Journal:
    directory: str
    run_id: str
    kind: RunKind
    database: str
    table: str
    owner: str
    units: list[UnitRecord]
    backup_table: str | None = None
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    created_at: float = field(default_factory=time.time)
    done: bool = False
    next_seq: int = 0

    def __post_init__(self) -> None:
        self.kind = RunKind(self.kind)
        # Called with what is about to happen before every record and swap: recovery sets its lease's
        # `ensure_held`, so a process that lost the table's lease writes nothing more (not a field: never journaled).
        self.fence: Callable[[str], None] = _unfenced
        # What the history records of the run say was done (not journaled: recovery records `recover`).
        self.operation = Operation(self.kind.value)

    @classmethod
    def new(
        cls,
        table_location: str,
        database: str,
        table: str,
        run_id: str,
        kind: RunKind,
        owner: str,
        units: list[UnitRecord],
        backup_table: str | None = None,
    ) -> Journal:
        """A run's journal in the table's state directory (not written until `start`)."""
        directory = child(journal_root(table_location), run_id)
        return cls(directory, run_id, kind, database, table, owner, units, backup_table)

    def _write(self, storage: Storage, payload: dict) -> None:
        """Write the next record whole under a temporary name, then rename it into place (never onto a record)."""
        self.fence(f"journal record {self.next_seq} of run {self.run_id} ({payload['step']})")
        name = f"{self.next_seq:05d}.json"
        location = child(self.directory, name)
        temporary = child(self.directory, f".{name}.tmp-{uuid.uuid4().hex[:8]}")
        storage.write_text(temporary, json.dumps(payload, sort_keys=True), overwrite=False)
        kill_point(f"{RECORD_WRITTEN_POINT}:{payload['step']}")
        try:
            storage.rename_strict(temporary, location)
        except StorageError:
            storage.delete(temporary)
            if storage.exists(location):
                raise StorageError(f"journal record {location} exists: another process writes this journal") from None
            raise
        self.next_seq += 1

    def start(self, storage: Storage) -> None:
        """Write the plan record (record 0)."""
        plan = {k: v for k, v in asdict(self).items() if k not in ("directory", "done", "next_seq")}
        for unit in plan["units"]:  # a journal without large files kept stays readable by the release before them
            if not unit["kept"]:
                del unit["kept"]
        self._write(storage, {"step": RunStep.PLAN, "plan": plan})

    def record(self, storage: Storage, step: UnitState | RunStep, unit: int | None = None, **details) -> None:
        """Durably record `step` (for unit index `unit`, or the run) before acting on it."""
        self._write(storage, {"step": step, "unit": unit, "details": details, "at": time.time()})
        self._apply(step, unit, details)

    def record_units(self, storage: Storage, step: UnitState, details: dict[int, dict]) -> None:
        """Durably record `step` for several units at once (one record for a batch), before acting on it."""
        if not details:
            return
        payload = {str(i): d for i, d in details.items()}
        self._write(storage, {"step": step, "units": payload, "at": time.time()})
        for i, unit_details in details.items():
            self._apply(step, i, unit_details)

    def _apply(self, step: str, unit: int | None, details: dict) -> None:
        if unit is None:
            if step == RunStep.DONE:
                self.done = True
            elif step == RunStep.BACKUP:
                self.backup_table = details["backup_table"]
            return
        record = self.units[unit]
        record.state = UnitState(step)
        record.details.update(details)

    def committed_units(self) -> list[UnitRecord]:
        return [u for u in self.units if u.state == UnitState.COMMITTED]

    def paths(self) -> set[str]:
        """Every hidden directory this run may have created (a merge's held files beside each fine partition too)."""
        held = {sibling(f["location"], HELD_ROLE, self.run_id) for u in self.units for f in u.details.get("fine", ())}
        return {p.rstrip("/") for u in self.units for p in (u.incoming, u.retired)} | held

    @classmethod
    def load(cls, storage: Storage, directory: str) -> Journal:
        """Rebuild a run's state from its records; an unreadable record anywhere is skipped with a warning."""
        names = record_names(storage, directory)
        records = []
        for name in names:
            try:
                records.append(json.loads(storage.read_text(child(directory, name))))
            except Exception as error:  # torn or damaged: not JSON, not UTF-8, or failing its checksum
                if not isinstance(error, ValueError) and not is_java_error(error, "ChecksumException"):
                    raise
                log.warning("journal record %s is unreadable (torn?): treated as absent", child(directory, name))
        if not records or records[0].get("step") != RunStep.PLAN:
            raise StorageError(
                f"journal {directory} has no readable plan record, so the run it describes cannot be recovered "
                "automatically. Inspect its records and the table's hidden .lk- directories, then move it away."
            )
        try:
            plan = records[0]["plan"]
            units = [UnitRecord(**u) for u in plan.pop("units")]
            journal = cls(directory=directory, units=units, **plan)
            journal.next_seq = int(names[-1][:5]) + 1
            for entry in records[1:]:
                if "units" in entry:
                    for i, details in entry["units"].items():
                        journal._apply(entry["step"], int(i), details)
                else:
                    journal._apply(entry["step"], entry.get("unit"), entry.get("details", {}))
        except ValueError as error:  # a state or run kind this version does not know
            raise StorageError(
                f"journal {directory} holds a step this version of lakekeeper-dagster does not know ({error}); "
                "recover it with the version that wrote it. Nothing was changed."
            ) from None
        return journal


def record_names(storage: Storage, directory: str) -> list[str]:
    """The names of a journal's records, in order (`NNNNN.json`; temporary and checksum files are not records)."""
    names = storage.list_names(directory, directories=False)
    return sorted(n for n in names if n.endswith(".json") and n[:5].isdigit() and not n.startswith("."))


def journal_root(table_location: str) -> str:
    return child(state_dir(table_location), "journal")


def load_journals(storage: Storage, table_location: str) -> list[Journal]:
    """Every journal of the table, oldest first (a directory without any record is no run: see `unstarted_runs`)."""
    root = journal_root(table_location)
    return [
        Journal.load(storage, child(root, name))
        for name in storage.list_names(root, directories=True)
        if record_names(storage, child(root, name))
    ]


def unstarted_runs(storage: Storage, table_location: str) -> list[str]:
    """Journal directories without any record: runs killed before their plan was in place, which changed nothing."""
    root = journal_root(table_location)
    directories = [child(root, name) for name in storage.list_names(root, directories=True)]
    return [d for d in directories if not record_names(storage, d)]
