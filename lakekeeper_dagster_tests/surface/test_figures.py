"""What a user compares on the run, asset and check pages: the figures at the top level of the metadata (not in a
JSON blob), sizes as text, a Markdown summary, a per-partition table for a run over several partitions, and the
asset spec following Dagster's table conventions; on real Spark, a real metastore and real files."""

from __future__ import annotations

import json
import re

import dagster as dg
import pytest

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine.hive.model import quote_identifier, sql_string
from lakekeeper_dagster.engine.ops.options import UnitResult
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster.surface.assets import CHECKSUM, ROW_COUNT, WITHIN_TARGET
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.checks import LIVE_MATCHES_BACKUP
from lakekeeper_dagster.surface.figures import unit_metadata
from lakekeeper_dagster.surface.metadata import OBSERVED_SNAPSHOT_KEY, RANGE_END_TAG, RANGE_START_TAG
from lakekeeper_dagster.surface.table_files import keep_compacted, table_files
from lakekeeper_dagster_tests.surface.identity import asset_key, partitions_def_name
from lakekeeper_dagster_tests.tables import data_files, make_table, rows_of

PARTITIONS = [{"date": "2024-01-01"}, {"date": "2024-01-02"}, {"date": "2024-01-03"}]
NAMES = [f"date={p['date']}" for p in PARTITIONS]
SIZE = re.compile(r"^\d+(\.\d)? (B|KB|MB)$")  # as the CLI prints sizes


@pytest.fixture
def location(spark, metastore, database, data_dir):
    make_table(spark, database, "ev", data_dir / "ev", partitions=PARTITIONS, files=4, rows=100)
    config = parse_config({"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}}, "t")
    return build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))


def _count(spark, database: str, name: str) -> int:
    """The partition's rows counted by Spark, not by the engine."""
    value = name.split("=", 1)[1]
    return spark.sql(f"SELECT count(*) FROM {quote_identifier(database)}.ev WHERE date = {sql_string(value)}").first()[
        0
    ]


def _values(metadata: dict) -> dict:
    return {k: v.value for k, v in metadata.items()}


def _run(location, instance, database: str, **kwargs) -> dg.ExecuteInProcessResult:
    location.get_job_def("sync_partitions_job").execute_in_process(instance=instance)
    result = location.get_implicit_global_asset_job_def().execute_in_process(
        instance=instance, asset_selection=[asset_key(database, "ev")], **kwargs
    )
    assert result.success
    return result


def test_a_one_partition_run_shows_its_figures_at_the_top(spark, location, database, data_dir):
    before = rows_of(spark, f"{database}.ev")
    with dg.instance_for_test() as instance:
        assert location.get_job_def("observe_partitions_job").execute_in_process(instance=instance).success
        result = _run(location, instance, database, partition_key=NAMES[0])
        (materialization,) = result.get_asset_materialization_events()
        m = _values(materialization.materialization.metadata)
        checks = {e.check_name: _values(e.metadata) for e in result.get_asset_check_evaluations()}
        # The next run, before any observation, starts from what this one left (the observed 4 files now 1).
        (after,) = _run(location, instance, database, partition_key=NAMES[1]).get_asset_materialization_events()
        follow = _values(after.materialization.metadata)
        assert (follow["table_files_before"], follow["table_files_after"]) == (9, 6)
    rows = _count(spark, database, NAMES[0])
    assert rows == 100
    assert (m["rows_before"], m["rows_after"], m["dagster/row_count"]) == (rows, rows, rows)
    assert m["lakekeeper/state"] == "compacted"
    assert m["checksum_before"] == m["checksum_after"] and re.fullmatch(r"-?\d+", m["checksum_before"])
    assert (m["files_before"], m["files_after"]) == (4, 1)
    assert SIZE.match(m["size_before"]) and SIZE.match(m["size_after"])
    assert "details" not in m and "per_partition" not in m  # one partition: its values are the top level
    summary = m["summary"]
    assert f"| rows | {rows} | {rows} |" in summary and "| files | 4 | 1 |" in summary
    assert f"`{m['checksum_before']}`" in summary and m["backup_table"] in summary
    # What it bought a full scan of the table: the other partitions' files as observed, this one's as compacted.
    assert (m["table_files_before"], m["table_files_after"], m["table_files_fewer"]) == (12, 9, 1.33)
    assert "A full scan of the table opens 9 files instead of 12 (1.33x fewer" in summary

    assert checks[ROW_COUNT] == {"partitions": NAMES[0], "rows_before": rows, "rows_after": rows}
    assert checks[CHECKSUM] == {
        "partitions": NAMES[0],
        "checksum_before": m["checksum_before"],
        "checksum_after": m["checksum_after"],
    }
    assert (checks[WITHIN_TARGET]["files_before"], checks[WITHIN_TARGET]["files_after"]) == (4, 1)
    # The independent re-read of the originals the backup kept gives the checksum the run read before.
    backup = checks[LIVE_MATCHES_BACKUP]
    assert (backup["rows_backup"], backup["rows_live"]) == (rows, rows)
    assert backup["checksum_backup"] == backup["checksum_live"] == m["checksum_before"]
    assert backup["backup_table"] == m["backup_table"] and backup["partitions"] == NAMES[0]
    assert len(data_files(data_dir / "ev" / NAMES[0])) == 1
    assert rows_of(spark, f"{database}.ev") == before


