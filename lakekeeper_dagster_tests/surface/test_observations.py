"""Observations and the file-count sensor on a real instance, real Spark, a real metastore and real files."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine.hive.model import partition_clause
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.jobs import observe as observe_job
from lakekeeper_dagster.surface.metadata import BACKLOG_KEY, OBSERVED_SNAPSHOT_KEY, RETRY_TAG, TABLE_TAG
from lakekeeper_dagster.surface.observations import OBSERVE_JOB, without_backlog
from lakekeeper_dagster.surface.sensors.file_count import SENSOR_NAME, execute_request
from lakekeeper_dagster.surface.sensors.runs import MAX_RETRIES
from lakekeeper_dagster_tests.engine.rewrite.test_keep_large import P1, P2, identity, mixed_table
from lakekeeper_dagster_tests.surface.identity import asset_key, job_name, partitions_def_name
from lakekeeper_dagster_tests.tables import data_files, make_table, rows_of, set_back, write_files

DAYS = [{"date": f"2024-02-0{day}"} for day in (1, 2, 3, 4)]
NAMES = [f"date={d['date']}" for d in DAYS]


def make_observed_tables(spark, database: str, data_dir):
    """`ev`: 4 partitions of 3 files, two of them topped up to 7; `flat`: 5 files (override: min_files 10)."""
    make_table(spark, database, "ev", data_dir / "ev", partitions=DAYS, files=3, rows=60)
    for index in (0, 2):
        write_files(spark, f"file:{data_dir / 'ev' / NAMES[index]}", 1000 + index * 100, 40, 4, "parquet")
    make_table(spark, database, "flat", data_dir / "flat", files=5)
    return data_dir


def definitions(spark, metastore, database, **settings):
    config = parse_config(
        {
            "tables": {"databases": [database]},
            "metastore": {"uri": metastore.uri},
            "sensor": {"min_files": 5, **settings},
            "table_overrides": {f"{database}.flat": {"min_files": 10}},
        },
        "test",
    )
    return build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))


def observations_of(result: dg.ExecuteInProcessResult, summaries: bool = False) -> dict:
    """The run's observations by (table, partition): the units' figures, or (`summaries`) the tables' summaries."""
    found = {}
    for event in result.all_events:
        if event.event_type == dg.DagsterEventType.ASSET_OBSERVATION:
            observation = event.event_specific_data.asset_observation
            metadata = {k: v.value for k, v in observation.metadata.items()}
            if (metadata.get("lakekeeper/kind") == "summary") == summaries:
                found[(observation.asset_key.path[-1], observation.partition)] = metadata
    return found


def observe(defs, instance) -> tuple[dict, dict, str]:
    """One observation run's unit observations, its summaries, and its closing line's counts (units, directories
    listed, tables read in full)."""
    result = defs.get_job_def(OBSERVE_JOB).execute_in_process(instance=instance)
    assert result.success
    lines = [e.user_message for e in instance.all_logs(result.run_id) if " table(s) read in full: " in e.user_message]
    return observations_of(result), observations_of(result, summaries=True), lines[0].split(":")[0]


def run_observation(defs, instance, summaries: bool = False) -> dict:
    result = defs.get_job_def(OBSERVE_JOB).execute_in_process(instance=instance)
    assert result.success
    return observations_of(result, summaries)


def stored(instance, database: str) -> dict[str, int]:
    """How many observations the instance holds per table (what the event log grew by)."""
    return {
        table: len(
            instance.fetch_observations(dg.AssetRecordsFilter(asset_key=asset_key(database, table)), 1000).records
        )
        for table in ("ev", "flat")
    }


def tick(defs, instance, cursor=None) -> dg.SensorResult:
    sensor = defs.get_sensor_def(SENSOR_NAME)
    return sensor(dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs))


