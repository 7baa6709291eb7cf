"""Dagster resource for a Hive-enabled (optionally Kerberized) Spark session, on dagster-pyspark's lazy resource."""

from __future__ import annotations

import logging
from typing import Any

from dagster import InitResourceContext, ResourceDefinition, build_resources, resource
from dagster_pyspark import LazyPySparkResource
from pydantic import Field, PrivateAttr

from spark_resources.errors import MetastoreError
from spark_resources.kerberos import KerberosError, KerberosLogin
from spark_resources.kerberos_metastore import check_metastore
from spark_resources.metastore import parse_thrift_uri, port_is_open
from spark_resources.session import hive_spark_conf, running_session_conf, start_spark_session
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
        principal = self.principal or settings.principal
        keytab = self.keytab or settings.keytab
        if not principal and not keytab:
            return None
        if not principal or not keytab:
            missing = "principal" if not principal else "keytab"
            raise KerberosError(
                f"Kerberos needs both spark_submit.principal and spark_submit.keytab; {missing} is not set. "
                f"Set it in the config file or as the resource's `{missing}` (e.g. a Dagster EnvVar)."
            )
        return KerberosLogin(principal, keytab, self.krb5_conf or settings.krb5_conf)

    def full_conf(self) -> dict[str, str]:
        """The Spark conf this resource starts its session with."""
        conf = hive_spark_conf(self.settings(), self.metastore_uri, self.warehouse_dir)
        login = self.kerberos_login()
        if login is not None:
            for key, value in login.spark_conf().items():
                if key.endswith("extraJavaOptions") and conf.get(key):
                    conf[key] = f"{conf[key]} {value}"
                elif key.startswith("spark.kerberos.") or key not in conf:
                    conf[key] = value
        conf.update({k: str(v) for k, v in self.spark_config.items()})
        return conf

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self.log_to(context.log)

    def log_to(self, run_log: Any) -> None:
        """Say in `run_log` (the run's own log) what the run waits for when the JVM starts."""
        self._run_log = run_log

    def _start_session(self) -> Any:
        """Start the JVM and the session, saying so in the run's log; a clear error when the metastore is down."""
        if not any(port_is_open(*parse_thrift_uri(uri)) for uri in self.metastore_uri.split(",")):
            raise MetastoreError(
                f"the Hive Metastore at {self.metastore_uri} is not reachable, and this run needs it: start it "
                "(`lakekeeper-dagster metastore start` for the local one) or fix metastore.uri / "
                "LAKEKEEPER_METASTORE_URI, then run again. Nothing was done"
            )
        (self._run_log or log).info(
            f"starting the Spark session (a JVM, master {self.settings().effective_master()}, metastore "
            f"{self.metastore_uri}): the first Spark call waits for it"
        )
        return start_spark_session(self.full_conf())

    def _init_session(self) -> None:
        if self._spark_session is not None:
            return
        login = self.kerberos_login()
        running = running_session_conf()
        self._owns_session = running is None  # never stop at teardown a session someone else started
        if login is None:
            self._spark_session = self._start_session()
            return
        login.login()  # first: a credential problem is said as such, whatever else runs in this process
        if running is not None:
            login.check_running_session(running)
        spark = None
        try:
            spark = self._start_session()
            login.login_jvm(spark)
            check_metastore(login, spark, self.metastore_uri)
        except BaseException:
            if spark is not None and self._owns_session:
                spark.stop()
            login.close()
            raise
        (self._run_log or log).info(
            f"Kerberos: logged in as {login.principal} from keytab {login.keytab} (private credential cache), "
            f"Kerberos configuration {login.krb5_conf_shown}"
        )
        self._spark_session, self._kerberos = spark, login

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