def test_a_run_over_several_partitions_shows_totals_and_a_table_per_partition(spark, location, database, data_dir):
    before = rows_of(spark, f"{database}.ev")
    with dg.instance_for_test() as instance:
        _run(location, instance, database, partition_key=NAMES[0])  # already compacted: skipped by the range run
        result = _run(location, instance, database, tags={RANGE_START_TAG: NAMES[0], RANGE_END_TAG: NAMES[2]})
        materializations = result.get_asset_materialization_events()
        assert {e.partition for e in materializations} == set(NAMES)
        m = _values(materializations[0].materialization.metadata)
        checks = {e.check_name: _values(e.metadata) for e in result.get_asset_check_evaluations()}
        assert instance.get_dynamic_partitions(partitions_def_name(database, "ev")) == NAMES
    counts = {name: _count(spark, database, name) for name in NAMES}
    table = {r.data["partition"]: r.data for r in m["per_partition"].records}
    assert [c.name for c in m["per_partition"].schema.columns] == [
        "partition",
        "status",
        "files_before",
        "files_after",
        "size_before",
        "size_after",
        "rows_before",
        "rows_after",
        "checksum_before",
        "checksum_after",
        "seconds",
        "reason",
    ]
    assert {name: row["status"] for name, row in table.items()} == dict(
        zip(NAMES, ["skipped", "compacted", "compacted"], strict=True)
    )
    for name in NAMES[1:]:
        row = table[name]
        assert (row["files_before"], row["files_after"]) == (4, 1)
        assert row["rows_before"] == row["rows_after"] == counts[name] == 100
        assert row["checksum_before"] == row["checksum_after"] and row["checksum_before"]
        assert SIZE.match(row["size_before"]) and SIZE.match(row["size_after"])
    skipped = table[NAMES[0]]
    assert (skipped["files_before"], skipped["files_after"], skipped["rows_before"]) == (1, 1, None)
    assert skipped["reason"]
    # The totals: the compacted partitions' rows and checksums combined, every partition's files.
    assert m["rows_before"] == m["rows_after"] == 200
    assert "dagster/row_count" not in m  # a partition's own count only: the run's totals are not one partition's
    assert m["lakekeeper/state"] == "2 compacted, 1 skipped"
    total = sum(int(table[name]["checksum_before"]) for name in NAMES[1:])
    assert m["checksum_before"] == m["checksum_after"] == str(total)
    assert (m["files_before"], m["files_after"]) == (9, 3)
    assert "table_files_before" not in m  # a table never observed: what a scan of it opened is not known
    assert (m["partitions_compacted"], m["partitions_skipped"], m["partitions_failed"]) == (2, 1, 0)
    assert "2 compacted, 1 skipped" in m["summary"] and f"`{NAMES[0]}` skipped" in m["summary"]

    assert checks[ROW_COUNT]["partitions"] == "all 2 partitions match (rows)"
    assert (checks[ROW_COUNT]["rows_before"], checks[ROW_COUNT]["rows_after"]) == (200, 200)
    assert [(r.data["partition"], r.data["rows_after"]) for r in checks[ROW_COUNT]["per_partition"].records] == [
        (NAMES[1], 100),
        (NAMES[2], 100),
    ]
    assert checks[CHECKSUM]["partitions"] == "all 2 partitions match (checksum)"
    assert checks[CHECKSUM]["checksum_before"] == checks[CHECKSUM]["checksum_after"] == str(total)
    assert all(r.data["matches"] for r in checks[CHECKSUM]["per_partition"].records)
    assert (checks[WITHIN_TARGET]["files_before"], checks[WITHIN_TARGET]["files_after"]) == (8, 2)
    backup = checks[LIVE_MATCHES_BACKUP]
    assert backup["partitions"] == "all 2 partitions match (rows and checksum)"
    assert (backup["rows_backup"], backup["rows_live"], backup["checksum_live"]) == (200, 200, str(total))
    assert len(backup["per_partition"].records) == 2
    assert all(len(data_files(data_dir / "ev" / name)) == 1 for name in NAMES)
    assert rows_of(spark, f"{database}.ev") == before


