"""Spark sessions pointed at a Hive Metastore, configured from the `spark_submit` settings."""

from __future__ import annotations

import os
import re
from pathlib import Path

from py4j.protocol import Py4JError
from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from spark_resources import yarn
from spark_resources.bulk import send_at_once
from spark_resources.errors import ResourceError
from spark_resources.settings import SparkSubmitSettings, render_spark_conf

# Settings that keep a local-mode driver light; a cluster config overrides them through extra_conf.
LOCAL_DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.driver.memory": "2g",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
}

# The log4j2 configuration a driver JVM this process starts gets (a file of the package, never one in a shared temp
# folder): without one, Spark prints its default profile's banner ("Using Spark's default log4j profile", "Setting
# default log level to ...", "To adjust logging level use sc.setLogLevel"), nothing a user can act on.
DRIVER_LOG4J2 = Path(__file__).with_name("driver-log4j2.properties")
# The system properties that name a log4j configuration (log4j2's, and the spellings log4j2 still reads).
LOG4J_PROPERTY = re.compile(r"-Dlog4j2?\.configuration(File)?=")


def hive_spark_conf(
    settings: SparkSubmitSettings,
    metastore_uri: str,
    warehouse_dir: str | None = None,
    app_name: str = "lakekeeper-dagster",
) -> dict[str, str]:
    """Full Spark conf for a session with Hive support that talks to `metastore_uri`."""
    conf: dict[str, str] = {}
    if settings.effective_master().startswith("local"):
        conf.update(LOCAL_DEFAULTS)
    conf.update(
        {
            "spark.app.name": app_name,
            "spark.sql.catalogImplementation": "hive",
            "spark.hadoop.hive.metastore.uris": metastore_uri,
        }
    )
    if warehouse_dir:
        conf["spark.sql.warehouse.dir"] = warehouse_dir
    conf.update(render_spark_conf(settings))
    return conf


def require_hadoop_conf(master: str) -> None:
    """Refuse a yarn master without the cluster's client configuration (HADOOP_CONF_DIR or YARN_CONF_DIR)."""
    if master.startswith("yarn") and not (os.environ.get("HADOOP_CONF_DIR") or os.environ.get("YARN_CONF_DIR")):
        raise ResourceError(
            "spark_submit.master is yarn, and neither HADOOP_CONF_DIR nor YARN_CONF_DIR is set: Spark finds the "
            "ResourceManager through the cluster's client configuration. Set HADOOP_CONF_DIR to its directory (the "
            "local one's: `lakekeeper-dagster hadoop start --yarn` prints it). Nothing was done"
        )


def start_spark_session(conf: dict[str, str]) -> SparkSession:
    """Create (or return the running) Spark session with these settings and Hive support."""
    # In cluster mode this is the driver in the ApplicationMaster: its application already runs in its queue.
    client = conf.get("spark.submit.deployMode") != "cluster"
    if client:
        require_hadoop_conf(conf.get("spark.master", ""))
    os.environ.setdefault("PYSPARK_PYTHON", os.environ.get("PYSPARK_PYTHON") or _python())
    conf = with_driver_log_conf(conf) if client else conf
    on_yarn = conf.get("spark.master", "").startswith("yarn")
    if client and on_yarn and conf.get("spark.yarn.queue") and SparkContext._active_spark_context is None:
        # The driver's JVM (launched with this conf, as the SparkContext would launch it) asks the ResourceManager
        # before the SparkContext submits the application.
        SparkContext._ensure_initialized(conf=SparkConf().setAll(list(conf.items())))
        yarn.check_queue(SparkContext._jvm, conf)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.enableHiveSupport().getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("LAKEKEEPER_SPARK_LOG_LEVEL", "ERROR"))
    send_at_once(spark)
    return spark


def with_driver_log_conf(conf: dict[str, str]) -> dict[str, str]:
    """`conf` with DRIVER_LOG4J2 in the driver's Java options, unless the site configures Spark itself (a Spark
    configuration directory with a spark-defaults.conf or a log4j2.properties, whose settings a conf key would
    override) or the options name a log4j configuration already."""
    options = conf.get("spark.driver.extraJavaOptions", "")
    if LOG4J_PROPERTY.search(options) or site_spark_conf():
        return conf
    flag = f"-Dlog4j2.configurationFile={DRIVER_LOG4J2.as_uri()}"
    return {**conf, "spark.driver.extraJavaOptions": f"{options} {flag}".strip()}


def site_spark_conf() -> bool:
    """Whether Spark reads a configuration of the site's: SPARK_CONF_DIR set, or a spark-defaults.conf or
    log4j2.properties in SPARK_HOME's conf directory."""
    if os.environ.get("SPARK_CONF_DIR"):
        return True
    home = os.environ.get("SPARK_HOME")
    return bool(home) and any(
        (Path(home) / "conf" / name).exists() for name in ("spark-defaults.conf", "log4j2.properties")
    )


def running_session_conf() -> dict[str, str] | None:
    """The Spark conf of the SparkContext already running in this process (`getOrCreate` returns a session on it,
    whatever conf it is given), or None when there is none."""
    context = SparkContext._active_spark_context
    return dict(context.getConf().getAll()) if context is not None else None


def stopped_application() -> str | None:
    """The id of this process's Spark application when its SparkContext was stopped under it (by the cluster: on
    YARN an application killed, `yarn application -kill`), else None."""
    context = SparkContext._active_spark_context
    try:
        if context is None or not context._jsc.sc().isStopped():
            return None
    except Py4JError:  # the driver's JVM itself is gone: nothing to name
        return None
    return context.applicationId


def local_hive_conf(
    metastore_uri: str,
    warehouse_dir: str | None,
    master: str = "local[2]",
    app_name: str = "lakekeeper-dagster",
    extra_conf: dict[str, str] | None = None,
) -> dict[str, str]:
    """The Spark conf of a local-mode session on `metastore_uri`: the one bootstrap of tests and benchmarks (start it
    with `start_spark_session`), `extra_conf` applied last."""
    conf = hive_spark_conf(SparkSubmitSettings(master=master), metastore_uri, warehouse_dir, app_name=app_name)
    conf.update(extra_conf or {})
    return conf


def _python() -> str:
    import sys

    return sys.executable
