"""merge_job: opens as a dry run that changes nothing, a real run says what it merged in its metadata and evaluates
the merged table's checks on its copies, the schedule is off, and the merged table and the view are assets
downstream of the source's; the merged table's checks executed alone re-read its partitions."""

from __future__ import annotations

import dagster as dg
import pytest

from lakekeeper_dagster.cli.app import build_parser
from lakekeeper_dagster.cli.partitions import cmd_merge
from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine.protocol import writers
from lakekeeper_dagster.surface.assets import CHECKSUM, ROW_COUNT
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster_tests.tables import data_files, make_table, rows_of

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


def _evaluations(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict[str, tuple[str, bool, dict]]:
    """The latest evaluation of each of the merged table's checks: its run, verdict and metadata."""
    found = {}
    for check in (ROW_COUNT, CHECKSUM):
        record = instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(key, check))
        if record is not None:
            evaluation = record.event.dagster_event.event_specific_data
            found[check] = (record.run_id, evaluation.passed, {k: v.value for k, v in evaluation.metadata.items()})
    return found


def test_merge_job_opens_as_a_dry_run_then_merges_and_says_what(spark, location, database, data_dir):
    defs, table = location
    rows = rows_of(spark, table)
    period = spark.sql(f"SELECT count(*) FROM {table} WHERE dt LIKE '20190413%'").collect()[0][0]
    before = sorted(p.name for p in (data_dir / "mj").iterdir())
    job = defs.get_job_def("merge_job")
    merged_key = dg.AssetKey(["hive", database, "mj__merged"])
    with dg.instance_for_test() as instance:
        dry = job.execute_in_process(instance=instance, run_config={"ops": {"merge": {"config": {"table": table}}}})
        assert _evaluations(instance, merged_key) == {}  # a dry run verifies nothing
    assert dry.success and _metadata(dry)["dry_run"] is True and _metadata(dry)["partition_count"] == 2
    assert sorted(p.name for p in (data_dir / "mj").iterdir()) == before
    assert not spark.catalog.tableExists(f"{database}.mj__merged")

    config = {"table": table, "dry_run": False, "skip_trash": True}
    implicit, recount_op = defs.resolve_implicit_global_asset_job_def(), [f"hive__{database}__mj__merged_checks"]
    with dg.instance_for_test() as instance:
        done = job.execute_in_process(instance=instance, run_config={"ops": {"merge": {"config": config}}})
        shown = _metadata(done)
        assert shown["merged_partitions"] == [f"{database}.mj__merged/dt=20190413"] and shown["failed"] == {}
        assert shown["partition_count"] == 2 and shown["files"] == 4 and shown["rows"] == 20 and shown["bytes"] > 0
        assert sorted(p.name for p in (data_dir / "mj").iterdir()) == ["dt=2024053123"]
        assert rows_of(spark, f"{database}.mj_all") == rows

        # the run evaluated the merged table's checks on its copy: the period's rows, verified
        checks = _evaluations(instance, merged_key)
        assert set(checks) == {ROW_COUNT, CHECKSUM} and all(run == done.run_id and ok for run, ok, _ in checks.values())
        assert checks[ROW_COUNT][2]["rows_before"] == checks[ROW_COUNT][2]["rows_after"] == period == 20
        assert checks[ROW_COUNT][2]["partitions"] == "dt=20190413"
        figures = checks[CHECKSUM][2]
        assert figures["checksum_before"] == figures["checksum_after"] not in ("", "0")

        # executed alone, the checks re-read the merged partition against what the history records of its merge
        recount = implicit.execute_in_process(instance=instance, op_selection=recount_op)
        checks = _evaluations(instance, merged_key)
        assert all(run == recount.run_id and ok for run, ok, _ in checks.values())
        assert checks[ROW_COUNT][2]["rows_after"] == 20 and checks[CHECKSUM][2] == figures
        for path in data_files(data_dir / "mj__merged" / "dt=20190413"):
            path.unlink()  # the merged rows lost after the merge: the re-count sees it
        recount = implicit.execute_in_process(instance=instance, op_selection=recount_op)
        checks = _evaluations(instance, merged_key)
        assert [(run, ok) for run, ok, _ in checks.values()] == [(recount.run_id, False)] * 2
        assert (checks[ROW_COUNT][2]["rows_before"], checks[ROW_COUNT][2]["rows_after"]) == (20, 0)

    schedule = defs.get_schedule_def("merge_schedule")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    graph = defs.resolve_asset_graph()
    source, merged, view = (dg.AssetKey(["hive", database, n]) for n in ("mj", "mj__merged", "mj_all"))
    assert graph.get(merged).parent_keys == {source} and graph.get(view).parent_keys == {source, merged}
    assert {dg.AssetCheckKey(merged, ROW_COUNT), dg.AssetCheckKey(merged, CHECKSUM)} <= graph.asset_check_keys
    dg.Definitions.validate_loadable(defs)


def test_a_period_that_was_not_merged_fails_the_run_and_the_command(
    spark, metastore, database, data_dir, monkeypatch, capsys
):
    """A writer still at work in a fine partition of one period: the other period is merged, and both the Dagster
    run and the `merge` command fail (exit 1) naming the one left, where they used to succeed."""
    monkeypatch.setattr(writers, "WRITER_WAIT_SECONDS", 0.5)
    table = make_table(spark, database, "mf", data_dir / "mf", partitions=[*FLAT, {"dt": "2019041400"}], files=1)
    overrides = {table: {"partition_time": {"dt": "%Y%m%d%H"}, "merge": {**MERGE, "view": "mf_all"}}}
    raw = {"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}, "table_overrides": overrides}
    config = parse_config(raw, "t")
    defs = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
    (data_dir / "mf" / "dt=2019041316" / ".part-0.inprogress.x").write_text("")
    with dg.instance_for_test() as instance:
        result = defs.get_job_def("merge_job").execute_in_process(
            instance=instance,
            run_config={"ops": {"merge": {"config": {"table": table, "dry_run": False, "skip_trash": True}}}},
            raise_on_error=False,
        )
    assert not result.success
    failure = result.failure_data_for_node("merge").user_failure_data
    assert failure.description.startswith(f"1 table(s) failed:\n{table}: 1 partition(s) not merged: dt=20190413: ")
    assert failure.metadata["merged_partitions"].value == [f"{database}.mf__merged/dt=20190414"]
    assert sorted(p.name for p in (data_dir / "mf").iterdir()) == ["dt=2019041316", "dt=2019041317", "dt=2024053123"]

    args = build_parser().parse_args(["merge", "--table", table, "--no-dry-run", "--skip-trash"])
    assert cmd_merge(args, config, lambda _config: spark) == 1
    shown = capsys.readouterr()
    assert "dt=20190413: not merged: " in shown.out
    assert f"error: 1 partition(s) of {table} not merged (dt=20190413); see the lines above" in shown.err
    assert sorted(p.name for p in (data_dir / "mf").iterdir()) == ["dt=2019041316", "dt=2019041317", "dt=2024053123"]