def test_the_asset_spec_follows_dagsters_table_conventions(spark, metastore, database, data_dir):
    make_table(spark, database, "ev", data_dir / "ev", partitions=PARTITIONS[:1], files=1, rows=10)
    typed = data_dir / "typed"
    spark.sql(
        f"CREATE EXTERNAL TABLE {quote_identifier(database)}.typed (id BIGINT, at TIMESTAMP, code VARCHAR(10), "
        f"flag CHAR(3), amount DECIMAL(10,2), tags ARRAY<STRING>) STORED AS PARQUET "
        f"LOCATION {sql_string(typed.as_uri())}"
    )
    config = parse_config({"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}}, "t")
    graph = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False)).resolve_asset_graph()

    ev = graph.get(asset_key(database, "ev"))
    assert ev.metadata["dagster/table_name"] == f"{database}.ev"
    assert ev.metadata["dagster/uri"] == (data_dir / "ev").as_uri().replace("file:///", "file:/")
    schema = ev.metadata["dagster/column_schema"]
    assert [(c.name, c.type, c.description) for c in schema.columns] == [
        ("id", "bigint", None),
        ("v", "string", None),
        ("n", "int", None),
        ("date", "string", "partition column"),
    ]
    assert "Materializing a partition" in ev.description and "partitioned by date" in ev.description

    flat = graph.get(asset_key(database, "typed"))
    assert flat.metadata["dagster/table_name"] == f"{database}.typed"
    assert [(c.name, c.type) for c in flat.metadata["dagster/column_schema"].columns] == [
        ("id", "bigint"),
        ("at", "timestamp"),
        ("code", "varchar(10)"),
        ("flag", "char(3)"),
        ("amount", "decimal(10,2)"),
        ("tags", "array<string>"),
    ]
    assert "a partition" not in flat.description and "not partitioned" in flat.description


def _unit(partition: str | None, status: UnitStatus, before: int, after: int, carried: int = 0) -> UnitResult:
    return UnitResult(
        "d", "t", partition, "/x", status, "", files_before=before, files_after=after, carried_files=carried
    )


@pytest.mark.pure
def test_what_a_run_bought_a_scan_is_said_only_as_far_as_it_is_known():
    kept = {"p=1": 4, "p=2": 4, "p=3": 7}  # each unit's files as last observed or compacted since
    done = [_unit("p=1", UnitStatus.COMPACTED, 4, 1), _unit("p=2", UnitStatus.SKIPPED, 3, 0)]
    m = unit_metadata(done, kept)
    assert (m["table_files_before"], m["table_files_after"], m["table_files_fewer"]) == (14, 11, 1.27)
    assert "opens 11 files instead of 14 (1.27x fewer; its other partitions as last observed" in m["summary"].value
    assert "table_files_before" not in unit_metadata(done, {})  # never observed
    assert "table_files_before" not in unit_metadata([_unit("p=1", UnitStatus.SKIPPED, 4, 0)], kept)  # none compacted
    late = unit_metadata([_unit("p=1", UnitStatus.COMPACTED, 4, 1, carried=5)], kept)  # late files carried over
    assert (late["table_files_before"], late["table_files_after"]) == (15, 17) and "table_files_fewer" not in late
    assert "opens 17 files instead of 15 (its other partitions" in late["summary"].value
    whole = unit_metadata([_unit(None, UnitStatus.COMPACTED, 9, 9)], {"": 9})  # unpartitioned, nothing fewer
    assert "A full scan of the table opens 9 files, as before." in whole["summary"].value


@pytest.mark.pure
def test_the_files_a_run_left_stand_until_an_observation_records_the_unit_again():
    key = dg.AssetKey(["hive", "d", "t"])

    def observed(files: dict[str, int]) -> None:  # as the observation job keeps its snapshot: [files, ...] a unit
        text = json.dumps({unit: [count, 0, 0, False, 0] for unit, count in files.items()})
        instance.run_storage.set_cursor_values({OBSERVED_SNAPSHOT_KEY + key.to_user_string(): text})

    with dg.instance_for_test() as instance:
        assert table_files(instance, key) == {}  # never observed
        observed({"p=1": 6, "p=2": 6})
        keep_compacted(instance, key, {"p=1": 1})
        assert table_files(instance, key) == {"p=1": 1, "p=2": 6}
        observed({"p=1": 6, "p=2": 5})  # an observation that listed p=1 before the run committed: its entry stands
        keep_compacted(instance, key, {"p=3": 2})  # a partition the snapshot does not know yet
        assert table_files(instance, key) == {"p=1": 1, "p=2": 5, "p=3": 2}
        observed({"p=1": 2, "p=2": 5, "p=3": 2})  # p=1 recorded again (a file since): the snapshot's figure is newer
        assert table_files(instance, key) == {"p=1": 2, "p=2": 5, "p=3": 2}
