"""The code location's state: the managed tables' metadata as last read from the metastore, kept as JSON in the Dagster
instance's defs state storage (Dagster's state-backed definitions, see `lakekeeper_dagster.defs.managed_tables`), so
that every load that must not read the metastore (a run worker, a production code server) or cannot (the metastore
is down) builds its definitions from a stored version, with no metastore call and no JVM.

One state key per selection of tables (`state_key`); each refresh stores a new version under it. A run worker
rebuilds from exactly the version its run was planned with (Dagster pins it in the run's execution plan snapshot).
"""

from __future__ import annotations

import hashlib
import json
import logging
import tempfile
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg

from lakekeeper_dagster.config import LakekeeperConfig, config_path
from lakekeeper_dagster.engine.hive.model import Column, TableInfo
from lakekeeper_dagster.surface.tables import REFRESH_HOW, ManagedTables

LOCATION_NAME = "lakekeeper_dagster"  # workspace.yaml and [tool.dg.project] code_location_name
STATE_FORMAT = 1
TUPLE_FIELDS = ("partition_columns", "bucket_columns", "sort_columns")
DOWN_TODO = (
    "the jobs stay available but fail until it answers. Start it (`lakekeeper-dagster metastore start` for the "
    "local one) or fix metastore.uri / LAKEKEEPER_METASTORE_URI, then reload the code location"
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocationState:
    """The managed tables, when they were read from the metastore, and what the user must be told (or None)."""

    managed: ManagedTables
    read_at: str | None
    notice: str | None = None


class StateUnreadable(Exception):
    """The managed tables could not be read to refresh the state (the message says why); the last stored version
    stays in use."""


def state_key(config: LakekeeperConfig) -> str:
    """The defs state key of this selection of tables (another selection has its own; the metastore a version was
    read from is in the version, and a load from another one says so: `other_metastore_notice`). Two locations
    reading one selection from two metastores must not share an instance."""
    identity = json.dumps(config.tables.model_dump(mode="json"), sort_keys=True)
    return f"lakekeeper_dagster/tables-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"


def read_at_now(config: LakekeeperConfig) -> str:
    """When and from which metastore a state is read."""
    return f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} from {config.metastore.uri}"


def other_metastore_notice(config: LakekeeperConfig, read_at: str) -> str | None:
    """What to do when the stored state was read from another metastore than the one `config` names (None: the
    same one). The state key names the table selection only: a location pointed at another metastore (or one
    that moved) keeps its state until the next refresh."""
    _, _, uri = read_at.partition(" from ")
    if uri == config.metastore.uri:
        return None
    return (
        f"the managed tables were read from the Hive Metastore at {uri}, but this location uses "
        f"{config.metastore.uri}: they may not be its tables; {REFRESH_HOW}"
    )


def undownloadable_state(error: Exception) -> LocationState:
    """The state of a load whose pinned version cannot be downloaded from the instance's defs state storage (stored
    by another host in its own local folder): 0 tables, never another version than the one pinned. Logs it."""
    notice = (
        f"the stored state of the managed tables cannot be read from this instance's defs state storage ({error}): "
        "0 tables managed. With several hosts (a shared PostgreSQL instance), set defs_state_storage in dagster.yaml "
        f"to a base_path every host reads (README, PostgreSQL), then {REFRESH_HOW}"
    )
    return _logged(LocationState(ManagedTables(), None, notice))


def no_instance_state() -> LocationState:
    """The state of a load in a process with no Dagster instance (DAGSTER_HOME unset, none entered): 0 tables, and
    why. Logs it."""
    notice = (
        "this process has no Dagster instance (DAGSTER_HOME is not set), so no stored state of the managed tables: "
        "0 tables managed; set DAGSTER_HOME to the instance the code location uses"
    )
    return _logged(LocationState(ManagedTables(), None, notice))


def unpinned_state() -> LocationState:
    """The state of a load with no version pinned while one is stored: a run planned before any was, or a command
    that reconstructs the location in its own process (`dagster asset materialize -m`). 0 tables; logs it."""
    notice = (
        "this load has no stored state of the managed tables pinned, though the instance has one (a run planned "
        "before it was stored, or `dagster asset materialize -m`, which reconstructs the location without one): 0 "
        "tables managed; launch through a code server instead (`dagster job launch -m lakekeeper_dagster.definitions "
        "-j JOB`, or the UI)"
    )
    return _logged(LocationState(ManagedTables(), None, notice))


def state_to_json(managed: ManagedTables, read_at: str) -> str:
    """`read_at` says when and from which metastore the tables were read."""
    return json.dumps(
        {
            "format": STATE_FORMAT,
            "read_at": read_at,
            "tables": [asdict(info) for info in managed.tables],
            "skipped": managed.skipped,
        },
        indent=1,
    )


