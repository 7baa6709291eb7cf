"""Spark settings: Lakekeeper's `spark_submit` block, rendered as Spark conf and as a spark-submit command; the
metastore a session talks to."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from spark_resources.errors import MetastoreError, ResourceError
from spark_resources.metastore import DEFAULT_URI, parse_thrift_uri


class SparkSubmitSettings(BaseModel):
    """The keys of Lakekeeper's `spark_submit` block, with the same meaning.

    With `enabled: false` (the default) Spark runs in local mode inside the calling process.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        default=False,
        description="Run on the cluster (master defaults to yarn); false: Spark in local mode in the calling process.",
    )
    submit_command: str = Field(default="spark-submit", description="The spark-submit executable.")
    master: str | None = Field(default=None, description="Spark master; default: yarn when enabled, else local[*].")
    deploy_mode: str | None = Field(default=None, pattern="^(client|cluster)$", description="client or cluster.")
    principal: str | None = Field(default=None, description="Kerberos principal, e.g. user@REALM.COM.")
    keytab: str | None = Field(default=None, description="Path to the principal's keytab.")
    krb5_conf: str | None = Field(default=None, description="krb5.conf to use instead of the system one.")
    queue: str | None = Field(default=None, description="YARN queue.")
    archives: str | None = Field(
        default=None, description="Archives to ship, e.g. hdfs:///envs/lakekeeper_env.tar.gz#lakekeeper_env."
    )
    python_env: str | None = Field(
        default=None, description="Python of the executors (and cluster driver), e.g. ./lakekeeper_env/bin/python."
    )
    executor_memory: str | None = Field(default=None, description="Memory per executor, e.g. 4g.")
    num_executors: int | None = Field(default=None, ge=1, description="Number of executors.")
    executor_cores: int | None = Field(default=None, ge=1, description="Cores per executor.")
    driver_memory: str | None = Field(default=None, description="Driver memory, e.g. 2g.")
    script_path: str | None = Field(
        default=None,
        description="The script spark-submit runs; default: the package's own entry script (deploy_mode cluster).",
    )
    extra_conf: dict[str, str] = Field(default_factory=dict, description="More Spark conf, KEY: VALUE (applied last).")
    extra_files: list[str] = Field(default_factory=list, description="Files to ship with the job (--files).")
    py_files: list[str] = Field(default_factory=list, description="Python files to ship with the job (--py-files).")

    def effective_master(self) -> str:
        """`yarn` when cluster submission is enabled and no master is set, else local mode."""
        if self.master:
            return self.master
        return "yarn" if self.enabled else "local[*]"


class MetastoreSettings(BaseModel):
    """The Hive Metastore Spark sessions talk to, and the local one's files."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    uri: str = Field(default=DEFAULT_URI, description="Thrift URI of the metastore (also $LAKEKEEPER_METASTORE_URI).")
    home: str = Field(
        default=".lakekeeper",
        description="The local metastore's Derby database, warehouse, pid and log files (relative to the config file).",
    )
    warehouse_dir: str | None = Field(
        default=None, description="Spark's warehouse directory; default: <home>/warehouse."
    )

    @field_validator("uri")
    @classmethod
    def _thrift_uri(cls, uri: str) -> str:
        """One thrift://HOST:PORT, or several separated by commas (metastores in high availability)."""
        try:
            for one in uri.split(","):
                parse_thrift_uri(one)
        except MetastoreError as error:  # pydantic reports a ValueError as the key's error
            raise ValueError(str(error)) from None
        return uri

    def resolved_warehouse_dir(self) -> str:
        """The warehouse directory as a URI (defaults to `<home>/warehouse`)."""
        if self.warehouse_dir:
            return self.warehouse_dir
        return (Path(self.home).absolute() / "warehouse").as_uri()


def render_spark_conf(settings: SparkSubmitSettings) -> dict[str, str]:
    """Spark conf that yields, through spark-submit, the same final conf as `render_submit_command`'s flags.

    PySpark launches its driver JVM with `spark-submit --conf K=V ... pyspark-shell`, so these keys go through
    the same processing as Lakekeeper's command line (remote py files fetched in client mode, YARN mappings).
    """
    master = settings.effective_master()
    # spark-submit turns --archives / --files into spark.yarn.dist.* on YARN (spark.archives / spark.files elsewhere).
    dist = "spark.yarn.dist." if master.startswith("yarn") else "spark."
    conf: dict[str, str] = {"spark.master": master}
    pairs = {
        "spark.submit.deployMode": settings.deploy_mode,
        "spark.yarn.queue": settings.queue,
        f"{dist}archives": settings.archives,
        "spark.pyspark.python": settings.python_env,
        "spark.executor.memory": settings.executor_memory,
        "spark.executor.instances": settings.num_executors,
        "spark.executor.cores": settings.executor_cores,
        "spark.driver.memory": settings.driver_memory,
        "spark.kerberos.principal": settings.principal,
        "spark.kerberos.keytab": settings.keytab,
        f"{dist}files": ",".join(settings.extra_files) or None,
        "spark.submit.pyFiles": ",".join(settings.py_files) or None,
    }
    conf.update({k: str(v) for k, v in pairs.items() if v is not None})
    conf.update({k: str(v) for k, v in settings.extra_conf.items()})
    return conf


def render_submit_command(
    settings: SparkSubmitSettings, script_args: list[str], default_script: str | None = None
) -> list[str]:
    """The spark-submit command line Lakekeeper runs for these settings and script arguments (the script:
    `script_path`, else `default_script`)."""
    script = settings.script_path or default_script
    if script is None:
        raise ResourceError("spark_submit.script_path is not set: name the script spark-submit runs")
    cmd = [settings.submit_command, "--master", settings.effective_master()]
    if settings.deploy_mode:
        cmd += ["--deploy-mode", settings.deploy_mode]
    if settings.principal:
        cmd += ["--principal", settings.principal]
    if settings.keytab:
        cmd += ["--keytab", settings.keytab]
    if settings.queue:
        cmd += ["--conf", f"spark.yarn.queue={settings.queue}"]
    if settings.archives:
        cmd += ["--archives", settings.archives]
    if settings.python_env:
        cmd += ["--conf", f"spark.pyspark.python={settings.python_env}"]
    for flag, value in (
        ("--executor-memory", settings.executor_memory),
        ("--num-executors", settings.num_executors),
        ("--executor-cores", settings.executor_cores),
        ("--driver-memory", settings.driver_memory),
    ):
        if value is not None:
            cmd += [flag, str(value)]
    if settings.extra_files:
        cmd += ["--files", ",".join(settings.extra_files)]
    if settings.py_files:
        cmd += ["--py-files", ",".join(settings.py_files)]
    for key, value in settings.extra_conf.items():
        cmd += ["--conf", f"{key}={value}"]
    if settings.deploy_mode == "cluster":  # last: spark-submit keeps a key's last value, so extra_conf cannot undo it
        cmd += ["--conf", "spark.yarn.appMasterEnv.LAKEKEEPER_SUBMITTED=1"]
    return [*cmd, script, *script_args]
