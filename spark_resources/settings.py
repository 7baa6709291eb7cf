"""Spark settings: Lakekeeper's `spark_submit` block, rendered as Spark conf and as a spark-submit command."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SparkSubmitSettings(BaseModel):
    """The keys of Lakekeeper's `spark_submit` block, with the same meaning.

    With `enabled: false` (the default) Spark runs in local mode inside the calling process.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    submit_command: str = "spark-submit"
    master: str | None = None
    deploy_mode: str | None = Field(default=None, pattern="^(client|cluster)$")
    principal: str | None = None
    keytab: str | None = None
    krb5_conf: str | None = None
    queue: str | None = None
    archives: str | None = None
    python_env: str | None = None
    executor_memory: str | None = None
    num_executors: int | None = Field(default=None, ge=1)
    executor_cores: int | None = Field(default=None, ge=1)
    driver_memory: str | None = None
    script_path: str = "run_lakekeeper.py"
    extra_conf: dict[str, str] = Field(default_factory=dict)
    extra_files: list[str] = Field(default_factory=list)
    py_files: list[str] = Field(default_factory=list)

    def effective_master(self) -> str:
        """`yarn` when cluster submission is enabled and no master is set, else local mode."""
        if self.master:
            return self.master
        return "yarn" if self.enabled else "local[*]"


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


def render_submit_command(settings: SparkSubmitSettings, script_args: list[str]) -> list[str]:
    """The spark-submit command line Lakekeeper would run for these settings and script arguments."""
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
    if settings.deploy_mode == "cluster":
        cmd += ["--conf", "spark.yarn.appMasterEnv.LAKEKEEPER_SUBMITTED=1"]
    for key, value in settings.extra_conf.items():
        cmd += ["--conf", f"{key}={value}"]
    return [*cmd, settings.script_path, *script_args]