@pytest.mark.cluster
def test_observation_job_records_file_counts_and_follows_hive_partitions(spark, metastore, database, tables):
    defs = definitions(spark, metastore, database)
    name = partitions_def_name(database, "ev")
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(name, ["date=1999-01-01"])  # gone from Hive: removed
        observed = run_observation(defs, instance)
        assert instance.get_dynamic_partitions(name) == NAMES
        for partition in NAMES:
            files = data_files(tables / "ev" / partition)
            figures = observed[("ev", partition)]
            assert figures["file_count"] == len(files)
            assert figures["total_bytes"] == sum(f.stat().st_size for f in files)
            assert figures["needs_compaction"] is True and figures["target_files"] == 1
        assert [observed[("ev", p)]["file_count"] for p in NAMES] == [7, 3, 7, 3]
        assert observed[("flat", None)]["file_count"] == 5
        assert sorted(observed) == sorted([("ev", p) for p in NAMES] + [("flat", None)])
        # The observations are in the event log, per partition, for the UI and the sensor.
        stored = instance.fetch_observations(
            dg.AssetRecordsFilter(asset_key=asset_key(database, "ev"), asset_partitions=[NAMES[0]]), limit=5
        ).records
        assert [r.asset_observation.metadata["file_count"].value for r in stored] == [7]


def test_a_run_records_only_what_changed_and_a_summary_per_table(spark, metastore, database, tables, monkeypatch):
    """Run 1 records every unit and one summary per table; a run with nothing changed only the summaries; a file
    added to one partition, or a new partition, is recorded again; a failed run, or one that overlapped another,
    does not keep what it saw as the last figures, so the next one records again. Counted in the instance. One
    table a group: the second table is read from the metastore while the first one's directories are listed."""
    monkeypatch.setattr(observe_job, "GROUP_TABLES", 1)
    defs = definitions(spark, metastore, database)
    with dg.instance_for_test() as instance:
        assert sorted(run_observation(defs, instance)) == sorted([("ev", p) for p in NAMES] + [("flat", None)])
        assert stored(instance, database) == {"ev": 5, "flat": 2}  # 4 partitions + summary; the table + summary
        lines = [entry.user_message for entry in instance.all_logs(instance.get_runs(limit=1)[0].run_id)]
        (timings,) = [line for line in lines if line.endswith("s to list their directories")]
        assert timings.startswith("5 unit(s) of 2 table(s), 5 listed, 2 table(s) read in full: ")
        assert "s to read them from the metastore" in timings

        summaries = run_observation(defs, instance, summaries=True)  # nothing changed: the summaries only
        assert stored(instance, database) == {"ev": 6, "flat": 3}
        files = {p: data_files(tables / "ev" / p) for p in NAMES}
        assert 0 <= summaries[("ev", None)].pop("oldest_backlog_hours") < 0.1  # since the first run, a minute ago
        assert summaries[("ev", None)] == {
            "partitions": 4,
            "files": 20,
            "small_files": 20,
            "backlog": 4,
            "bytes": sum(f.stat().st_size for p in NAMES for f in files[p]),
            "small_file_ratio": 1.0,
            "backlog_bytes": sum(f.stat().st_size for p in NAMES for f in files[p]),
            "suspended": 0,
            "suspended_units": "none",
            "lakekeeper/kind": "summary",
        }
        assert (summaries[("flat", None)]["partitions"], summaries[("flat", None)]["files"]) == (1, 5)

        write_files(spark, f"file:{tables / 'ev' / NAMES[1]}", 2000, 10, 1, "parquet")
        assert sorted(run_observation(defs, instance)) == [("ev", NAMES[1])]
        assert stored(instance, database) == {"ev": 8, "flat": 4}

        new = {"date": "2024-02-05"}
        spark.sql(f"ALTER TABLE {database}.ev ADD {partition_clause(new)}")
        spark.sql(f"REFRESH TABLE {database}.ev")
        write_files(spark, f"file:{tables / 'ev' / 'date=2024-02-05'}", 3000, 10, 2, "parquet")
        observed = run_observation(defs, instance)
        assert (
            sorted(observed) == [("ev", "date=2024-02-05")] and observed[("ev", "date=2024-02-05")]["file_count"] == 2
        )

        # A run that fails after recording keeps the previous figures: the next run records the change again.
        write_files(spark, f"file:{tables / 'ev' / NAMES[3]}", 4000, 10, 1, "parquet")
        monkeypatch.setenv("LAKEKEEPER_FAULT", "fail@observations_recorded")
        failed = defs.get_job_def(OBSERVE_JOB).execute_in_process(instance=instance, raise_on_error=False)
        monkeypatch.delenv("LAKEKEEPER_FAULT")
        assert not failed.success and sorted(observations_of(failed)) == [("ev", NAMES[3])]
        assert sorted(run_observation(defs, instance)) == [("ev", NAMES[3])]
        assert run_observation(defs, instance) == {}

        # Another observation run executing meanwhile: this one's figures are not kept either.
        write_files(spark, f"file:{tables / 'ev' / NAMES[2]}", 5000, 10, 1, "parquet")
        other = instance.create_run_for_job(job_def=defs.get_job_def(OBSERVE_JOB), status=dg.DagsterRunStatus.STARTED)
        assert sorted(run_observation(defs, instance)) == [("ev", NAMES[2])]
        instance.report_run_failed(other)
        assert sorted(run_observation(defs, instance)) == [("ev", NAMES[2])]
        assert run_observation(defs, instance) == {}
        summary = run_observation(defs, instance, summaries=True)[("ev", None)]
        assert (summary["partitions"], summary["files"]) == (5, 20 + 1 + 2 + 1 + 1)


