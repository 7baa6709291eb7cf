"""What the asset's Partitions tab shows, before any job and after a compaction: real Spark, metastore and files,
the real sensor daemon and the webserver's GraphQL, in process (Dagster's test utilities, private API)."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
from dagster._core.remote_origin import InProcessCodeLocationOrigin
from dagster._core.test_utils import (
    InProcessTestWorkspaceLoadTarget,
    create_test_daemon_workspace_context,
    freeze_time,
)
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._daemon.sensor import execute_sensor_iteration
from dagster_graphql.test.utils import execute_dagster_graphql

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine.hive.model import partition_clause
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.metadata import STATE
from lakekeeper_dagster.surface.sensors.file_count import SENSOR_NAME
from lakekeeper_dagster.surface.sensors.partitions import INTERVAL_SECONDS, PARTITIONS_SENSOR, UNCHANGED
from lakekeeper_dagster_tests.surface.identity import asset_key, partitions_def_name
from lakekeeper_dagster_tests.tables import data_files, make_table, rows_of, write_files

DAYS = [{"date": f"2024-03-0{day}"} for day in (1, 2, 3)]
NAMES = [f"date={d['date']}" for d in DAYS]
MATERIALIZED = "MATERIALIZED"


# The code location the in-process workspace loads (built on the test's Spark session, so no second JVM).
LOCATION: dg.Definitions | None = None
STATUSES = """
query {
  assetNodes {
    assetKey { path }
    assetPartitionStatuses {
      ... on DefaultPartitionStatuses { materializedPartitions unmaterializedPartitions failedPartitions }
    }
  }
}
"""


@contextmanager
def daemon_workspace(instance: dg.DagsterInstance, defs: dg.Definitions) -> Iterator:
    """The code location as the daemon and the webserver see it (in process: Dagster's own test utilities)."""
    global LOCATION
    LOCATION = defs
    origin = LoadableTargetOrigin(module_name=__name__, attribute="LOCATION")
    target = InProcessTestWorkspaceLoadTarget(InProcessCodeLocationOrigin(origin))
    try:
        with create_test_daemon_workspace_context(target, instance) as workspace:
            yield workspace
    finally:
        LOCATION = None


def tick(workspace, at: float) -> bool:
    """One iteration of the real sensor daemon at time `at`: every running sensor is evaluated and its result
    (dynamic partition requests, runless asset events) applied as `dagster-daemon` applies it. Returns whether the
    partition sensor's new tick recorded anything (False: skipped as unchanged)."""
    instance = workspace.instance
    with freeze_time(at):
        list(execute_sensor_iteration(workspace, logging.getLogger(__name__), None, None))
    (state,) = [s for s in instance.all_instigator_state() if s.name == PARTITIONS_SENSOR]
    ticks = instance.get_ticks(state.instigator_origin_id, state.selector_id)
    assert ticks[0].timestamp == at, "the sensor was not evaluated"
    return ticks[0].skip_reason != UNCHANGED


def statuses(workspace, key: dg.AssetKey) -> dict[str, str | None]:
    """Each partition's status as the UI's Partitions tab gets it: GraphQL `assetPartitionStatuses`."""
    result = execute_dagster_graphql(workspace.create_request_context(), STATUSES)
    assert not result.errors, result.errors
    (node,) = [n for n in result.data["assetNodes"] if n["assetKey"]["path"] == key.path]
    found = node["assetPartitionStatuses"]
    return {
        **{p: None for p in found["unmaterializedPartitions"]},
        **{p: MATERIALIZED for p in found["materializedPartitions"]},
        **{p: "FAILED" for p in found["failedPartitions"]},
    }


def latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str) -> dg.EventLogRecord:
    (record,) = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1
    ).records
    return record


def materializations(instance: dg.DagsterInstance, key: dg.AssetKey) -> int:
    return len(instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=100).records)


