"""Spark on YARN from the command line (the YARN tier, `pytest --spark-cluster=yarn`): the config `hadoop start
--yarn` writes compacts a table on that Hadoop's HDFS, each command one application of the ResourceManager."""

from __future__ import annotations

import pytest

from lakekeeper_dagster.cli_hadoop import hdfs_config
from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster_tests.hdfs import data_files
from lakekeeper_dagster_tests.tables import DATES, make_table, new_cluster_apps, rows_of, run_cli
from spark_resources.yarn import LocalYarn

pytestmark = pytest.mark.cluster(only=True)


@pytest.fixture
def local_yarn(spark_cluster) -> LocalYarn:
    if not isinstance(spark_cluster, LocalYarn):
        pytest.skip("on YARN only (pytest --spark-cluster=yarn)")
    return spark_cluster


def test_the_config_hadoop_start_writes_compacts_a_table_on_hdfs_as_one_yarn_application(
    spark, local_yarn, metastore, database, tmp_path
):
    hadoop = local_yarn.hadoop
    root = f"{hadoop.uri}/tests/{database}/ev"
    table = make_table(spark, database, "ev", root, partitions=DATES, files=6)
    before = rows_of(spark, table)
    config = hdfs_config(LakekeeperConfig(metastore={"uri": metastore.uri, "home": str(tmp_path / "lk")}), hadoop)
    assert config["spark_submit"]["master"] == "yarn" and config["spark_submit"]["deploy_mode"] == "client"
    apps_before = set(local_yarn.applications())

    done = run_cli(["compact", "--table", table], tmp_path, metastore.uri, config=config)

    assert done.returncode == 0, done.stderr
    assert rows_of(spark, table) == before
    assert [len(data_files(spark, f"{root}/date={d['date']}")) for d in DATES] == [1, 1]
    assert new_cluster_apps(local_yarn, apps_before) == [("lakekeeper-dagster", "FINISHED")]
    (app_id,) = set(local_yarn.applications()) - apps_before
    report = local_yarn.application(app_id)
    assert (report["finalStatus"], report["queue"], report["applicationType"]) == ("SUCCEEDED", "root.default", "SPARK")
