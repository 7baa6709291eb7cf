"""The code location's state: the managed tables' metadata as last read from the metastore, kept as JSON so that a
load that must not read the metastore (a run worker) or cannot (the metastore is down) builds the same definitions.

The code server's load reads the metastore, saves the state under `<metastore.home>/state/` and names the file in
the environment variable LAKEKEEPER_DEFINITIONS_STATE; the run workers it starts inherit the variable and load from
the file, with no metastore call and no JVM. With the metastore down the last saved state is used (or none: 0
tables), and the notice says so.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from lakekeeper_dagster.config import LakekeeperConfig, config_path
from lakekeeper_dagster.engine.errors import LakekeeperError
from lakekeeper_dagster.engine.hive.model import Column, TableInfo
from lakekeeper_dagster.managed import ManagedTables
from spark_resources.errors import ResourceError
from spark_resources.metastore import parse_thrift_uri, port_is_open

STATE_ENV = "LAKEKEEPER_DEFINITIONS_STATE"
STATE_FORMAT = 1
TUPLE_FIELDS = ("partition_columns", "bucket_columns", "sort_columns")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocationState:
    """The managed tables, when they were read from the metastore, and what the user must be told (or None)."""

    managed: ManagedTables
    read_at: str | None
    notice: str | None = None


def state_file(config: LakekeeperConfig) -> Path:
    """The state of this selection of tables (another selection has its own file; the metastore it was read from
    is in the file). Two locations reading one selection from two metastores must not share `metastore.home`."""
    identity = json.dumps(config.tables.model_dump(mode="json"), sort_keys=True)
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return Path(config.metastore.home).absolute() / "state" / f"definitions-{digest}.json"


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


def save_state(path: Path, managed: ManagedTables, read_at: str) -> None:
    """Write the state atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(state_to_json(managed, read_at), encoding="utf-8")
    os.replace(partial, path)


def read_saved_state(path: Path) -> tuple[ManagedTables, str] | None:
    """The saved state, or None when there is none (or it cannot be read: then the load says so)."""
    try:
        return state_from_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("the saved state %s cannot be read (%s); it is ignored", path, error)
        return None


def metastore_reachable(uri: str) -> bool:
    return any(port_is_open(*parse_thrift_uri(one)) for one in uri.split(","))


def none_managed_notice(config: LakekeeperConfig, managed: ManagedTables) -> str | None:
    """What to set when the location manages no table (None when it manages some)."""
    if managed.tables:
        return None
    path, _ = config_path()
    where = f"in {path.absolute()}" if path.exists() else f"in a config file ({path.absolute()} does not exist)"
    skipped = f" ({len(managed.skipped)} table(s) selected but not manageable, see the load's log)"
    return (
        f"0 tables managed{skipped if managed.skipped else ''}: set tables.databases (or tables.tables) {where}, "
        "then reload the code location; `lakekeeper-dagster demo create` writes one for the demo database"
    )


def current_state(config: LakekeeperConfig, read: Callable[[], ManagedTables]) -> LocationState:
    """The state to build the definitions from: inherited from the code server (a run worker), else read from the
    metastore (and saved), else the last saved one when the metastore cannot be read. Logs the notice."""
    path = state_file(config)
    inherited = os.environ.get(STATE_ENV) == str(path) and read_saved_state(path)
    if inherited:
        managed, read_at = inherited
        return LocationState(managed, read_at, none_managed_notice(config, managed))
    problem = None
    if metastore_reachable(config.metastore.uri):
        try:
            managed = read()
        except (LakekeeperError, ResourceError) as error:
            uri = config.metastore.uri
            problem = f"the managed tables could not be read from the Hive Metastore at {uri}: {error}"
        else:
            read_at = f"{datetime.now(timezone.utc).isoformat(timespec='seconds')} from {config.metastore.uri}"
            save_state(path, managed, read_at)
            os.environ[STATE_ENV] = str(path)
            return _logged(LocationState(managed, read_at, none_managed_notice(config, managed)))
    state = _last_known(config, path, problem or f"the Hive Metastore at {config.metastore.uri} is unreachable")
    return _logged(state)


def _last_known(config: LakekeeperConfig, path: Path, problem: str) -> LocationState:
    todo = (
        "the jobs stay available but fail until it answers. Start it (`lakekeeper-dagster metastore start` for the "
        "local one) or fix metastore.uri / LAKEKEEPER_METASTORE_URI, then reload the code location"
    )
    saved = read_saved_state(path)
    if saved is None:
        return LocationState(ManagedTables(), None, f"{problem} and no state was saved yet: 0 tables managed; {todo}")
    managed, read_at = saved
    os.environ[STATE_ENV] = str(path)
    return LocationState(
        managed,
        read_at,
        f"{problem}: the {len(managed.tables)} table(s) are the last known state, read at {read_at} ({path}); {todo}",
    )


def _logged(state: LocationState) -> LocationState:
    if state.notice:
        log.warning("%s", state.notice)
    return state