def test_partitions_appear_registered_and_compaction_shows(spark, metastore, database, data_dir):
    """Before any job: the sensor adds the Hive partitions, registers those holding data (needing compaction or
    not) as Materialized, and an empty one stays Missing; a compaction adds its run's materialization; a partition
    dropped in Hive disappears; data arriving in the empty one gets it registered."""
    table = f"{database}.ev"
    make_table(spark, database, "ev", data_dir / "ev", partitions=DAYS[:2], files=4, rows=40)
    for path in data_files(data_dir / "ev" / NAMES[1]):  # the second keeps one file only; the third is added empty
        path.unlink()
    write_files(spark, f"file:{data_dir / 'ev' / NAMES[1]}", 500, 10, 1, "parquet")
    spark.sql(f"ALTER TABLE {table} ADD {partition_clause(DAYS[2])}")
    spark.sql(f"REFRESH TABLE {table}")
    make_table(spark, database, "flat", data_dir / "flat", files=2, rows=20)
    config = parse_config({"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}}, "t")
    defs = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
    assert defs.get_sensor_def(PARTITIONS_SENSOR).default_status == dg.DefaultSensorStatus.RUNNING
    key, name = asset_key(database, "ev"), partitions_def_name(database, "ev")
    now = float(int(time.time()))  # whole seconds: the tick records the frozen time exactly
    with dg.instance_for_test() as instance, daemon_workspace(instance, defs) as workspace:
        assert instance.get_dynamic_partitions(name) == []
        assert tick(workspace, now)
        assert statuses(workspace, key) == {NAMES[0]: MATERIALIZED, NAMES[1]: MATERIALIZED, NAMES[2]: None}
        assert instance.get_dynamic_partitions(name) == NAMES
        figures = {
            p: {k: v.value for k, v in latest(instance, key, p).asset_materialization.metadata.items()}
            for p in NAMES[:2]
        }
        assert figures[NAMES[0]][STATE] == figures[NAMES[1]][STATE] == "existing"
        assert (figures[NAMES[0]]["needs_compaction"], figures[NAMES[0]]["file_count"]) == (True, 4)
        assert (figures[NAMES[1]]["needs_compaction"], figures[NAMES[1]]["file_count"]) == (False, 1)
        assert latest(instance, key, NAMES[0]).run_id == ""  # reported by the sensor, no run
        flat = instance.get_latest_materialization_event(asset_key(database, "flat")).asset_materialization
        assert (flat.metadata[STATE].value, flat.metadata["file_count"].value) == ("existing", 2)
        assert not tick(workspace, now + INTERVAL_SECONDS + 1)  # registered once
        assert materializations(instance, key) == 2
        # The registration's observations are what file_count_sensor reads: it asks for the partition to compact.
        with dg.build_sensor_context(instance=instance) as context:
            requests = defs.get_sensor_def(SENSOR_NAME)(context).run_requests
        assert [r.partition_key for r in requests if r.asset_selection == [key]] == [NAMES[0]]

        before = rows_of(spark, table)
        run = defs.get_implicit_global_asset_job_def().execute_in_process(
            instance=instance, asset_selection=[key], partition_key=NAMES[0]
        )
        assert run.success and rows_of(spark, table) == before
        assert len(data_files(data_dir / "ev" / NAMES[0])) == 1
        assert not tick(workspace, now + 2 * (INTERVAL_SECONDS + 1))  # the compaction is not registered over
        assert statuses(workspace, key) == {NAMES[0]: MATERIALIZED, NAMES[1]: MATERIALIZED, NAMES[2]: None}
        compacted = latest(instance, key, NAMES[0])
        assert compacted.run_id == run.run_id
        assert compacted.asset_materialization.metadata[STATE].value == "compacted"
        assert compacted.asset_materialization.metadata["files_after"].value == 1
        assert latest(instance, key, NAMES[1]).asset_materialization.metadata[STATE].value == "existing"
        assert materializations(instance, key) == 3

        spark.sql(f"ALTER TABLE {table} DROP {partition_clause(DAYS[1])}")
        write_files(spark, f"file:{data_dir / 'ev' / NAMES[2]}", 900, 10, 2, "parquet")
        assert tick(workspace, now + 3 * (INTERVAL_SECONDS + 1))
        assert instance.get_dynamic_partitions(name) == [NAMES[0], NAMES[2]]
        assert statuses(workspace, key) == {NAMES[0]: MATERIALIZED, NAMES[2]: MATERIALIZED}
        assert latest(instance, key, NAMES[2]).asset_materialization.metadata["file_count"].value == 2


def registering(spark, metastore, database: str, budget: int) -> dg.Definitions:
    """The code location over the database with `observation.max_registrations_per_tick` = budget."""
    settings = {"observation": {"max_registrations_per_tick": budget}}
    config = parse_config({"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}, **settings}, "t")
    return build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))


def test_registration_goes_newest_first_within_its_budget_and_past_empty_partitions(
    spark, metastore, database, data_dir
):
    """At most `observation.max_registrations_per_tick` partitions holding data registered a tick, newest first,
    the dynamic partitions all added at once; more empty partitions at the head of the queue than a tick lists make
    the next tick start past them (an empty one takes no place in the budget), and the queue starts over from the
    newest once a tick filled its budget, so data arriving in a new partition is registered next; only a partition
    needing compaction gets an observation."""
    days = [{"date": f"2024-05-{day:02d}"} for day in range(1, 11)]
    names = [f"date={d['date']}" for d in days]
    make_table(spark, database, "ahead", data_dir / "ahead", partitions=days[:3], files=1, rows=10)
    write_files(spark, f"file:{data_dir / 'ahead' / names[1]}", 700, 10, 3, "parquet")  # 4 files: needs compaction
    for spec in days[3:]:  # seven newer partitions, created ahead of their data
        spark.sql(f"ALTER TABLE {database}.ahead ADD {partition_clause(spec)}")
    spark.sql(f"REFRESH TABLE {database}.ahead")
    defs = registering(spark, metastore, database, 2)
    key = asset_key(database, "ahead")
    at = [float(int(time.time())) + n * (INTERVAL_SECONDS + 1) for n in range(7)]
    with dg.instance_for_test() as instance, daemon_workspace(instance, defs) as workspace:
        assert tick(workspace, at[0])  # six empty partitions listed: none registered
        assert instance.get_dynamic_partitions(partitions_def_name(database, "ahead")) == names
        assert statuses(workspace, key) == dict.fromkeys(names)
        tick(workspace, at[1])  # past them: the two newest holding data
        assert statuses(workspace, key) == {**dict.fromkeys(names), names[2]: MATERIALIZED, names[1]: MATERIALIZED}
        tick(workspace, at[2])
        tick(workspace, at[3])
        assert statuses(workspace, key) == {**dict.fromkeys(names[3:]), **dict.fromkeys(names[:3], MATERIALIZED)}
        observed = instance.fetch_observations(dg.AssetRecordsFilter(asset_key=key), limit=10).records
        assert [r.partition_key for r in observed] == [names[1]]
        newest = {"date": "2024-05-11"}  # data arriving in a new partition after the ticks went past the empty ones
        spark.sql(f"ALTER TABLE {database}.ahead ADD {partition_clause(newest)}")
        write_files(spark, f"file:{data_dir / 'ahead' / 'date=2024-05-11'}", 900, 10, 1, "parquet")
        tick(workspace, at[4])
        tick(workspace, at[5])
        assert statuses(workspace, key)["date=2024-05-11"] == MATERIALIZED