def state_from_json(text: str) -> tuple[ManagedTables, str]:
    data = json.loads(text)
    tables = []
    for item in data["tables"]:
        columns = tuple(Column(**c) for c in item.pop("columns"))
        tables.append(TableInfo(columns=columns, **{k: tuple(v) if k in TUPLE_FIELDS else v for k, v in item.items()}))
    return ManagedTables(tables=tables, skipped=dict(data["skipped"])), data["read_at"]


def store_state(instance: dg.DagsterInstance, config: LakekeeperConfig, managed: ManagedTables) -> str:
    """Store `managed` as the newest version of the selection's state in the instance's defs state storage (the
    next code-server load builds from it); returns the version."""
    storage = instance.defs_state_storage
    if storage is None:
        raise StateUnreadable("this Dagster instance has no defs state storage: the state cannot be stored")
    version = str(uuid.uuid4())
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "state"
        path.write_text(state_to_json(managed, read_at_now(config)), encoding="utf-8")
        storage.upload_state_from_path(state_key(config), version=version, path=path)
    return version


RELOAD = """mutation ($name: String!) { reloadRepositoryLocation(repositoryLocationName: $name) { __typename
  ... on WorkspaceLocationEntry { locationOrLoadError { __typename ... on PythonError { message } } }
  ... on PythonError { message } ... on UnauthorizedError { message } ... on ReloadNotSupported { message }
  ... on RepositoryLocationNotFound { message } } }"""


def reload_location(webserver: str, location: str) -> str:
    """Ask the webserver at `webserver` to reload the code location (it then builds from the newest stored state);
    says what happened."""
    later = "the code location shows it from its next load (Deployment -> Reload, or a restart)"
    if not webserver:
        return f"no webserver to ask: {later}"
    request = urllib.request.Request(
        f"{webserver.rstrip('/')}/graphql",
        data=json.dumps({"query": RELOAD, "variables": {"name": location}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            answer = json.loads(response.read())["data"]["reloadRepositoryLocation"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"the webserver at {webserver} did not reload the code location ({error}): {later}"
    loaded = answer.get("locationOrLoadError") or answer
    if answer["__typename"] != "WorkspaceLocationEntry" or loaded["__typename"] == "PythonError":
        return f"the webserver at {webserver} could not reload {location}: {loaded.get('message')}; {later}"
    return f"the webserver at {webserver} reloaded {location}"


def register_pool_limits(instance: dg.DagsterInstance, pools: Iterable[str]) -> list[str]:
    """Give each pool without a limit row its row at the instance's `default_limit`; returns the pools added.

    Dagster 1.13 enforces a pool's default limit only from the dequeue tick after the first one that sees the pool:
    two runs of a new table queued before that tick would both start. Pools that already have a row (a limit set
    by `dagster instance concurrency set`, or registered before) are left as they are.
    """
    if instance.global_op_concurrency_default_limit is None:
        return []  # the instance sets no default limit: nothing to enforce (see dagster_instance.yaml)
    storage = instance.event_log_storage
    known = set(storage.get_concurrency_keys())
    added = sorted(set(pools) - known)
    for pool in added:
        storage.initialize_concurrency_limit_to_default(pool)
    return added


def none_managed_notice(config: LakekeeperConfig, managed: ManagedTables) -> str | None:
    """What to set when the location manages no table (None when it manages some)."""
    if managed.tables:
        return None
    path, _ = config_path()
    where = f"in {path.absolute()}" if path.exists() else f"in a config file ({path.absolute()} does not exist)"
    skipped = f" ({len(managed.skipped)} table(s) selected but not manageable, see the load's log)"
    return (
        f"0 tables managed{skipped if managed.skipped else ''}: set tables.databases (or tables.tables) {where}, "
        f"then {REFRESH_HOW}; `lakekeeper-dagster demo create` writes one for the demo database"
    )


def location_state(config: LakekeeperConfig, stored: str | None, problem: str | None) -> LocationState:
    """The state a load builds from: the stored version's text (None: none stored yet) and, when this load tried
    to refresh it and could not, why. Logs the notice."""
    if stored is None:
        if problem:
            notice = f"{problem} and no state was saved yet: 0 tables managed; {DOWN_TODO}"
        else:  # nothing stored when this load (or the load its run was planned with) pinned its version
            notice = f"no state of the managed tables is stored in this instance yet: 0 tables managed; {REFRESH_HOW}"
        return _logged(LocationState(ManagedTables(), None, notice))
    managed, read_at = state_from_json(stored)
    notice = none_managed_notice(config, managed) or other_metastore_notice(config, read_at)
    if problem:
        last = f"the {len(managed.tables)} table(s) are the last known state, read at {read_at}"
        notice = f"{problem}: {last}; {DOWN_TODO}"
    return _logged(LocationState(managed, read_at, notice))


def _logged(state: LocationState) -> LocationState:
    if state.notice:
        log.warning("%s", state.notice)
    return state
