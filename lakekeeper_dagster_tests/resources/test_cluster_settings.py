"""Cluster settings: the resource configures a yarn client-mode driver exactly as Lakekeeper's spark-submit would."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pyspark
import pytest

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.surface.build import spark_resource_for
from spark_resources.errors import ResourceError
from spark_resources.session import DRIVER_LOG4J2, start_spark_session, with_driver_log_conf
from spark_resources.settings import SparkSubmitSettings, render_spark_conf, render_submit_command

FULL_BLOCK = {
    "enabled": True,
    "submit_command": "spark3-submit",
    "master": "yarn",
    "deploy_mode": "client",
    "principal": "etl@CORP.EXAMPLE",
    "keytab": "/etc/security/keytabs/etl.keytab",
    "krb5_conf": "/etc/krb5.conf",
    "queue": "maintenance",
    "archives": "hdfs:///envs/lakekeeper_env.tar.gz#lakekeeper_env",
    "python_env": "./lakekeeper_env/bin/python",
    "executor_memory": "8g",
    "num_executors": 10,
    "executor_cores": 4,
    "driver_memory": "4g",
    "script_path": "run_lakekeeper.py",
    "extra_conf": {"spark.sql.shuffle.partitions": "400", "spark.dynamicAllocation.enabled": "false"},
    "extra_files": ["hdfs:///conf/hive-site.xml", "hdfs:///conf/log4j2.properties"],
    "py_files": ["hdfs:///libs/helpers.zip"],
}


def test_rendered_settings_for_a_full_yarn_config():
    settings = SparkSubmitSettings.model_validate(FULL_BLOCK)
    assert render_spark_conf(settings) == {
        "spark.master": "yarn",
        "spark.submit.deployMode": "client",
        "spark.yarn.queue": "maintenance",
        "spark.yarn.dist.archives": "hdfs:///envs/lakekeeper_env.tar.gz#lakekeeper_env",
        "spark.pyspark.python": "./lakekeeper_env/bin/python",
        "spark.executor.memory": "8g",
        "spark.executor.instances": "10",
        "spark.executor.cores": "4",
        "spark.driver.memory": "4g",
        "spark.kerberos.principal": "etl@CORP.EXAMPLE",
        "spark.kerberos.keytab": "/etc/security/keytabs/etl.keytab",
        "spark.yarn.dist.files": "hdfs:///conf/hive-site.xml,hdfs:///conf/log4j2.properties",
        "spark.submit.pyFiles": "hdfs:///libs/helpers.zip",
        "spark.sql.shuffle.partitions": "400",
        "spark.dynamicAllocation.enabled": "false",
    }
    assert render_submit_command(settings, ["--table", "db.t"]) == [
        "spark3-submit", "--master", "yarn", "--deploy-mode", "client",
        "--principal", "etl@CORP.EXAMPLE", "--keytab", "/etc/security/keytabs/etl.keytab",
        "--conf", "spark.yarn.queue=maintenance",
        "--archives", "hdfs:///envs/lakekeeper_env.tar.gz#lakekeeper_env",
        "--conf", "spark.pyspark.python=./lakekeeper_env/bin/python",
        "--executor-memory", "8g", "--num-executors", "10", "--executor-cores", "4", "--driver-memory", "4g",
        "--files", "hdfs:///conf/hive-site.xml,hdfs:///conf/log4j2.properties",
        "--py-files", "hdfs:///libs/helpers.zip",
        "--conf", "spark.sql.shuffle.partitions=400", "--conf", "spark.dynamicAllocation.enabled=false",
        "run_lakekeeper.py", "--table", "db.t",
    ]  # fmt: skip


def test_yaml_spark_submit_block_reaches_the_resource():
    config = LakekeeperConfig.model_validate(
        {"metastore": {"uri": "thrift://metastore.corp.example:9083"}, "spark_submit": FULL_BLOCK}
    )
    resource = spark_resource_for(config)
    conf = resource.full_conf()
    assert {k: conf[k] for k in render_spark_conf(config.spark_submit)} == render_spark_conf(config.spark_submit)
    assert conf["spark.hadoop.hive.metastore.uris"] == "thrift://metastore.corp.example:9083"
    assert conf["spark.hadoop.hadoop.security.authentication"] == "kerberos"
    assert conf["spark.hadoop.hive.metastore.sasl.enabled"] == "true"
    assert conf["spark.driver.extraJavaOptions"] == "-Djava.security.krb5.conf=/etc/krb5.conf"
    assert "spark.ui.enabled" not in conf  # local-mode defaults stay out of a cluster run
    login = resource.kerberos_login()
    assert (login.principal, login.keytab, login.krb5_conf) == (
        "etl@CORP.EXAMPLE",
        "/etc/security/keytabs/etl.keytab",
        "/etc/krb5.conf",
    )


def _final_conf(command: list[str], hadoop_conf_dir: Path) -> dict[str, str]:
    """The conf spark-submit ends with (its --verbose "Spark config:" block), minus per-launch keys."""
    env = {**os.environ, "HADOOP_CONF_DIR": str(hadoop_conf_dir)}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert "Spark config:" in output, output[-3000:]
    block = output.split("Spark config:")[1].split("Classpath elements:")[0]
    conf = dict(re.findall(r"^\((.+?),(.*)\)$", block, re.MULTILINE))
    conf.pop("spark.app.submitTime")
    return conf


@pytest.mark.slow
def test_spark_submit_ends_with_the_same_conf_from_the_flags_and_from_the_rendered_conf(tmp_path):
    """Real spark-submit (pyspark's), yarn client mode, --verbose: Lakekeeper's flags vs. pyspark's `--conf` launch.

    No YARN is contacted: spark-submit prints its final conf before running the script, whose python does not
    exist here (`./env/bin/python`), so the run stops right after.
    """
    for name in ("env.tar.gz", "a.txt", "b.txt", "helpers.zip", "etl.keytab", "noop.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "hadoop-conf").mkdir()
    block = {
        **FULL_BLOCK,
        "submit_command": str(Path(pyspark.__file__).parent / "bin" / "spark-submit"),
        "keytab": str(tmp_path / "etl.keytab"),
        "archives": f"file://{tmp_path}/env.tar.gz#env",
        "python_env": "./env/bin/python",
        "extra_files": [f"file://{tmp_path}/a.txt", f"file://{tmp_path}/b.txt"],
        "py_files": [f"file://{tmp_path}/helpers.zip"],
        "script_path": str(tmp_path / "noop.py"),
    }
    settings = SparkSubmitSettings.model_validate(block)
    flags = render_submit_command(settings, ["--table", "db.t"])
    lakekeeper = _final_conf([flags[0], "--verbose", *flags[1:]], tmp_path / "hadoop-conf")
    confs = [part for key, value in render_spark_conf(settings).items() for part in ("--conf", f"{key}={value}")]
    ours = _final_conf([flags[0], "--verbose", *confs, *flags[-3:]], tmp_path / "hadoop-conf")
    assert ours == lakekeeper
    assert lakekeeper["spark.yarn.dist.archives"] == f"file://{tmp_path}/env.tar.gz#env"
    assert lakekeeper["spark.submit.deployMode"] == "client"


@pytest.mark.pure
def test_a_yarn_master_without_the_clusters_client_configuration_is_refused_before_spark_starts(monkeypatch):
    monkeypatch.delenv("HADOOP_CONF_DIR", raising=False)
    monkeypatch.delenv("YARN_CONF_DIR", raising=False)
    with pytest.raises(ResourceError, match=r"spark_submit\.master is yarn.*HADOOP_CONF_DIR.*hadoop start --yarn"):
        start_spark_session({"spark.master": "yarn", "spark.submit.deployMode": "client"})


@pytest.mark.pure
def test_a_dagster_runs_driver_stays_in_the_run_worker_whatever_deploy_mode_the_command_line_uses():
    config = LakekeeperConfig.model_validate({"spark_submit": {"enabled": True, "deploy_mode": "cluster"}})
    assert spark_resource_for(config).full_conf()["spark.submit.deployMode"] == "client"


def test_the_driver_gets_the_packages_log4j2_file_only_where_the_site_configures_nothing(tmp_path, monkeypatch):
    """The banner-free log4j2 file (shipped in the package) joins the driver's own options; a log4j configuration
    named in them, or a site's Spark configuration directory, is left as it is (a conf key would override it)."""
    for name in ("SPARK_CONF_DIR", "SPARK_HOME"):
        monkeypatch.delenv(name, raising=False)
    conf = {"spark.driver.extraJavaOptions": "-Xss4m"}
    options = with_driver_log_conf(conf)["spark.driver.extraJavaOptions"]
    assert options == f"-Xss4m -Dlog4j2.configurationFile={DRIVER_LOG4J2.as_uri()}" and DRIVER_LOG4J2.is_file()
    for named in (
        "-Dlog4j.configurationFile=file:/etc/l.xml",
        "-Dlog4j2.configurationFile=x",
        "-Dlog4j.configuration=y",
    ):
        assert with_driver_log_conf({"spark.driver.extraJavaOptions": named}) == {
            "spark.driver.extraJavaOptions": named
        }
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text("spark.driver.extraJavaOptions -Dsite=1\n")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path))
    assert with_driver_log_conf(conf) == conf
    monkeypatch.delenv("SPARK_HOME")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    assert with_driver_log_conf(conf) == conf
