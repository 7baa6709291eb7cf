"""merge_job: opens as a dry run that changes nothing, a real run says what it merged in its metadata, the schedule
is off, and the merged table and the view are assets downstream of the source's."""

from __future__ import annotations

import dagster as dg
import pytest

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.definitions import build_definitions, spark_resource_for
from lakekeeper_dagster_tests.tables import make_table, rows_of

FLAT = [{"dt": "2019041316"}, {"dt": "2019041317"}, {"dt": "2024053123"}]
MERGE = {"into": "%Y%m%d", "older_than": "1000d", "view": "mj_all", "settle_seconds": 0}


@pytest.fixture
def location(spark, metastore, database, data_dir) -> tuple[dg.Definitions, str]:
    table = make_table(spark, database, "mj", data_dir / "mj", partitions=FLAT, files=2, rows=10)
    raw = {
        "tables": {"databases": [database]},
        "metastore": {"uri": metastore.uri},
        "table_overrides": {table: {"partition_time": {"dt": "%Y%m%d%H"}, "merge": MERGE}},
    }
    config = parse_config(raw, "t")
    return build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False)), table


def _metadata(result: dg.ExecuteInProcessResult) -> dict:
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    return {k: v.value for k, v in output.event_specific_data.metadata.items()}


def test_merge_job_opens_as_a_dry_run_then_merges_and_says_what(spark, location, database, data_dir):
    defs, table = location
    rows = rows_of(spark, table)
    before = sorted(p.name for p in (data_dir / "mj").iterdir())
    job = defs.get_job_def("merge_job")
    with dg.instance_for_test() as instance:
        dry = job.execute_in_process(instance=instance, run_config={"ops": {"merge": {"config": {"table": table}}}})
    assert dry.success and _metadata(dry)["dry_run"] is True and _metadata(dry)["partition_count"] == 2
    assert sorted(p.name for p in (data_dir / "mj").iterdir()) == before
    assert not spark.catalog.tableExists(f"{database}.mj__merged")

    config = {"table": table, "dry_run": False, "skip_trash": True}
    with dg.instance_for_test() as instance:
        done = job.execute_in_process(instance=instance, run_config={"ops": {"merge": {"config": config}}})
    shown = _metadata(done)
    assert shown["merged_partitions"] == [f"{database}.mj__merged/dt=20190413"] and shown["failed"] == {}
    assert shown["partition_count"] == 2 and shown["files"] == 4 and shown["rows"] == 20 and shown["bytes"] > 0
    assert sorted(p.name for p in (data_dir / "mj").iterdir()) == ["dt=2024053123"]
    assert rows_of(spark, f"{database}.mj_all") == rows

    schedule = defs.get_schedule_def("merge_schedule")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    graph = defs.resolve_asset_graph()
    source, merged, view = (dg.AssetKey(["hive", database, n]) for n in ("mj", "mj__merged", "mj_all"))
    assert graph.get(merged).parent_keys == {source} and graph.get(view).parent_keys == {source, merged}
