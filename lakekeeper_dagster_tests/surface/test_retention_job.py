"""retention_job: opens as a dry run that changes nothing, a real run says what it dropped in its metadata, bad
config fails the run before anything changes, the schedule is off, and the table's asset shows its policies."""

from __future__ import annotations

import dagster as dg
import pytest

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.definitions import build_definitions, spark_resource_for
from lakekeeper_dagster_tests.surface.test_failures import assert_failed_with
from lakekeeper_dagster_tests.tables import make_table, rows_of

FLAT = [{"dt": "2019041316"}, {"dt": "2019041317"}, {"dt": "2024053123"}, {"dt": "latest"}]


@pytest.fixture
def location(spark, metastore, database, data_dir) -> tuple[dg.Definitions, str]:
    table = make_table(spark, database, "ret", data_dir / "ret", partitions=FLAT, files=2, rows=10)
    policies = {"partition_time": {"dt": "%Y%m%d%H"}, "retention": {"older_than": "90d"}}
    raw = {
        "tables": {"databases": [database]},
        "metastore": {"uri": metastore.uri},
        "table_overrides": {table: policies},
    }
    config = parse_config(raw, "t")
    return build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False)), table


def _metadata(result: dg.ExecuteInProcessResult) -> dict:
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    return {k: v.value for k, v in output.event_specific_data.metadata.items()}


def _dirs(data_dir) -> list[str]:
    return sorted(p.name for p in (data_dir / "ret").iterdir())


def test_retention_job_opens_as_a_dry_run_then_drops_and_says_what(spark, location, database, data_dir):
    defs, table = location
    before, rows = _dirs(data_dir), rows_of(spark, table)
    job = defs.get_job_def("retention_job")
    with dg.instance_for_test() as instance:
        dry = job.execute_in_process(instance=instance, run_config={"ops": {"retention": {"config": {"table": table}}}})
        logged = "\n".join(e.user_message for e in instance.all_logs(dry.run_id))
    assert dry.success and "DROP dt=2019041316" in logged and "KEEP dt=2024053123" in logged
    assert _metadata(dry)["dry_run"] is True and _metadata(dry)["partition_count"] == 2
    assert _dirs(data_dir) == before and rows_of(spark, table) == rows

    config = {"table": table, "dry_run": False, "skip_trash": True}
    with dg.instance_for_test() as instance:
        done = job.execute_in_process(instance=instance, run_config={"ops": {"retention": {"config": config}}})
    shown = _metadata(done)
    assert shown["partitions"] == [f"{table}/dt=2019041316", f"{table}/dt=2019041317"]
    assert shown["files"] == 4 and shown["bytes"] > 0 and shown["dry_run"] is False
    assert _dirs(data_dir) == ["dt=2024053123", "dt=latest"] and len(rows_of(spark, table)) == 20


def test_bad_retention_config_fails_before_anything_changes(spark, location, data_dir):
    defs, table = location
    before = _dirs(data_dir)
    with dg.instance_for_test() as instance:
        result = defs.get_job_def("retention_job").execute_in_process(
            instance=instance,
            run_config={"ops": {"retention": {"config": {"table": table, "older_than": "", "dry_run": False}}}},
            raise_on_error=False,
        )
    assert_failed_with(
        result,
        "retention",
        "config.older_than: '' is not an age; write a positive number of hours, days or weeks: 36h, 90d, 2w",
    )
    assert _dirs(data_dir) == before


def test_the_schedule_is_off_and_the_asset_shows_the_policies(location, database):
    defs, _table = location
    (schedule,) = [s for s in defs.schedules if s.name == "retention_schedule"]
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    (request,) = schedule.evaluate_tick(dg.build_schedule_context()).run_requests
    assert request.run_config["ops"]["retention"]["config"]["dry_run"] is False
    graph = defs.resolve_asset_graph()
    metadata = graph.get(dg.AssetKey(["hive", database, "ret"])).metadata
    assert metadata["partition_time"] == "dt: %Y%m%d%H"
    assert metadata["retention"] == "older than 90d, at most 0.5 of the partitions a run"
    assert metadata["archive"] == "(not set)"
