"""archive_job on a real instance, Spark, metastore and files: it opens as a dry run that changes nothing; a real
run records what it recompressed, a materialization of each archived partition and the table's verification
checks; its schedule (off) requests a real run of each table with an archive policy; a bad value fails the run with
the key it names."""

from __future__ import annotations

import dagster as dg

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine.hive.backup import find_backups
from lakekeeper_dagster.engine.plan.partition_time import utc_now
from lakekeeper_dagster.engine.rewrite.footers import read_footers
from lakekeeper_dagster.surface.assets import CHECKSUM, ROW_COUNT
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster_tests.surface.identity import asset_key
from lakekeeper_dagster_tests.surface.test_failures import assert_failed_with
from lakekeeper_dagster_tests.tables import DATES, data_files, make_table, rows_of

POLICY = {"partition_time": {"date": "%Y-%m-%d"}, "archive": {"older_than": "30d"}}


def _codecs(spark, directory) -> set[str]:
    footers = read_footers(spark, "parquet", [f"file://{p}" for p in data_files(directory)], str(directory))
    return {"+".join(f.codecs) for f in footers if f.rows}


def _location(spark, metastore, database, data_dir) -> tuple[dg.Definitions, str]:
    today = {"date": utc_now().strftime("%Y-%m-%d")}
    table = make_table(spark, database, "ev", data_dir / "ev", partitions=[*DATES, today], files=3, codec="snappy")
    config = parse_config(
        {"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}, "table_overrides": {table: POLICY}},
        "t",
    )
    return build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False)), table


def _run(location: dg.Definitions, instance: dg.DagsterInstance, **config) -> dg.ExecuteInProcessResult:
    run_config = {"ops": {"archive": {"config": config}}}
    return location.get_job_def("archive_job").execute_in_process(
        instance=instance, run_config=run_config, raise_on_error=False
    )


def test_archive_job_dry_run_then_real_run_with_figures_and_checks(spark, metastore, database, data_dir):
    location, table = _location(spark, metastore, database, data_dir)
    key = asset_key(database, "ev")
    before = rows_of(spark, table)
    files = {p: data_files(p) for p in (data_dir / "ev").iterdir()}
    with dg.instance_for_test() as instance:
        dry = _run(location, instance, table=table)  # dry_run defaults to true
        assert dry.success
        logged = "\n".join(e.user_message for e in instance.all_logs(dry.run_id))
        assert "date=2024-01-01 (ended 2024-01-02 00:00): 3 file(s)" in logged and "dry run: nothing was" in logged
        assert {p: data_files(p) for p in files} == files and find_backups(spark, database, table) == []

        real = _run(location, instance, table=table, dry_run=False)
        assert real.success
        (output,) = [e for e in real.all_node_events if e.event_type_value == "STEP_OUTPUT"]
        metadata = output.step_output_data.metadata
        assert metadata["partitions_archived"].value == 2 and metadata["codec"].value == "gzip"
        assert metadata["archived"].value == "date=2024-01-01, date=2024-01-02"
        assert (metadata["files_before"].value, metadata["files_after"].value) == (6, 2)
        assert metadata["rows_before"].value == metadata["rows_after"].value == 400
        assert metadata["checksum_before"].value == metadata["checksum_after"].value != ""
        assert metadata["bytes_before"].value > 0 and metadata["bytes_after"].value > 0
        materialized = instance.fetch_materializations(key, limit=10).records
        assert sorted(r.partition_key for r in materialized) == ["date=2024-01-01", "date=2024-01-02"]
        for check in (ROW_COUNT, CHECKSUM):
            (record,) = instance.event_log_storage.get_asset_check_execution_history(
                dg.AssetCheckKey(key, check), limit=5
            )
            evaluation = record.event.dagster_event.event_specific_data
            assert evaluation.passed and record.run_id == real.run_id
        assert instance.get_run_by_id(real.run_id).is_success
    assert rows_of(spark, table) == before  # every row, every value
    assert all(len(data_files(data_dir / "ev" / f"date={d['date']}")) == 1 for d in DATES)
    today = data_dir / "ev" / f"date={utc_now():%Y-%m-%d}"
    codecs = [_codecs(spark, data_dir / "ev" / f"date={d['date']}") for d in DATES]
    assert codecs == [{"GZIP"}, {"GZIP"}] and _codecs(spark, today) == {"SNAPPY"}  # the newer one left alone

    (schedule,) = [s for s in location.schedules if s.name == "archive_schedule"]
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    (request,) = schedule.evaluate_tick(dg.build_schedule_context()).run_requests
    assert request.run_config["ops"]["archive"]["config"] == {"table": table, "dry_run": False}


def test_archive_job_refuses_a_bad_value_naming_its_key(spark, metastore, database, data_dir):
    location, table = _location(spark, metastore, database, data_dir)
    before = rows_of(spark, table)
    with dg.instance_for_test() as instance:
        result = _run(location, instance, table=table, dry_run=False, older_than="soon")
        assert_failed_with(
            result,
            "archive",
            "config.older_than: 'soon' is not an age; write a positive number of hours, days or weeks: 36h, 90d, 2w",
        )
        other = _run(location, instance, table=f"{database}.none_such", dry_run=False)
        assert not other.success
        assert f"set table_overrides.{database}.none_such.archive.older_than" in str(
            other.failure_data_for_node("archive").user_failure_data.description
        )
    assert rows_of(spark, table) == before and find_backups(spark, database, table) == []
