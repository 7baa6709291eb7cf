"""The managed Hive tables as a state-backed component (`dg.StateBackedComponent`, state in the instance's defs
state storage, VERSIONED_STATE_STORAGE): the one place the code location reads the metastore at load.

- A refresh (`dg utils refresh-defs-state`, the load under `dagster dev`/`dg dev` and its reloads, or
  refresh_tables_job, which stores a version itself) reads the managed tables through `read_managed_tables` and
  stores them as a new version of the selection's state, registering the new tables' pools in that instance.
- Every other load (a production code server, the daemon's, every run worker) builds from a stored version: no
  metastore call, no JVM. A run worker gets exactly the version its run was planned with, never a newer one: when
  its plan's load found nothing stored (Dagster pins "no version"), it builds 0 tables, as that load did. Dagster
  tells that case from a load with nothing pinned at all (`dagster asset materialize -m`, which reconstructs in its
  own process) only through its private DefinitionsLoadContext, so both build 0 tables (saying so when the instance
  stores a version: `unpinned_state`): the CLI materializes through `dagster job launch` (a code server's load,
  which pins the newest version).
- A load outside Dagster's own processes has no instance in context (`dagster asset list -m`, `dg list defs`, an
  imported `defs`): it builds from the newest version stored in DAGSTER_HOME's instance (0 tables, and why, without
  DAGSTER_HOME). Dagster says so only by the error its load raises (NO_STORAGE), caught before any state is read.
- A pinned version that cannot be downloaded (stored by another host in its local defs_state folder) builds 0
  tables with the reason on every job's page, instead of failing the location's load.
- A refresh that cannot read the metastore (down, or the read fails) falls back to the last stored version (or 0
  tables), with the reason on every job's page. The reason is kept for the process (`REFRESH_PROBLEMS`): a code
  server loads twice, initializing (the refresh) then reconstructing from what that load pinned, and the notice must
  survive into the definitions it serves.

No `from __future__ import annotations` here: dg reads the component's type from the loader's return annotation.
"""

import os
import tempfile
from pathlib import Path

import dagster as dg
from dagster.components import DefsStateConfig, DefsStateConfigArgs

from lakekeeper_dagster.config import LakekeeperConfig, load_config
from lakekeeper_dagster.engine.errors import LakekeeperError
from lakekeeper_dagster.surface.build import definitions_from_state, read_managed_tables
from lakekeeper_dagster.surface.state import (
    StateUnreadable,
    location_state,
    no_instance_state,
    read_at_now,
    register_pool_limits,
    state_key,
    state_to_json,
    undownloadable_state,
    unpinned_state,
)
from lakekeeper_dagster.surface.translator import translator_for
from spark_resources.errors import ResourceError
from spark_resources.hive_session import metastore_reachable

# How Dagster's load (DefinitionsLoadContext.state_path, StateBackedComponent.refresh_state) says that the process
# has no instance in context: its exact words, as no public API tells it.
NO_STORAGE = "without a StateStorage in context"
REFRESH_PROBLEMS: dict[str, str] = {}  # state key -> why this process's last refresh failed (gone once one succeeds)


class ManagedTablesComponent(dg.StateBackedComponent):
    """The assets, checks, jobs, schedules and sensors of the tables `config` manages, built from the stored state."""

    def __init__(self, config: LakekeeperConfig):
        self.config = config
        self.key = state_key(config)
        self.refresh_if_dev = True  # false once this load's refresh failed: it builds from the last stored version
        self.downloaded = False  # whether this load's pinned version reached build_defs_from_state

    @property
    def defs_state_config(self) -> DefsStateConfig:
        args = DefsStateConfigArgs.versioned_state_storage().model_copy(update={"refresh_if_dev": self.refresh_if_dev})
        return DefsStateConfig.from_args(args, default_key=self.key)

    def write_state_to_path(self, state_path: Path) -> None:
        """Read the managed tables (the only metastore read at load); StateUnreadable when they cannot be read."""
        uri = self.config.metastore.uri
        if not metastore_reachable(uri):  # fails fast, with no JVM started
            raise StateUnreadable(f"the Hive Metastore at {uri} is unreachable")
        try:
            managed = read_managed_tables(self.config)
        except (LakekeeperError, ResourceError) as error:
            problem = f"the managed tables could not be read from the Hive Metastore at {uri}: {error}"
            raise StateUnreadable(problem) from error
        state_path.write_text(state_to_json(managed, read_at_now(self.config)), encoding="utf-8")
        REFRESH_PROBLEMS.pop(self.key, None)
        if os.environ.get("DAGSTER_HOME"):  # the instance this state is stored in, where the tables' runs queue
            translator = translator_for(self.config, managed.tables)
            with dg.DagsterInstance.get() as instance:
                register_pool_limits(instance, [translator.pool(info) for info in managed.tables])

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        try:
            return self._build_downloaded(context)
        except StateUnreadable as problem:  # a dev/dg load's refresh failed: build from the last stored version
            REFRESH_PROBLEMS[self.key] = str(problem)
            self.refresh_if_dev = False
            return self._build_downloaded(context)

    def _build_downloaded(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """super().build_defs; when Dagster cannot download the pinned version (ValueError from the blob storage,
        OSError), 0 tables with the reason instead of a failed load."""
        self.downloaded = False
        try:
            try:
                return super().build_defs(context)
            except dg.DagsterInvalidInvocationError as error:
                if self.downloaded or NO_STORAGE not in str(error):
                    raise
                return self._build_newest(context)
        except (ValueError, OSError) as error:
            if self.downloaded:  # raised while building, not while downloading
                raise
            return definitions_from_state(self.config, undownloadable_state(error))

    def _build_newest(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """A load with no instance in context: from the newest version stored in DAGSTER_HOME's instance."""
        if not os.environ.get("DAGSTER_HOME"):
            return definitions_from_state(self.config, no_instance_state())
        with tempfile.TemporaryDirectory() as folder:
            state_path = Path(folder) / "state"
            if not self._newest(state_path):
                return definitions_from_state(self.config, location_state(self.config, None, None))
            return self.build_defs_from_state(context, state_path)

    def build_defs_from_state(self, context: dg.ComponentLoadContext, state_path: Path | None) -> dg.Definitions:
        # No version: none stored when the version was pinned (this load's, or the one its run was planned with),
        # or none pinned at all; the instance may have one now (then the notice says how to load it).
        self.downloaded = True
        if state_path is None and self.key not in REFRESH_PROBLEMS and self._newest():
            return definitions_from_state(self.config, unpinned_state())
        stored = state_path.read_text(encoding="utf-8") if state_path is not None else None
        return definitions_from_state(self.config, location_state(self.config, stored, REFRESH_PROBLEMS.get(self.key)))

    def _newest(self, state_path: Path | None = None) -> bool:
        """Whether DAGSTER_HOME's instance stores a version (False without DAGSTER_HOME, or when its settings do not
        load: the load goes on with 0 tables, as it did before asking); the newest is downloaded to `state_path` when
        given. The instance is not entered: entering one leaves its storage in the process's context."""
        if not os.environ.get("DAGSTER_HOME"):
            return False
        try:
            instance = dg.DagsterInstance.get()
        except dg.DagsterError:
            return False
        try:
            storage = instance.defs_state_storage
            version = storage.get_latest_version(self.key) if storage is not None else None
            if version is not None and state_path is not None:
                storage.download_state_to_path(self.key, version, state_path)
            return version is not None
        finally:
            instance.dispose()


@dg.component_instance
def load(context: dg.ComponentLoadContext) -> ManagedTablesComponent:
    return ManagedTablesComponent(load_config())
