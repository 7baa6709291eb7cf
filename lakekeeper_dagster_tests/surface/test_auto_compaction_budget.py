"""An estate's observation and auto-compaction on a real instance, Spark, metastore and files: first sight records
what the sensor needs and each table's health; the sensor keeps to its hourly budget and its quiet hours."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import dagster as dg

from lakekeeper_dagster.surface.observations import keep_observed_snapshot, read_observed_snapshot
from lakekeeper_dagster.surface.sensors.file_count import execute_request
from lakekeeper_dagster_tests.surface.identity import asset_key
from lakekeeper_dagster_tests.surface.test_observations import (
    DAYS,
    NAMES,
    definitions,
    observe,
    run_observation,
    tick,
)
from lakekeeper_dagster_tests.tables import data_files, make_table, write_files

MB = 1024**2


def test_first_sight_records_the_units_needing_compaction_and_each_tables_health(spark, metastore, database, tables):
    """A table seen for the first time: one observation per unit needing compaction and its summary, not one a
    partition; a healthy partition is recorded once it changes; the summary tells how long the oldest unit needing
    compaction has waited."""
    make_table(spark, database, "mixed", tables / "mixed", partitions=DAYS, files=1)
    write_files(spark, f"file:{tables / 'mixed' / NAMES[1]}", 7000, 10, 3, "parquet")  # 4 files: needs compaction
    defs = definitions(spark, metastore, database)
    with dg.instance_for_test() as instance:
        units, summaries, _ = observe(defs, instance)
        assert sorted(p for t, p in units if t == "mixed") == [NAMES[1]]
        summary = summaries[("mixed", None)]
        assert (summary["partitions"], summary["files"], summary["backlog"]) == (4, 7, 1)
        assert summary["small_file_ratio"] == round(summary["small_files"] / 7, 4)
        assert summary["backlog_bytes"] == sum(f.stat().st_size for f in data_files(tables / "mixed" / NAMES[1]))
        assert summary["oldest_backlog_hours"] == 0.0  # began to need it in this very run

        write_files(spark, f"file:{tables / 'mixed' / NAMES[3]}", 8000, 10, 1, "parquet")
        units, _, _ = observe(defs, instance)
        assert sorted(units) == [("mixed", NAMES[3])] and units[("mixed", NAMES[3])]["file_count"] == 2

        # NAMES[1] began to need compaction two hours ago (its snapshot entry says since when): the summary says so
        key = asset_key(database, "mixed")
        snapshot = read_observed_snapshot(instance, key)
        snapshot[NAMES[1]][4] -= 7200
        keep_observed_snapshot(instance, key, snapshot)
        units, summaries, _ = observe(defs, instance)
        assert units == {} and 2.0 <= summaries[("mixed", None)]["oldest_backlog_hours"] < 2.1
        assert read_observed_snapshot(instance, key)[NAMES[1]][4] == snapshot[NAMES[1]][4]


def test_the_hourly_budget_holds_requests_back_until_its_hour_has_passed(spark, metastore, database, tables):
    defs = definitions(spark, metastore, database, max_mb_per_hour=1)
    with dg.instance_for_test() as instance:
        observed = run_observation(defs, instance)
        spent = json.dumps({"requested": [[time.time() - 600, MB]]})  # 1 MB requested ten minutes ago
        held = tick(defs, instance, spent)
        assert held.run_requests == []
        assert "the hourly budget (sensor.max_mb_per_hour: 1 MB) is spent" in held.skip_reason.skip_message
        cursor = json.loads(held.cursor)
        assert cursor["requested"] == [[json.loads(spent)["requested"][0][0], MB]]

        # an hour later the same observations are requested, and what they rewrite is counted for the next hour
        aged = tick(defs, instance, json.dumps({**cursor, "requested": [[time.time() - 3700, MB]]}))
        (request,) = aged.run_requests
        assert request.run_config["ops"][f"hive__{database}__ev"]["config"]["partitions"] == [NAMES[0], NAMES[2]]
        small = sum(observed[("ev", p)]["small_bytes"] for p in (NAMES[0], NAMES[2]))
        assert [size for _, size in json.loads(aged.cursor)["requested"]] == [small]


def test_quiet_hours_read_and_request_nothing(spark, metastore, database, tables, monkeypatch):
    zone = "Europe/Berlin"
    now = datetime.now(ZoneInfo(zone))
    window = f"{now - timedelta(hours=1):%H:%M}-{now + timedelta(hours=1):%H:%M}"
    quiet = definitions(spark, metastore, database, quiet_hours=[window], timezone=zone)
    with dg.instance_for_test() as instance:
        run_observation(quiet, instance)
        read = []
        fetch = instance.fetch_observations
        monkeypatch.setattr(instance, "fetch_observations", lambda *a, **k: read.append(a) or fetch(*a, **k))
        result = tick(quiet, instance, '{"x": 1}')
        assert result.run_requests == [] and result.cursor == '{"x": 1}' and read == []
        assert f"quiet hours (sensor.quiet_hours) until {now + timedelta(hours=1):%Y-%m-%d %H:%M} {zone}" in (
            result.skip_reason.skip_message
        )
        assert len(tick(definitions(spark, metastore, database), instance).run_requests) == 1


def test_ticks_read_the_tables_in_turn_from_where_the_last_one_stopped(spark, metastore, database, tables):
    """A tick that spends `max_observations_per_tick` on the first tables makes the next one start after them, so
    every table's partitions get ranked and requested, not only the first table's."""
    make_table(spark, database, "ev2", tables / "ev2", partitions=DAYS, files=6, rows=60)
    defs = definitions(spark, metastore, database, max_observations_per_tick=2, max_partitions_per_run=1)
    with dg.instance_for_test() as instance:
        run_observation(defs, instance)
        first = tick(defs, instance)
        assert [r.asset_selection for r in first.run_requests] == [[asset_key(database, "ev")]]
        assert json.loads(first.cursor)["next_table"] == f"{database}.ev2"
        second = tick(defs, instance, first.cursor)
        assert {tuple(r.asset_selection) for r in second.run_requests} == {(asset_key(database, "ev2"),)}


def test_an_observation_read_again_after_its_unit_was_compacted_is_not_requested_again(
    spark, metastore, database, tables
):
    """The budget leaves the partition observed first and requests the one observed later, so the next tick reads
    both observations again: the compacted one is not requested again (its run started after its observation)."""
    write_files(spark, f"file:{tables / 'ev' / NAMES[2]}", 3000, 10, 6, "parquet")  # 13 files: it ranks first
    defs = definitions(spark, metastore, database, max_runs_per_tick=1, max_partitions_per_run=1)
    with dg.instance_for_test() as instance:
        run_observation(defs, instance)
        first = tick(defs, instance)
        (request,) = first.run_requests
        assert request.partition_key == NAMES[2]
        assert execute_request(defs, instance, request).success
        second = tick(defs, instance, first.cursor)
        assert [r.partition_key for r in second.run_requests] == [NAMES[0]]
