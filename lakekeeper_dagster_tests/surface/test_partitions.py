"""What the asset's Partitions tab shows, before any job and after a compaction: real Spark, metastore and files."""

from __future__ import annotations

import dagster as dg

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.definitions import build_definitions, spark_resource_for
from lakekeeper_dagster.engine.hive.model import partition_clause
from lakekeeper_dagster.partition_sensor import PARTITIONS_SENSOR, STATE
from lakekeeper_dagster.sensors import SENSOR_NAME
from lakekeeper_dagster_tests.surface.identity import asset_key, partitions_def_name
from lakekeeper_dagster_tests.tables import data_files, make_table, rows_of, write_files

DAYS = [{"date": f"2024-03-0{day}"} for day in (1, 2, 3)]
NAMES = [f"date={d['date']}" for d in DAYS]
MATERIALIZED = "MATERIALIZED"


def apply(instance: dg.DagsterInstance, result: dg.SensorResult) -> None:
    """What the sensor daemon does with a tick's result (dagster 1.13 `_evaluate_sensor`): its asset events are
    reported runless, then its dynamic partition requests are applied."""
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    for request in result.dynamic_partitions_requests or []:
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)


def tick(defs: dg.Definitions, instance: dg.DagsterInstance) -> dg.SensorResult:
    sensor = defs.get_sensor_def(PARTITIONS_SENSOR)
    with dg.build_sensor_context(instance=instance, resources=defs.resources) as context:
        result = sensor(context)
    apply(instance, result)
    return result


def statuses(instance: dg.DagsterInstance, key: dg.AssetKey, name: str) -> dict[str, str | None]:
    """Each partition's status as the UI's Partitions tab reads it (the instance's partition status cache)."""
    keys = instance.get_dynamic_partitions(name)
    found = instance.get_status_by_partition(key, keys, dg.DynamicPartitionsDefinition(name=name))
    return {k: (found[k].value if found[k] else None) for k in keys}


def latest(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str) -> dg.EventLogRecord:
    (record,) = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1
    ).records
    return record


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
    with dg.instance_for_test() as instance:
        assert instance.get_dynamic_partitions(name) == []
        tick(defs, instance)
        assert statuses(instance, key, name) == {NAMES[0]: MATERIALIZED, NAMES[1]: MATERIALIZED, NAMES[2]: None}
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
        assert tick(defs, instance).asset_events == []  # registered once
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
        assert statuses(instance, key, name) == {NAMES[0]: MATERIALIZED, NAMES[1]: MATERIALIZED, NAMES[2]: None}
        compacted = latest(instance, key, NAMES[0])
        assert compacted.run_id == run.run_id and STATE not in compacted.asset_materialization.metadata
        assert latest(instance, key, NAMES[1]).asset_materialization.metadata[STATE].value == "existing"
        assert tick(defs, instance).asset_events == []  # the compaction is not registered over

        spark.sql(f"ALTER TABLE {table} DROP {partition_clause(DAYS[1])}")
        write_files(spark, f"file:{data_dir / 'ev' / NAMES[2]}", 900, 10, 2, "parquet")
        tick(defs, instance)
        assert statuses(instance, key, name) == {NAMES[0]: MATERIALIZED, NAMES[2]: MATERIALIZED}
        assert latest(instance, key, NAMES[2]).asset_materialization.metadata["file_count"].value == 2
