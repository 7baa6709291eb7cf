"""An observation run reads again only what may have changed, and never misses a change: real Spark, metastore,
files and instance. A directory's time is set back as time passing would (a directory last changed an hour ago)."""

from __future__ import annotations

import os

import dagster as dg

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine.fs.dirtimes import directory_times
from lakekeeper_dagster.engine.fs.listing import list_directories
from lakekeeper_dagster.engine.hive.catalog import list_partitions, partition_names, read_table
from lakekeeper_dagster.engine.hive.model import partition_clause, partition_name, partition_spec
from lakekeeper_dagster.surface import observation_run
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.changes import default_location, full_reads_due, keep_full_read
from lakekeeper_dagster.surface.metadata import FULL_READ_KEY
from lakekeeper_dagster.surface.observations import OBSERVE_JOB, read_observed_snapshot
from lakekeeper_dagster_tests.engine.hive.test_catalog import AWKWARD_VALUES
from lakekeeper_dagster_tests.surface.identity import asset_key, partitions_def_name
from lakekeeper_dagster_tests.surface.test_observations import (
    DAYS,
    NAMES,
    definitions,
    observations_of,
    observe,
)
from lakekeeper_dagster_tests.tables import data_files, set_back, write_files

HOUR = 3600


def summary(defs, instance, table: str) -> dict:
    result = defs.get_job_def(OBSERVE_JOB).execute_in_process(instance=instance)
    return observations_of(result, summaries=True)[(table, None)]