def test_sensor_requests_partitions_over_threshold_once_and_its_cursor_survives_a_restart(
    spark, metastore, database, tables, tmp_path
):
    defs = definitions(spark, metastore, database)
    home = tmp_path / "home"
    home.mkdir()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        run_observation(defs, instance)
        first = tick(defs, instance)
        (request,) = first.run_requests  # one run for the two partitions of ev; flat is under its override
        assert request.asset_selection == [asset_key(database, "ev")]
        assert request.tags[TABLE_TAG] == f"{database}.ev"
        assert (
            request.tags["dagster/asset_partition_range_start"],
            request.tags["dagster/asset_partition_range_end"],
        ) == (
            NAMES[0],
            NAMES[2],
        )
        assert request.run_config["ops"][f"hive__{database}__ev"]["config"]["partitions"] == [NAMES[0], NAMES[2]]
        second = tick(defs, instance, first.cursor)
        assert second.run_requests == [] and second.cursor == first.cursor
    with dg.DagsterInstance.from_config(str(home)) as restarted:
        assert tick(defs, restarted, first.cursor).run_requests == []
        assert json.loads(first.cursor)[f"{database}.ev"] > 0


def test_in_flight_and_failed_partitions_are_not_requested(spark, metastore, database, tables, monkeypatch, capfd):
    defs = definitions(spark, metastore, database)
    with dg.instance_for_test() as instance:
        run_observation(defs, instance)
        first = tick(defs, instance)
        (request,) = first.run_requests
        assert request.job_name == job_name(database, "ev")
        # The daemon turns the request into a run of the table's job; the partitions are observed again meanwhile.
        pending = instance.create_run_for_job(
            job_def=defs.resolve_job_def(request.job_name),
            run_config=request.run_config,
            tags=dict(request.tags),
            status=dg.DagsterRunStatus.NOT_STARTED,
            asset_selection=frozenset(request.asset_selection),
        )
        capfd.readouterr()
        assert tick(defs, instance).run_requests == []  # every observation read again: the partitions are in flight
        log = capfd.readouterr().err
        assert (
            "already being compacted or requested, requested again if that run ends without compacting them: "
            "date=2024-02-01, date=2024-02-03"
        ) in log

        # The run fails for real: verification finds a staged file missing, nothing is swapped.
        instance.delete_run(pending.run_id)
        before = rows_of(spark, f"{database}.ev")
        monkeypatch.setenv("LAKEKEEPER_FAULT", "drop-staged-file")
        failed = execute_request(defs, instance, request)
        monkeypatch.delenv("LAKEKEEPER_FAULT")
        assert not failed.success
        assert rows_of(spark, f"{database}.ev") == before
        assert len(data_files(tables / "ev" / NAMES[0])) == 7

        assert run_observation(defs, instance) == {}  # nothing changed: no partition observed again
        capfd.readouterr()
        assert tick(defs, instance, first.cursor).run_requests == []
        log = capfd.readouterr().err
        assert f"{database}.ev: backing off 2 partition(s) whose last compaction failed" in log
        assert failed.run_id[:8] in log

        # Once the back-off is over (none here) the same partitions are requested again, from the failed run: no
        # new observation. Once only: the cursor remembers the failed run was requested again.
        again = definitions(spark, metastore, database, failure_backoff_seconds=0)
        observations = stored(instance, database)
        retry_tick = tick(again, instance, first.cursor)
        (retry,) = retry_tick.run_requests
        assert retry.run_config["ops"][f"hive__{database}__ev"]["config"]["partitions"] == [NAMES[0], NAMES[2]]
        assert retry.tags[TABLE_TAG] == f"{database}.ev" and stored(instance, database) == observations
        assert tick(again, instance, retry_tick.cursor).run_requests == []

        # The retry fails too: requested again after it; once it succeeds, nothing more.
        monkeypatch.setenv("LAKEKEEPER_FAULT", "drop-staged-file")
        assert not execute_request(again, instance, retry).success
        monkeypatch.delenv("LAKEKEEPER_FAULT")
        (second,) = tick(again, instance, retry_tick.cursor).run_requests
        assert second.run_key != retry.run_key
        assert execute_request(again, instance, second).success
        assert [len(data_files(tables / "ev" / p)) for p in NAMES] == [1, 3, 1, 3]
        assert rows_of(spark, f"{database}.ev") == before
        assert tick(again, instance, retry_tick.cursor).run_requests == []


