"""The code location against a Kerberized metastore, in one subprocess (one JVM: its Kerberos configuration and
UGI are per process), with KRB5_CONFIG set in the environment and no krb5_conf key, as users have it.

Usage: python kerberos_load_scenarios.py PARAMS.json — prints one `RESULT {json}` line per step (a step that fails
prints its error instead); test_kerberos_load.py checks them.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import dagster as dg
from pyspark import SparkContext

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.surface.build import definitions_from_state, read_managed_tables, spark_resource_for
from lakekeeper_dagster.surface.state import LocationState
from lakekeeper_dagster_tests.tables import data_files, make_table, rows_of
from spark_resources.session import running_session_conf, start_spark_session

DB = "kload"


def result(step: str, **values: object) -> None:
    print("RESULT " + json.dumps({"step": step, **values}), flush=True)


def config_of(params: dict, service_principal: str):
    """The YAML config a user would write: principal and keytab in spark_submit, no krb5_conf key."""
    return parse_config(
        {
            "tables": {"databases": [DB]},
            "metastore": {"uri": params["metastore_uri"], "warehouse_dir": params["warehouse_dir"]},
            "spark_submit": {
                "master": "local[1]",
                "principal": params["principal"],
                "keytab": params["keytab"],
                "extra_conf": {"spark.hadoop.hive.metastore.kerberos.principal": service_principal},
            },
        },
        "kerberos_load_scenarios",
    )


def jvm_state() -> dict:
    """The driver JVM's krb5.conf and Hadoop login user (the JVM outlives the stopped sessions)."""
    jvm = SparkContext._jvm
    return {
        "krb5_conf": jvm.java.lang.System.getProperty("java.security.krb5.conf"),
        "login": str(jvm.org.apache.hadoop.security.UserGroupInformation.getLoginUser().toString()),
    }


def table_state(config) -> dict:
    with dg.build_resources({"spark": spark_resource_for(config)}) as resources:
        spark = resources.spark.spark_session
        return {"rows": [list(r) for r in rows_of(spark, f"{DB}.flat")], "files": len(data_files(Path(DIR)))}


def create(config) -> None:
    """The table the location manages, created through the Kerberized resource."""
    with dg.build_resources({"spark": spark_resource_for(config)}) as resources:
        spark = resources.spark.spark_session
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {DB}")
        make_table(spark, DB, "flat", Path(DIR), files=4, rows=30)
    running_after = running_session_conf() is not None
    result("create", **table_state(config), running_after=running_after, launched_with=launch_krb5_options())


def load_and_run(config) -> None:
    """The location's load reads the tables through the resource; a run of its compaction job then logs in anew."""
    managed = read_managed_tables(config)
    result("load", tables=[t.qualified_name for t in managed.tables], running_after=running_session_conf() is not None)
    definitions = definitions_from_state(config, LocationState(managed, read_at=None))
    with dg.DagsterInstance.ephemeral() as instance:
        run = definitions.get_job_def(f"Compact__{DB}__flat").execute_in_process(instance=instance)
        messages = [e.user_message for e in instance.all_logs(run.run_id)]
    kerberos_lines = [m for m in messages if m.startswith("Kerberos: logged in")]
    result("run", success=run.success, kerberos_lines=kerberos_lines, **jvm_state(), **table_state(config))


def plain_session_first(config) -> None:
    """A session started without Kerberos first in the process (its JVM too) is not silently reused by the
    resource; once it is stopped, the resource's session on that JVM reads the login's krb5.conf."""
    plain = start_spark_session(config.spark_conf())
    try:
        with dg.build_resources({"spark": spark_resource_for(config)}) as resources:
            resources.spark.spark_session  # noqa: B018 - the first use logs in
        result("plain_first", error=None)
    except Exception as error:
        alive = running_session_conf() is not None
        result("plain_first", error=str(error), cls=type(error).__name__, plain_alive=alive)
    finally:
        plain.stop()
    tables = [t.qualified_name for t in read_managed_tables(config).tables]
    result("after_plain", tables=tables, launched_with=launch_krb5_options(), **jvm_state())


def launch_krb5_options() -> list[str]:
    """The krb5.conf options the driver JVM was started with."""
    arguments = SparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()
    return [str(a) for a in arguments if "krb5.conf" in str(a)]


def gss_failure(config, step: str) -> None:
    try:
        read_managed_tables(config)
        result(step, error=None)
    except Exception as error:
        result(
            step,
            error=str(error),
            cls=type(error).__name__,
            cause=repr(error.__cause__),
            context_shown=error.__context__ is not None and not error.__suppress_context__,
        )


def step(name: str, function, *args) -> None:
    try:
        function(*args)
    except Exception as error:
        result(name, failed=f"{type(error).__name__}: {error}"[:3000], trace=traceback.format_exc()[-3000:])


if __name__ == "__main__":
    options = json.loads(Path(sys.argv[1]).read_text())
    DIR = options["table_dir"]
    good = config_of(options, options["service_principal"])
    if options["plain_first"]:
        step("plain_first", plain_session_first, good)
    else:
        step("create", create, good)
        step("load", load_and_run, good)
        step("unknown_service", gss_failure, config_of(options, options["unknown_service"]), "unknown_service")
        step("keyless_service", gss_failure, config_of(options, options["keyless_service"]), "keyless_service")
