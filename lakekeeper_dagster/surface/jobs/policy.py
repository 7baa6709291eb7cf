"""The schedules of the partition-management jobs: one real run a managed table whose policy sets an age."""

from collections.abc import Callable

import dagster as dg

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.surface.metadata import TABLE_TAG


def policy_schedule(
    job: dg.JobDefinition,
    settings: LakekeeperConfig,
    tables: list[TableInfo],
    *,
    policy: str,
    cron: str,
    config_of: Callable[[str], dg.Config],
) -> dg.ScheduleDefinition:
    """`<policy>_schedule`: a run (not a dry run: `config_of(table)`) of `job`'s op `<policy>` for each managed table
    whose `table_overrides.<db.table>.<policy>.older_than` is set; off until turned on."""
    names = [t.qualified_name for t in tables if getattr(settings.policies_for(t.database, t.name), policy).older_than]

    @dg.schedule(
        name=f"{policy}_schedule", job=job, cron_schedule=cron, default_status=dg.DefaultScheduleStatus.STOPPED
    )
    def _schedule(context: dg.ScheduleEvaluationContext):
        if not names:
            return dg.SkipReason(f"no managed table sets table_overrides.<db.table>.{policy}.older_than")
        return [
            dg.RunRequest(
                run_key=name,
                run_config=dg.RunConfig(ops={policy: config_of(name)}),
                tags={TABLE_TAG: name},
            )
            for name in names
        ]

    return _schedule