def partitions_of(request: dg.RunRequest, database: str) -> list[str]:
    return request.run_config["ops"][f"hive__{database}__ev"]["config"]["partitions"]


def test_partitions_skipped_for_a_run_are_requested_once_it_ends_without_compacting_them(
    spark, metastore, database, tables, monkeypatch
):
    """Whoever launched the run a partition waited for (here by hand, no sensor tag), the partition comes back once
    that run ended without compacting it and its back-off is over, with no new observation."""
    defs = definitions(spark, metastore, database)
    key = asset_key(database, "ev")
    with dg.instance_for_test() as instance:
        run_observation(defs, instance)
        backfill = instance.create_run_for_job(
            job_def=defs.resolve_job_def(job_name(database, "ev")),
            status=dg.DagsterRunStatus.NOT_STARTED,
            asset_selection=frozenset([key]),
        )
        first = tick(defs, instance)
        assert first.run_requests == []  # the whole table is in flight
        instance.report_run_canceled(backfill)
        observations = stored(instance, database)
        cancelled = tick(defs, instance, first.cursor)
        (request,) = cancelled.run_requests
        assert partitions_of(request, database) == [NAMES[0], NAMES[2]] and stored(instance, database) == observations

        # A hand-launched run of the first partition fails for real: it is backed off, the other one requested.
        before = rows_of(spark, f"{database}.ev")
        monkeypatch.setenv("LAKEKEEPER_FAULT", "drop-staged-file")
        hand = dg.RunRequest(job_name=job_name(database, "ev"), asset_selection=[key], partition_key=NAMES[0])
        assert not execute_request(defs, instance, hand).success
        monkeypatch.delenv("LAKEKEEPER_FAULT")
        assert rows_of(spark, f"{database}.ev") == before
        backing_off = tick(defs, instance, first.cursor)
        assert [partitions_of(r, database) for r in backing_off.run_requests] == [[NAMES[2]]]
        assert tick(defs, instance, backing_off.cursor).run_requests == []  # still backing off
        again = definitions(spark, metastore, database, failure_backoff_seconds=0)  # the back-off is over
        (retry,) = tick(again, instance, backing_off.cursor).run_requests
        assert partitions_of(retry, database) == [NAMES[0]] and stored(instance, database) == observations


def test_a_changed_min_files_reads_the_tables_observations_again(spark, metastore, database, tables):
    with dg.instance_for_test() as instance:
        run_observation(definitions(spark, metastore, database), instance)
        strict = tick(definitions(spark, metastore, database, min_files=8), instance)
        assert strict.run_requests == []  # 7 files < 8
        (request,) = tick(definitions(spark, metastore, database, min_files=7), instance, strict.cursor).run_requests
        assert partitions_of(request, database) == [NAMES[0], NAMES[2]]


def test_sensor_retries_are_capped_and_a_cancelled_run_is_not_requested_again(spark, metastore, database, tables):
    defs = definitions(spark, metastore, database, failure_backoff_seconds=0)
    with dg.instance_for_test() as instance:
        run_observation(defs, instance)
        first = tick(defs, instance)
        (request,) = first.run_requests

        def ended(tags: dict, cancelled: bool = False) -> None:
            run = instance.create_run_for_job(
                job_def=defs.resolve_job_def(request.job_name),
                run_config=request.run_config,
                tags={**request.tags, **tags},
                status=dg.DagsterRunStatus.NOT_STARTED,
                asset_selection=frozenset(request.asset_selection),
            )
            (instance.report_run_canceled if cancelled else instance.report_run_failed)(run)

        ended({RETRY_TAG: str(MAX_RETRIES - 1)})
        (retry,) = tick(defs, instance, first.cursor).run_requests
        assert partitions_of(retry, database) == [NAMES[0], NAMES[2]] and retry.tags[RETRY_TAG] == str(MAX_RETRIES)
        ended(dict(retry.tags))  # the last retry fails too: not requested again
        assert tick(defs, instance, first.cursor).run_requests == []
        ended({}, cancelled=True)  # a first run someone cancelled: not requested again
        assert tick(defs, instance, first.cursor).run_requests == []


