"""Dagster resource for a Hive-enabled (optionally Kerberized) Spark session, on dagster-pyspark's lazy resource."""

from __future__ import annotations

import logging
from typing import Any

from dagster import InitResourceContext, ResourceDefinition, build_resources, resource
from dagster_pyspark import LazyPySparkResource
from pydantic import Field, PrivateAttr

from spark_resources.hive_session import kerberized_conf, open_hive_session, require_metastore
from spark_resources.kerberos import KerberosLogin, login_for
from spark_resources.session import hive_spark_conf
from spark_resources.settings import SparkSubmitSettings

log = logging.getLogger(__name__)


class HiveSparkResource(LazyPySparkResource):
    """A Spark session with Hive support, pointed at the configured metastore.

    Local mode by default; the `spark_submit` block (Lakekeeper's keys) expresses a cluster deployment. With a
    principal and keytab (here, e.g. as Dagster `EnvVar`s, or in `spark_submit`) the run logs in to Kerberos
    before the JVM starts, keeps its ticket in a private cache and renews it from the keytab before each use.
    The session starts on first use and stops at teardown.
    """

    spark_config: dict[str, Any] = Field(default_factory=dict, description="Extra Spark conf, applied last.")
    metastore_uri: str = Field(description="thrift://HOST:PORT of the Hive Metastore.")
    warehouse_dir: str | None = Field(default=None, description="spark.sql.warehouse.dir")
    spark_submit: dict[str, Any] = Field(
        default_factory=dict, description="Lakekeeper's spark_submit block (master, queue, executors, ...)."
    )
    principal: str | None = Field(default=None, description="Kerberos principal; default spark_submit.principal.")
    keytab: str | None = Field(default=None, description="Keytab of the principal; default spark_submit.keytab.")
    krb5_conf: str | None = Field(default=None, description="krb5.conf to use; default spark_submit.krb5_conf.")
    stop_at_teardown: bool = Field(default=True, description="Stop the Spark session when the run ends.")
    _kerberos: KerberosLogin | None = PrivateAttr(default=None)
    _owns_session: bool = PrivateAttr(default=False)
    _run_log: Any = PrivateAttr(default=None)

    def settings(self) -> SparkSubmitSettings:
        return SparkSubmitSettings.model_validate(self.spark_submit)

    def kerberos_login(self) -> KerberosLogin | None:
        """The run's Kerberos identity, or None when neither a principal nor a keytab is configured."""
        settings = self.settings()
        return login_for(
            self.principal or settings.principal, self.keytab or settings.keytab, self.krb5_conf or settings.krb5_conf
        )

    def full_conf(self) -> dict[str, str]:
        """The Spark conf this resource starts its session with."""
        conf = kerberized_conf(
            hive_spark_conf(self.settings(), self.metastore_uri, self.warehouse_dir), self.kerberos_login()
        )
        conf.update({k: str(v) for k, v in self.spark_config.items()})
        # A Dagster run's driver is the run worker: client mode, whatever deploy_mode the command line submits with.
        if conf.get("spark.submit.deployMode") == "cluster":
            conf["spark.submit.deployMode"] = "client"
        return conf

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self.log_to(context.log)

    def log_to(self, run_log: Any) -> None:
        """Say in `run_log` (the run's own log) what the run waits for when the JVM starts."""
        self._run_log = run_log

    def _start_session(self) -> None:
        """Right before the JVM starts: a clear error when the metastore is down, else say so in the run's log."""
        require_metastore(self.metastore_uri, "this run")
        (self._run_log or log).info(
            f"starting the Spark session (a JVM, master {self.settings().effective_master()}, metastore "
            f"{self.metastore_uri}): the first Spark call waits for it"
        )

    def _init_session(self) -> None:
        if self._spark_session is not None:
            return
        login = self.kerberos_login()
        say = (self._run_log or log).info
        opened = open_hive_session(self.full_conf(), self.metastore_uri, login, self._start_session, say)
        self._spark_session, self._owns_session = opened
        self._kerberos = login

    @property
    def spark_session(self) -> Any:
        """The session; under Kerberos its ticket is renewed from the keytab first when it nears its end."""
        self._init_session()
        if self._kerberos is not None:
            self._kerberos.refresh(self._spark_session)
        return self._spark_session

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._spark_session is not None and self.stop_at_teardown:
            if self._owns_session:
                self._spark_session.stop()
            self._spark_session = None
        if self._kerberos is not None and self._spark_session is None:
            self._kerberos.close()
            self._kerberos = None


def code_location_resource(spark: HiveSparkResource) -> ResourceDefinition:
    """`spark` as the runs' resource, set by the code location alone: it takes no run config, so no launchpad shows
    the Spark settings and a run's config cannot change them. Each run still gets the resource's own lifecycle
    (the session starts on first use, stops at teardown, Kerberos ticket renewed and closed)."""

    @resource(
        config_schema={},  # none at all: a `resources:` block in a run's config is refused, not silently ignored
        description=f"Hive-enabled Spark session on the metastore {spark.metastore_uri}; its settings come from the "
        "code location's config, not from run config.",
    )
    def hive_spark(context: InitResourceContext):
        with build_resources({"spark": spark}, instance=context.instance) as built:
            built.spark.log_to(context.log)  # build_resources gave it a log outside the run's
            yield built.spark

    return hive_spark
