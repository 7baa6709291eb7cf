"""What the partition-management jobs (archive, retention, merge) share: their op config's `table`, `dry_run` and
`older_than`, the tables a run works on (`PolicyConfig.targets`), the loop of a run over several tables
(`each_table`), and their schedules (one real run a managed table whose policy sets an age)."""

# No `from __future__ import annotations`: Dagster resolves the op config annotations at definition.

from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import dagster as dg
from pydantic import Field

from lakekeeper_dagster.config import LakekeeperConfig, run_owner
from lakekeeper_dagster.engine.errors import ConfigError
from lakekeeper_dagster.engine.hive.model import TableInfo, split_table_name
from lakekeeper_dagster.engine.plan.partition_time import parse_age
from lakekeeper_dagster.engine.policies import TablePolicies, policy_age
from lakekeeper_dagster.engine.protocol.history import recorded
from lakekeeper_dagster.surface.failures import ENGINE_ERRORS, engine_failures, partitions_not
from lakekeeper_dagster.surface.metadata import TABLE_TAG
from spark_resources.resource import HiveSparkResource


def sets_age(policies: TablePolicies, policy: str) -> bool:
    """Whether the table's `table_overrides.<db.table>.<policy>.older_than` is set."""
    return bool(getattr(policies, policy).older_than)


class PolicyConfig(dg.Config):
    """The op config of a partition-management job: opens as a dry run (the safe default: it lists, and changes
    nothing). `POLICY` names the job's op and its `table_overrides.<db.table>` key."""

    POLICY: ClassVar[str]
    CRON: ClassVar[str]  # when `<POLICY>_schedule` runs (UTC)

    table: str | None = Field(
        default=None, description="DB.TABLE; default: every table of table_overrides whose policy sets older_than"
    )
    dry_run: bool = Field(default=True, description="only list what a run would change; false changes it")
    older_than: str | None = Field(
        default=None, description="the age, e.g. 90d, 36h, 2w; default: the table's policy older_than"
    )

    def targets(self, settings: LakekeeperConfig) -> list[tuple[str, str]]:
        """(database, table) pairs: the named table, else every table of `table_overrides` whose policy sets an
        age; ConfigError for a malformed value, nothing to work on, or a table its run cannot work on
        (`check_target`): all before Spark starts."""
        if self.older_than is not None:
            parse_age(self.older_than, "config.older_than")
        if self.table is not None:
            pairs = [split_table_name(self.table, "config.table")]
        else:
            pairs = [split_table_name(name) for name, o in settings.table_overrides.items() if sets_age(o, self.POLICY)]
        if not pairs:
            raise ConfigError(
                f"{self.POLICY}: no table named (config.table) and no table_overrides.<DB.TABLE>.{self.POLICY}."
                "older_than set; nothing was changed"
            )
        for database, table in pairs:
            self.check_target(settings, database, table)
        return pairs

    def check_target(self, settings: LakekeeperConfig, database: str, table: str) -> None:
        """ConfigError for a table without the partition time or the age its run needs."""
        policies, name = settings.policies_for(database, table), f"{database}.{table}"
        policies.clock(name)
        policy_age(self.older_than, getattr(policies, self.POLICY).older_than, f"{self.POLICY}.older_than", name)


def each_table(
    context: dg.OpExecutionContext,
    config: PolicyConfig,
    settings: LakekeeperConfig,
    spark: HiveSparkResource,
    operate: Callable[..., Any],
    verb: str,
    failed: dict[str, str],
    **options: Any,
) -> Iterator[tuple[str, Any]]:
    """(DB.TABLE, outcome) of `operate` (the engine's operation) on each table of the run, its lines logged at once,
    every run recorded in the history; the Spark session opened once the run's tables passed their checks. A table
    that fails, or whose partitions were not all `verb`, is named in
    `failed` and does not stop the others (the op fails at the end, naming every one)."""
    with engine_failures():
        targets = config.targets(settings)
    for database, table in targets:
        name = f"{database}.{table}"
        try:
            with recorded(settings.history_sink(context.run_id)):
                outcome = operate(
                    spark.spark_session,
                    database,
                    table,
                    settings.policies_for(database, table),
                    config.older_than,
                    dry_run=config.dry_run,
                    owner=run_owner(context.run_id),
                    **options,
                )
        except ENGINE_ERRORS as error:
            context.log.error(f"{name}: {error}")
            failed[name] = str(error)
            continue
        context.log.info("\n".join(outcome.lines))
        if outcome.failed:  # the step fails at the end, with what the other partitions did
            failed[name] = partitions_not(verb, outcome.failed)
        yield name, outcome


def policy_schedule(
    job: dg.JobDefinition,
    settings: LakekeeperConfig,
    tables: list[TableInfo],
    config: type[PolicyConfig],
) -> dg.ScheduleDefinition:
    """`<policy>_schedule`: a run (not a dry run) of `job`'s op `<policy>` (`config.POLICY`) for each managed table
    whose `table_overrides.<db.table>.<policy>.older_than` is set; off until turned on."""
    policy = config.POLICY
    names = [t.qualified_name for t in tables if sets_age(settings.policies_for(t.database, t.name), policy)]

    @dg.schedule(
        name=f"{policy}_schedule", job=job, cron_schedule=config.CRON, default_status=dg.DefaultScheduleStatus.STOPPED
    )
    def _schedule(context: dg.ScheduleEvaluationContext):
        if not names:
            return dg.SkipReason(f"no managed table sets table_overrides.<db.table>.{policy}.older_than")
        return [
            dg.RunRequest(
                run_key=name,
                run_config=dg.RunConfig(ops={policy: config(table=name, dry_run=False)}),
                tags={TABLE_TAG: name},
            )
            for name in names
        ]

    return _schedule