def test_the_schedule_does_not_start_an_observation_run_while_one_is_not_finished(spark, metastore, database, tables):
    defs = definitions(spark, metastore, database)
    schedule = defs.get_schedule_def("observe_partitions_schedule")
    with dg.instance_for_test() as instance:
        running = instance.create_run_for_job(job_def=defs.get_job_def(OBSERVE_JOB), status=dg.DagsterRunStatus.STARTED)
        with dg.build_schedule_context(instance=instance) as context:
            skipped = schedule(context)
        assert isinstance(skipped, dg.SkipReason) and running.run_id[:8] in skipped.skip_message
        instance.report_run_failed(running)
        with dg.build_schedule_context(instance=instance) as context:
            assert isinstance(schedule(context), dg.RunRequest)
        # The run it starts overlaps no other: its figures are kept, the next run records nothing.
        assert len(run_observation(defs, instance)) == 5
        assert run_observation(defs, instance) == {}


def test_sync_partitions_skips_a_dropped_table(spark, metastore, database, tables, capfd):
    make_table(spark, database, "gone", tables / "gone", partitions=DAYS[:1], files=1)
    defs = definitions(spark, metastore, database)
    spark.sql(f"DROP TABLE `{database}`.`gone`")
    with dg.instance_for_test() as instance:
        assert defs.get_job_def("sync_partitions_job").execute_in_process(instance=instance).success
        assert instance.get_dynamic_partitions(partitions_def_name(database, "ev")) == NAMES
    assert f"{database}.gone skipped" in capfd.readouterr().err


def test_observe_sensor_compact_observe_again(spark, metastore, database, tables):
    """End to end: many small files -> observation -> sensor -> the requested run -> observed below threshold."""
    defs = definitions(spark, metastore, database, max_partitions_per_run=1, max_runs_per_tick=1)
    before = rows_of(spark, f"{database}.ev")
    with dg.instance_for_test() as instance:
        run_observation(defs, instance)
        cursor = None
        launched = []
        for _ in range(3):  # one partition per run and one run per tick: the cursor pages through the rest
            result = tick(defs, instance, cursor)
            cursor = result.cursor
            for request in result.run_requests:
                run = execute_request(defs, instance, request)
                assert run.success
                launched.append(request.partition_key)
        assert launched == [NAMES[0], NAMES[2]]
        assert [len(data_files(tables / "ev" / p)) for p in NAMES] == [1, 3, 1, 3]
        assert rows_of(spark, f"{database}.ev") == before
        observed = run_observation(defs, instance)  # the compacted partitions only: the others did not change
        assert sorted(observed) == [("ev", NAMES[0]), ("ev", NAMES[2])]
        assert [observed[("ev", p)]["file_count"] for p in (NAMES[0], NAMES[2])] == [1, 1]
        assert observed[("ev", NAMES[0])]["needs_compaction"] is False
        assert tick(defs, instance, cursor).run_requests == []


def test_a_tick_reads_at_most_its_budget_and_the_next_ones_read_on(spark, metastore, database, tables):
    """sensor.max_observations_per_tick bounds a tick's event-log read (its time): with a budget of one observation
    the cursor pages through the records a tick at a time, and every partition needing compaction is requested once."""
    defs = definitions(spark, metastore, database, max_observations_per_tick=1)
    with dg.instance_for_test() as instance:
        run_observation(defs, instance)
        cursor, requested, ticks = None, [], 0
        while ticks < 20:
            result = tick(defs, instance, cursor)
            ticks += 1
            requested += [r.partition_key for r in result.run_requests]
            if result.cursor == cursor:
                break
            cursor = result.cursor
        assert requested == [NAMES[0], NAMES[2]]
        assert ticks >= 5  # ev's four partitions and its summary, one a tick
        everything = tick(definitions(spark, metastore, database, max_partitions_per_run=1), instance)
        assert [r.partition_key for r in everything.run_requests] == [NAMES[0], NAMES[2]]  # in one tick


