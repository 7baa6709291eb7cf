"""retention_job: opens as a dry run that changes nothing, a real run says what it dropped in its metadata, bad
config fails the run before anything changes, the schedule is off, and the table's asset shows its policies."""

from __future__ import annotations

import dagster as dg
import pytest

from lakekeeper_dagster.cli.app import build_parser
from lakekeeper_dagster.cli.partitions import cmd_retention
from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine.protocol import writers
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster_tests.surface.test_failures import assert_failed_with
from lakekeeper_dagster_tests.tables import make_table, rows_of

FLAT = [{"dt": "2019041316"}, {"dt": "2019041317"}, {"dt": "2024053123"}, {"dt": "latest"}]


POLICIES = {"partition_time": {"dt": "%Y%m%d%H"}, "retention": {"older_than": "90d"}}


@pytest.fixture
def location(spark, metastore, database, data_dir) -> tuple[dg.Definitions, str]:
    table = make_table(spark, database, "ret", data_dir / "ret", partitions=FLAT, files=2, rows=10)
    raw = {
        "tables": {"databases": [database]},
        "metastore": {"uri": metastore.uri},
        "table_overrides": {table: POLICIES},
    }
    config = parse_config(raw, "t")
    return build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False)), table


def _metadata(result: dg.ExecuteInProcessResult) -> dict:
    (output,) = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    return {k: v.value for k, v in output.event_specific_data.metadata.items()}


def failed_real_run(defs: dg.Definitions):
    """A real run (not a dry run, skip_trash) of retention_job over every table with a policy, which must fail:
    its step's failure data."""
    with dg.instance_for_test() as instance:
        result = defs.get_job_def("retention_job").execute_in_process(
            instance=instance,
            run_config={"ops": {"retention": {"config": {"dry_run": False, "skip_trash": True}}}},
            raise_on_error=False,
        )
    assert not result.success
    return result.failure_data_for_node("retention").user_failure_data


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
    assert shown["where"] == {p: "deleted" for p in shown["partitions"]} and shown["failed"] == {}
    assert _dirs(data_dir) == ["dt=2024053123", "dt=latest"]
    assert rows_of(spark, table) == [r for r in rows if r[3] not in ("2019041316", "2019041317")]


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
    (request,) = schedule.evaluate_tick(dg.build_schedule_context()).run_requests  # the one managed table
    shown = request.run_config["ops"]["retention"]["config"]
    assert (shown["table"], shown["dry_run"]) == (f"{database}.ret", False)
    graph = defs.resolve_asset_graph()
    metadata = graph.get(dg.AssetKey(["hive", database, "ret"])).metadata
    assert metadata["partition_time"] == "dt: %Y%m%d%H"
    assert metadata["retention"] == "older than 90d, at most 0.5 of the partitions a run"
    assert metadata["archive"] == "(not set)"


def test_a_failing_table_does_not_hide_what_was_dropped_from_the_others(spark, metastore, database, data_dir):
    """The first table is refused (its max-fraction guard), the second is dropped from: the run fails once naming
    the first, with the second's drops in its metadata."""
    bad = make_table(spark, database, "a_bad", data_dir / "a_bad", partitions=FLAT, files=1, rows=5)
    table = make_table(spark, database, "ret", data_dir / "ret", partitions=FLAT, files=2, rows=10)
    rows = rows_of(spark, table)
    overrides = {bad: {**POLICIES, "retention": {"older_than": "90d", "max_fraction": 0.1}}, table: POLICIES}
    raw = {"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}, "table_overrides": overrides}
    config = parse_config(raw, "t")
    defs = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
    failure = failed_real_run(defs)
    assert failure.description.startswith(f"1 table(s) failed:\n{bad}: {bad}: dropping 2 of its 4 partitions")
    shown = {k: v.value for k, v in failure.metadata.items()}
    assert shown["partitions"] == [f"{table}/dt=2019041316", f"{table}/dt=2019041317"] and list(shown["failed"]) == [
        bad
    ]
    assert sorted(p.name for p in (data_dir / "a_bad").iterdir()) == [f"dt={v['dt']}" for v in FLAT]
    assert rows_of(spark, table) == [r for r in rows if r[3] not in ("2019041316", "2019041317")]


def test_a_partition_that_was_not_dropped_fails_the_run_and_the_command(
    spark, location, database, data_dir, monkeypatch, capsys
):
    """A writer still at work in one old partition: the others are dropped, and both the Dagster run and the
    `retention` command fail (exit 1) naming it, where they used to succeed."""
    defs, table = location
    monkeypatch.setattr(writers, "WRITER_WAIT_SECONDS", 0.5)
    (data_dir / "ret" / "dt=2019041316" / ".part-0.inprogress.x").write_text("")
    failure = failed_real_run(defs)
    assert failure.description.startswith(f"1 table(s) failed:\n{table}: 1 partition(s) not dropped: dt=2019041316: ")
    assert "in progress" in failure.description
    assert failure.metadata["partitions"].value == [f"{table}/dt=2019041317"]
    assert _dirs(data_dir) == ["dt=2019041316", "dt=2024053123", "dt=latest"]

    args = build_parser().parse_args(["retention", "--table", table, "--no-dry-run", "--skip-trash"])
    config = parse_config({"table_overrides": {table: POLICIES}}, "t")
    assert cmd_retention(args, config, lambda _config: spark) == 1
    shown = capsys.readouterr()
    assert "dt=2019041316: not dropped: " in shown.out
    assert f"error: 1 partition(s) of {table} not dropped (dt=2019041316); see the lines above" in shown.err
    assert _dirs(data_dir) == ["dt=2019041316", "dt=2024053123", "dt=latest"]