def test_an_unchanged_run_lists_nothing_and_each_change_is_listed_and_recorded(
    spark, metastore, database, tables, monkeypatch
):
    defs = definitions(spark, metastore, database)
    ev = tables / "ev"
    with dg.instance_for_test() as instance:
        assert observe(defs, instance)[2] == "5 unit(s) of 2 table(s), 5 listed, 2 table(s) read in full"
        # every directory was written just now: its time is not trusted, it is listed again
        assert observe(defs, instance)[::2] == ({}, "5 unit(s) of 2 table(s), 5 listed, 0 table(s) read in full")
        set_back(*(ev / p for p in NAMES), tables / "flat")
        assert observe(defs, instance)[2] == "5 unit(s) of 2 table(s), 5 listed, 0 table(s) read in full"
        assert observe(defs, instance)[::2] == ({}, "5 unit(s) of 2 table(s), 0 listed, 0 table(s) read in full")

        # A writer racing a run: a file lands right after the run listed a changed directory, leaving a time the next
        # run trusts (older than 5 minutes). The run keeps the time it read before listing: the next one lists again.
        write_files(spark, f"file:{ev / NAMES[0]}", 1500, 10, 1, "parquet")
        set_back(ev / NAMES[0])

        def then_a_writer(session, locations, *args):
            listing = list_directories(session, locations, *args)
            write_files(spark, f"file:{ev / NAMES[0]}", 1600, 10, 1, "parquet")
            set_back(ev / NAMES[0], seconds=HOUR // 2)
            return listing

        monkeypatch.setattr(observation_run, "list_directories", then_a_writer)
        assert sorted(observe(defs, instance)[0]) == [("ev", NAMES[0])]
        monkeypatch.undo()
        observed, _, line = observe(defs, instance)
        assert observed[("ev", NAMES[0])]["file_count"] == len(data_files(ev / NAMES[0]))
        assert line.startswith("5 unit(s) of 2 table(s), 1 listed")

        write_files(spark, f"file:{ev / NAMES[1]}", 2000, 10, 1, "parquet")  # a file added
        data_files(ev / NAMES[2])[0].unlink()  # a file removed
        observed, _, line = observe(defs, instance)
        assert sorted(observed) == [("ev", NAMES[1]), ("ev", NAMES[2])]
        assert line == "5 unit(s) of 2 table(s), 2 listed, 0 table(s) read in full"
        assert (observed[("ev", NAMES[1])]["file_count"], observed[("ev", NAMES[2])]["file_count"]) == (4, 6)

        new = {"date": "2024-02-05"}  # a partition added (its location looked up by name), one dropped
        spark.sql(f"ALTER TABLE {database}.ev ADD {partition_clause(new)}")
        write_files(spark, f"file:{ev / 'date=2024-02-05'}", 3000, 10, 2, "parquet")
        spark.sql(f"ALTER TABLE {database}.ev DROP {partition_clause(DAYS[3])}")
        observed, _, _ = observe(defs, instance)
        assert sorted(observed) == [("ev", "date=2024-02-05")]
        names = [*NAMES[:3], "date=2024-02-05"]
        assert instance.get_dynamic_partitions(partitions_def_name(database, "ev")) == names
        assert sorted(read_observed_snapshot(instance, asset_key(database, "ev"))) == names
        assert summary(defs, instance, "ev")["partitions"] == 4

        # other planning thresholds can change a decision without the files: every table is read in full
        settings = {"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}, "block_size_mb": 1}
        config = parse_config(settings, "t")
        other = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
        assert observe(other, instance)[2] == "5 unit(s) of 2 table(s), 5 listed, 2 table(s) read in full"


def test_what_the_times_cannot_show_is_seen_at_the_tables_full_read(spark, metastore, database, tables):
    """A file appended to in place, and a partition moved with SET LOCATION, keep their directory's time: the next
    full read of the table (its slot of `observation.full_read_hours`) sees them, and keeps the moved location."""
    defs = definitions(spark, metastore, database)
    ev, key = tables / "ev", asset_key(database, "ev")
    with dg.instance_for_test() as instance:
        observe(defs, instance)
        set_back(*(ev / p for p in NAMES), tables / "flat")
        observe(defs, instance)

        appended = data_files(ev / NAMES[1])[0]
        with open(appended, "ab") as out:
            out.write(b"\0" * 1000)
        moved = tables / "moved"
        moved.mkdir()
        for index, source in enumerate(data_files(ev / NAMES[3])[:2]):
            (moved / f"part-{index}.parquet").write_bytes(source.read_bytes())
        spark.sql(f"ALTER TABLE {database}.ev {partition_clause(DAYS[3])} SET LOCATION '{moved.as_uri()}'")
        set_back(moved)  # (the append left its directory's time alone)
        assert observe(defs, instance)[0] == {}  # neither is seen by name and directory time

        instance.run_storage.set_cursor_values({FULL_READ_KEY + key.to_user_string(): "0"})  # its slot came
        observed, _, line = observe(defs, instance)
        assert line == "5 unit(s) of 2 table(s), 4 listed, 1 table(s) read in full"
        assert sorted(observed) == [("ev", NAMES[1]), ("ev", NAMES[3])]
        assert observed[("ev", NAMES[1])]["total_bytes"] == sum(f.stat().st_size for f in data_files(ev / NAMES[1]))
        assert observed[("ev", NAMES[3])]["file_count"] == 2
        assert read_observed_snapshot(instance, key)[NAMES[3]][-1] == f"file:{moved}"

        write_files(spark, f"file:{moved}", 4000, 10, 1, "parquet")  # the moved location is the one observed
        assert observe(defs, instance)[0][("ev", NAMES[3])]["file_count"] == 3


def test_full_reads_are_spread_over_their_period_each_table_once(tmp_path):
    keys = {f"db.t{i}": dg.AssetKey(["hive", "db", f"t{i}"]) for i in range(200)}
    start = 1_700_000_000.0
    with dg.instance_for_test() as instance:
        assert full_reads_due(instance, keys, start, 24, "f") == set(keys)  # never read in full
        for key in keys.values():
            keep_full_read(instance, key, start, "f")
        due_by_hour = []
        for hour in range(1, 25):
            due = full_reads_due(instance, keys, start + hour * HOUR, 24, "f")
            due_by_hour.append(len(due))
            for table in due:
                keep_full_read(instance, keys[table], start + hour * HOUR, "f")
        assert sum(due_by_hour) == len(keys) and max(due_by_hour) < len(keys) / 4
        assert full_reads_due(instance, keys, start + 24 * HOUR, 24, "g") == set(keys)  # other thresholds


def test_directory_times_come_from_the_parents_listing(spark, tmp_path):
    (tmp_path / "t" / "a=1").mkdir(parents=True)
    (tmp_path / "t" / "a=2").mkdir()
    (tmp_path / "t" / "file").write_text("x")
    set_back(tmp_path / "t" / "a=1", seconds=7200)
    locations = [
        f"file:{tmp_path}/t/a=1",
        f"file:{tmp_path}/t/a=2",
        f"file:{tmp_path}/t/file",
        f"file:{tmp_path}/no/a=1",
    ]
    times = directory_times(spark, locations)
    assert times[locations[0]] == int(os.stat(tmp_path / "t" / "a=1").st_mtime * 1000)
    assert times[locations[1]] > times[locations[0]] + 7000 * 1000
    assert times[locations[2]] is None and times[locations[3]] is None  # a file, and a parent that does not exist


def test_names_and_default_locations_agree_with_the_metastore_for_awkward_values(spark, database, data_dir, tmp_path):
    """What a run that reads names only derives (specs, default locations) is what the full read gives."""
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.p (id INT) PARTITIONED BY (k STRING) STORED AS PARQUET "
        f"LOCATION '{data_dir.as_uri()}'"
    )
    for i, value in enumerate(AWKWARD_VALUES):
        spark.sql(f"INSERT INTO {database}.p {partition_clause({'k': value})} VALUES ({i})")
    spark.sql(f"ALTER TABLE {database}.p ADD PARTITION (k='custom') LOCATION '{(tmp_path / 'elsewhere').as_uri()}'")
    spark.sql(f"INSERT INTO {database}.p PARTITION (k) VALUES (100, NULL)")
    info = read_table(spark, database, "p")
    full = {unit.partition: unit.location for unit in list_partitions(spark, info)}
    assert partition_names(spark, info) == sorted(full) and len(full) == len(AWKWARD_VALUES) + 2
    for name, location in full.items():
        assert partition_name(partition_spec(name, info.partition_columns)) == name
        assert (default_location(info, name) == location) == (name != "k=custom"), name