def test_a_tick_reads_no_event_of_a_table_whose_last_figures_have_no_backlog(
    spark, metastore, database, tables, monkeypatch
):
    """The observation run keeps each table's backlog beside its snapshot (equal to its summary's); a tick reads
    those counts only, and the event log of the tables with a backlog (its time does not grow with partitions)."""
    make_table(spark, database, "big", tables / "big", partitions=DAYS[:2], files=1)
    defs = definitions(spark, metastore, database, max_partitions_per_run=1)
    with dg.instance_for_test() as instance:
        summaries = run_observation(defs, instance, summaries=True)
        keys = {table: asset_key(database, table) for table in ("ev", "flat", "big")}
        kept = instance.run_storage.get_cursor_values({BACKLOG_KEY + k.to_user_string() for k in keys.values()})
        assert {t: int(kept[BACKLOG_KEY + k.to_user_string()]) for t, k in keys.items()} == {
            t: summaries[(t, None)]["backlog"] for t in keys
        }
        assert summaries[("big", None)]["backlog"] == 0 and summaries[("ev", None)]["backlog"] > 0
        assert without_backlog(instance, list(keys.values())) == {keys["big"]}

        read = []
        fetch = instance.fetch_observations
        monkeypatch.setattr(
            instance, "fetch_observations", lambda f, *a, **k: read.append(f.asset_key) or fetch(f, *a, **k)
        )
        assert [r.partition_key for r in tick(defs, instance).run_requests] == [NAMES[0], NAMES[2]]
        assert keys["ev"] in read and keys["big"] not in read

        # A run failing between a table's two writes (big is the first table): its backlog count is already the one
        # of the observations it stored, its observed snapshot the older one, so the next run records the change again.
        write_files(spark, f"file:{tables / 'big' / NAMES[0]}", 6000, 10, 4, "parquet")
        monkeypatch.setenv("LAKEKEEPER_FAULT", "fail@backlog_kept")
        failed = defs.get_job_def(OBSERVE_JOB).execute_in_process(instance=instance, raise_on_error=False)
        monkeypatch.delenv("LAKEKEEPER_FAULT")
        assert not failed.success and observations_of(failed)[("big", NAMES[0])]["needs_compaction"] is True
        assert without_backlog(instance, list(keys.values())) == set()
        assert sorted(run_observation(defs, instance)) == [("big", NAMES[0])]


def test_a_table_observed_before_its_backlog_was_kept_is_read_from_the_event_log():
    """An instance written by a version that kept only the snapshot: the table is not taken as without backlog."""
    key = dg.AssetKey(["hive", "db", "old"])
    with dg.instance_for_test() as instance:
        instance.run_storage.set_cursor_values({OBSERVED_SNAPSHOT_KEY + key.to_user_string(): '{"p=1":[7,70,7,false]}'})
        assert without_backlog(instance, [key]) == set()
        instance.run_storage.set_cursor_values({BACKLOG_KEY + key.to_user_string(): "0"})
        assert without_backlog(instance, [key]) == {key}


def test_one_run_compacts_exactly_the_requested_partitions_of_its_range(spark, metastore, database, tables):
    defs = definitions(spark, metastore, database)
    before = rows_of(spark, f"{database}.ev")
    with dg.instance_for_test() as instance:
        run_observation(defs, instance)
        (request,) = tick(defs, instance).run_requests
        result = execute_request(defs, instance, request)
        assert result.success
        assert [len(data_files(tables / "ev" / p)) for p in NAMES] == [1, 3, 1, 3]  # date=...02 was in the range
        assert rows_of(spark, f"{database}.ev") == before
        checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
        figures = checks["row_count_preserved"].metadata["per_partition"].value.records
        assert {r.data["partition"]: r.data["rows_before"] for r in figures} == {NAMES[0]: 100, NAMES[2]: 100}


def test_a_partition_list_outside_the_run_is_refused_untouched(spark, metastore, database, tables):
    defs = definitions(spark, metastore, database)
    with dg.instance_for_test() as instance:
        run_observation(defs, instance)
        request = dg.RunRequest(
            job_name=job_name(database, "ev"),
            asset_selection=[asset_key(database, "ev")],
            partition_key=NAMES[1],
            run_config={"ops": {f"hive__{database}__ev": {"config": {"partitions": [NAMES[0]]}}}},
        )
        result = execute_request(defs, instance, request)
    assert not result.success
    failure = result.failure_data_for_node(f"hive__{database}__ev")
    assert "does not cover: date=2024-02-01" in failure.error.message
    assert len(data_files(tables / "ev" / NAMES[0])) == 7


