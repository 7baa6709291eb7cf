"""Dagster resource for a Hive-enabled Spark session, built on dagster-pyspark's lazy resource."""

from __future__ import annotations

from typing import Any

from dagster import InitResourceContext
from dagster_pyspark import LazyPySparkResource
from pydantic import Field

from spark_resources.session import hive_spark_conf, start_spark_session
from spark_resources.settings import SparkSubmitSettings


class HiveSparkResource(LazyPySparkResource):
    """A Spark session with Hive support, pointed at the configured metastore.

    Local mode by default; the `spark_submit` block (Lakekeeper's keys) expresses a cluster deployment.
    The session starts on first use and stops at teardown.
    """

    spark_config: dict[str, Any] = Field(default_factory=dict, description="Extra Spark conf, applied last.")
    metastore_uri: str = Field(description="thrift://HOST:PORT of the Hive Metastore.")
    warehouse_dir: str | None = Field(default=None, description="spark.sql.warehouse.dir")
    spark_submit: dict[str, Any] = Field(
        default_factory=dict, description="Lakekeeper's spark_submit block (master, queue, executors, ...)."
    )
    stop_at_teardown: bool = Field(default=True, description="Stop the Spark session when the run ends.")

    def full_conf(self) -> dict[str, str]:
        """The Spark conf this resource starts its session with."""
        settings = SparkSubmitSettings.model_validate(self.spark_submit)
        conf = hive_spark_conf(settings, self.metastore_uri, self.warehouse_dir)
        conf.update({k: str(v) for k, v in self.spark_config.items()})
        return conf

    def _init_session(self) -> None:
        if self._spark_session is None:
            self._spark_session = start_spark_session(self.full_conf())

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._spark_session is not None and self.stop_at_teardown:
            self._spark_session.stop()
            self._spark_session = None
