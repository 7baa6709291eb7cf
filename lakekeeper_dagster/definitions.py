"""The code location's Definitions, built from the YAML config and the managed tables' state.

`defs` loads the project's dg defs folder (`lakekeeper_dagster/defs`, `dg.load_from_defs_folder`), whose
`ManagedTablesComponent` is a `dg.StateBackedComponent` keeping the managed tables' metadata in the Dagster
instance's defs state storage (VERSIONED_STATE_STORAGE; see `surface/state.py`; the definitions themselves are
`surface/build.py`). Chosen over
`Definitions.with_reconstruction_metadata` with a reconstruction branch: that branch spares the run workers only,
while every code-server initialization (the webserver's, the daemon's, each restart) would still start a JVM and read
the metastore; with versioned state only an explicit refresh (refresh_tables_job, `dg utils refresh-defs-state`,
`dagster dev` loads) reads it, every other load builds from a stored version, and a run worker from exactly the
version its run was planned with. The cost: the state lives in the instance (a shared `defs_state_storage` for
processes in other containers), and a production code server shows new tables only after a refresh."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import dagster as dg

from lakekeeper_dagster.surface.state import LOCATION_NAME


def registered_under_another_name(record: logging.LogRecord) -> bool:
    """False for Dagster's warning that this module, loaded with `-m`, registers the location under its own name
    rather than LOCATION_NAME (kept: Dagster persists it): that name only finds app-managed components, and this
    location has none. A logging filter of the component tree's logger, matching the warning's exact words."""
    other = f"The code location name {LOCATION_NAME!r} configured on this project does not match the name {__name__!r} "
    return not record.getMessage().startswith(other)


@dg.definitions
def defs() -> dg.Definitions:
    """The project's defs folder: the managed tables' component, built from the stored state."""
    # The defs folder adds its metadata to every asset check, which turns our AssetChecksDefinitions into plain
    # AssetsDefinitions; Dagster turns them back when it reads the checks, passing the beta `execution_type`
    # parameter, and warns on every code-server load. That one warning is Dagster's own conversion, not a beta
    # feature this location uses: it is filtered, by its exact message.
    warnings.filterwarnings(
        "ignore", message="Parameter `execution_type` of function `AssetsDefinition.__init__`", category=dg.BetaWarning
    )
    logging.getLogger("dagster.components.core.component_tree").addFilter(registered_under_another_name)
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