def test_observation_sensor_and_run_agree_on_a_partition_with_a_large_file(spark, metastore, database, data_dir):
    """One rule everywhere: the observation says what the run does (its small files rewritten, its large file left
    alone), the sensor requests only that partition, and once compacted it is observed as done."""
    large = mixed_table(spark, database, "mx", data_dir / "mx")[0]
    kept, before = identity(large), rows_of(spark, f"{database}.mx")
    config = parse_config(
        {
            "tables": {"tables": [f"{database}.mx"]},
            "metastore": {"uri": metastore.uri},
            "block_size_mb": 1,
            "sensor": {"min_files": 2},
        },
        "test",
    )
    defs = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
    with dg.instance_for_test() as instance:
        observed = run_observation(defs, instance)
        first = observed[("mx", P1)]
        assert (first["needs_compaction"], first["small_files"], first["large_files"], first["target_files"]) == (
            True,
            3,
            1,
            2,
        )
        assert ("mx", P2) not in observed  # first sight: a partition needing no compaction is in the summary only
        (request,) = tick(defs, instance).run_requests
        assert request.partition_key == P1  # not the partition that cannot get better
        assert execute_request(defs, instance, request).success
        assert identity(large) == kept and len(data_files(data_dir / "mx" / P1)) == 2
        assert rows_of(spark, f"{database}.mx") == before
        again = run_observation(defs, instance)[("mx", P1)]
        assert (again["needs_compaction"], again["small_files"], again["large_files"]) == (False, 1, 1)


def test_a_partition_failing_every_run_is_suspended_shown_and_not_requested_again(spark, metastore, database, tables):
    """A partition whose every run fails (a file holding a column the table does not declare) is suspended after
    `suspend_after_failures` failed runs: its observation and the table's summary say so and the sensor requests it
    no more; asked for by hand it is left alone, and a run's `resume` config has it tried again."""
    extra = spark.range(5000, 5010, numPartitions=1).selectExpr("id", "'x' AS v", "cast(id % 7 AS int) AS n", "1 AS u")
    extra.write.mode("append").parquet(f"file:{tables / 'ev' / NAMES[0]}")
    config = {"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}, "sensor": {"min_files": 5}}
    config = parse_config({**config, "suspend_after_failures": 1}, "test")
    defs = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
    op = f"hive__{database}__ev"
    with dg.instance_for_test() as instance:
        backlog = run_observation(defs, instance, summaries=True)[("ev", None)]["backlog"]
        options = config.compaction_options(database, "ev", owner="test")
        (failed,) = compact_table(spark, database, "ev", options, [NAMES[0]])  # outside Dagster: no failed run
        assert failed.status == UnitStatus.FAILED and "not declare" in failed.reason

        unit = run_observation(defs, instance)[("ev", NAMES[0])]
        assert unit["status"] == "SUSPENDED" and unit["needs_compaction"] is False
        summary = run_observation(defs, instance, summaries=True)[("ev", None)]
        assert summary["suspended"] == 1 and NAMES[0] in summary["suspended_units"]
        assert summary["backlog"] == backlog - 1
        set_back(*(tables / "ev" / p for p in NAMES))
        run_observation(defs, instance)  # listed once more, with their directories' times
        again = run_observation(defs, instance, summaries=True)[("ev", None)]  # not listed: still shown suspended
        assert again["suspended"] == 1 and NAMES[0] in again["suspended_units"] and again["backlog"] == backlog - 1
        requested = [r.partition_key for r in tick(defs, instance).run_requests]
        assert [key for key in requested if key is not None] == [NAMES[2]]  # the flat table's aside

        request = dg.RunRequest(job_name=job_name(database, "ev"), asset_selection=[asset_key(database, "ev")],
                                partition_key=NAMES[0])  # fmt: skip
        by_hand = execute_request(defs, instance, request)
        assert by_hand.success
        (materialization,) = by_hand.get_asset_materialization_events()
        assert materialization.materialization.metadata["partitions_suspended"].value == 1
        resumed = execute_request(defs, instance, request, {"ops": {op: {"config": {"resume": True}}}})
        assert not resumed.success and "not declare" in resumed.failure_data_for_node(op).error.message
    assert len(data_files(tables / "ev" / NAMES[0])) == 8  # never touched
