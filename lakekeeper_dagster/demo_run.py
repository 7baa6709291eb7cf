"""The demo's main job through Dagster: sync partitions, materialize (compact) every demo table, report checks."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from lakekeeper_dagster.definitions import build_definitions, spark_resource_for
from lakekeeper_dagster.engine.config import LakekeeperConfig
from lakekeeper_dagster.partitions import partitions_def_name

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def run_demo(config: LakekeeperConfig, database: str, dagster_home: Path) -> bool:
    """Materialize every table of `database` on a persistent instance (seen later in the UI); True when all pass."""
    config = config.model_copy(update={"tables": config.tables.model_copy(update={"databases": [database]})})
    defs = build_definitions(config, resource=spark_resource_for(config, stop_at_teardown=False))
    dagster_home.mkdir(parents=True, exist_ok=True)
    ok = True
    with dg.DagsterInstance.from_config(str(dagster_home)) as instance:
        defs.get_job_def("sync_partitions_job").execute_in_process(instance=instance, run_config=QUIET)
        job = defs.get_implicit_global_asset_job_def()
        for key in sorted(defs.resolve_asset_graph().get_all_asset_keys(), key=lambda k: k.to_user_string()):
            node = defs.resolve_asset_graph().get(key)
            tags = {}
            if node.partitions_def is not None:
                keys = instance.get_dynamic_partitions(partitions_def_name(key.path[1], key.path[2]))
                tags = {RANGE_START: keys[0], RANGE_END: keys[-1]}
            result = job.execute_in_process(
                instance=instance, asset_selection=[key], tags=tags, raise_on_error=False, run_config=QUIET
            )
            ok &= result.success
            # A run over several partitions records its totals on each of them: report them once.
            for materialization in result.get_asset_materialization_events()[:1]:
                m = {k: v.value for k, v in materialization.materialization.metadata.items()}
                print(
                    f"{key.to_user_string()}: materialized ({m['partitions_compacted']} compacted, "
                    f"{m['partitions_skipped']} skipped, {m['partitions_failed']} failed): files "
                    f"{m['files_before']} -> {m['files_after']}, rows {m['rows']}, backup {m['backup_table'] or '-'}"
                )
            for check in result.get_asset_check_evaluations():
                print(f"  check {check.check_name}: {'passed' if check.passed else 'FAILED'}")
            if not result.success:
                print(f"{key.to_user_string()}: run failed (see `make ui`, run {result.run_id})")
    print(f"Open the Dagster UI to see the assets, checks and runs: make ui, then http://127.0.0.1:3000 ({database})")
    return ok
