"""Starting a run's Hive-enabled Spark session, Kerberized or not: the one path of the Dagster resource and the CLI.

Under Kerberos (`kerberos.KerberosLogin`): kinit into a private cache before the JVM starts, the session started
with the login's Spark conf, the driver JVM logged in from the keytab before its first catalog call, then one
metastore call that names a refused handshake as Kerberos (`kerberos_metastore.check_metastore`). A failure at any
step stops the session this call started and deletes the private cache.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from spark_resources.errors import MetastoreError
from spark_resources.kerberos import KerberosLogin
from spark_resources.kerberos_metastore import check_metastore
from spark_resources.metastore import parse_thrift_uri, port_is_open
from spark_resources.session import running_session_conf, start_spark_session


def metastore_reachable(metastore_uri: str) -> bool:
    """Whether one of the metastore's URIs (comma-separated `thrift://HOST:PORT`) accepts a connection: the one
    reachability check, made before any JVM starts."""
    return any(port_is_open(*parse_thrift_uri(uri)) for uri in metastore_uri.split(","))


def require_metastore(metastore_uri: str, needed_by: str) -> None:
    """MetastoreError naming the metastore, what needs it and what to do, unless it is reachable."""
    if not metastore_reachable(metastore_uri):
        raise MetastoreError(
            f"the Hive Metastore at {metastore_uri} is not reachable, and {needed_by} needs it: start it "
            "(`lakekeeper-dagster metastore start` for the local one) or fix metastore.uri / "
            "LAKEKEEPER_METASTORE_URI, then run again. Nothing was done"
        )


def kerberized_conf(conf: dict[str, str], login: KerberosLogin | None) -> dict[str, str]:
    """`conf` with the login's Spark conf: its driver Java options appended to any set, its `spark.kerberos.*`
    keys taking precedence, the rest only where `conf` does not set them (a cluster's own settings win)."""
    merged = dict(conf)
    for key, value in (login.spark_conf() if login else {}).items():
        if key.endswith("extraJavaOptions") and merged.get(key):
            merged[key] = f"{merged[key]} {value}"
        elif key.startswith("spark.kerberos.") or key not in merged:
            merged[key] = value
    return merged


def open_hive_session(
    conf: dict[str, str],
    metastore_uri: str,
    login: KerberosLogin | None,
    before_start: Callable[[], None],
    say: Callable[[str], None],
) -> tuple[Any, bool]:
    """The session (logged in as `login` when given, `conf` already `kerberized_conf`) and whether this call started
    it (False: a session already running in this process was reused; its owner stops it). `before_start` runs
    right before the JVM starts (after the kinit): the caller's checks of the metastore, its announcement."""
    running = running_session_conf()
    if login is None:
        before_start()
        return start_spark_session(conf), running is None
    login.login()  # first: a credential problem is said as such, whatever else runs in this process
    spark = None
    try:
        if running is not None:
            login.check_running_session(running)
        before_start()
        spark = start_spark_session(conf)
        login.login_jvm(spark)
        check_metastore(login, spark, metastore_uri)
    except BaseException:
        if spark is not None and running is None:
            spark.stop()
        login.close()
        raise
    say(
        f"Kerberos: logged in as {login.principal} from keytab {login.keytab} (private credential cache), "
        f"Kerberos configuration {login.krb5_conf_shown}"
    )
    return spark, running is None
