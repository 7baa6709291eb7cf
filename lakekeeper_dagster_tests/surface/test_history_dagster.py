"""The Dagster surface records its runs in the history: the materialization names the run ids its records carry,
and the records name the Dagster run."""

from __future__ import annotations

import dagster as dg

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine.hive.history_table import read_rows
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.metadata import DIFF, HISTORY_RUNS, HISTORY_TABLE
from lakekeeper_dagster_tests.surface.identity import asset_key
from lakekeeper_dagster_tests.tables import DATES, make_table


def test_a_materialization_links_its_history_records(spark, metastore, database, data_dir, tmp_path):
    make_table(spark, database, "ev", data_dir / "ev", partitions=DATES[:1], files=3)
    history = {"table": f"{database}_h.history", "pending_dir": str(tmp_path / "pending")}
    config = parse_config(
        {"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}, "history": history}, "t"
    )
    location = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
    try:
        with dg.instance_for_test() as instance:
            location.get_job_def("sync_partitions_job").execute_in_process(instance=instance)
            result = location.get_implicit_global_asset_job_def().execute_in_process(
                instance=instance, asset_selection=[asset_key(database, "ev")], partition_key="date=2024-01-01"
            )
        assert result.success
        (materialization,) = result.asset_materializations_for_node(f"hive__{database}__ev")
        metadata = {k: v.value for k, v in materialization.metadata.items()}
        (record,) = read_rows(spark, f"{database}_h", "history")
        assert metadata[HISTORY_TABLE] == history["table"] and metadata[HISTORY_RUNS] == [record["run_id"]]
        assert (record["dagster_run_id"], record["operation"], record["status"]) == (
            result.run_id, "compact", "committed",
        )  # fmt: skip
        assert (record["files_before"], record["files_after"], record["rows_before"]) == (3, 1, 200)
        assert f"run {record['run_id']} (compact)" in metadata[DIFF]
        assert "| date=2024-01-01 | unchanged " in metadata[DIFF] and "| 3 -> 1 |" in metadata[DIFF]
    finally:
        spark.sql(f"DROP DATABASE IF EXISTS `{database}_h` CASCADE")
