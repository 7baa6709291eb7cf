"""The first metastore call of a Kerberized session: a failed SASL/GSS handshake becomes a KerberosError that names
the krb5.conf, the client and service principals and what to check, instead of py4j's `Unable to instantiate
SessionHiveMetaStoreClient`."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any
from urllib.parse import urlparse

from spark_resources.errors import KerberosError
from spark_resources.kerberos import KerberosLogin, last_line
from spark_resources.py4j import hadoop_conf, java_classes, java_messages

METASTORE_PRINCIPAL_KEY = "hive.metastore.kerberos.principal"
HIVE_DEFAULT_METASTORE_PRINCIPAL = "hive-metastore/_HOST@EXAMPLE.COM"  # HiveConf's default when the key is unset
METASTORE_CLIENT_FAILURE = "org.apache.hadoop.hive.metastore.api.MetaException"  # the client could not connect


def check_metastore(login: KerberosLogin, spark: Any, metastore_uri: str) -> None:
    """First catalog call of the session; a failed Kerberos handshake with the metastore is a KerberosError."""
    try:
        spark.catalog.listDatabases()
    except Exception as error:
        # Hive's client flattens the transport failure into its MetaException's text: the class chain says the
        # client could not connect, only that text says the SASL/GSS handshake was the reason.
        failure = java_messages(error)[-1] if METASTORE_CLIENT_FAILURE in java_classes(error) else ""
        if "GSS initiate failed" not in failure:
            raise
        raise KerberosError(handshake_message(login, spark, metastore_uri, failure)) from None


def metastore_service_principal(spark: Any, metastore_uri: str) -> tuple[str, str]:
    """The metastore principal the session's client asks a ticket for (`_HOST` replaced, as the client does, by
    the first URI's host), and where it is set."""
    if spark.conf.get(f"spark.hadoop.{METASTORE_PRINCIPAL_KEY}", None):
        source = f"spark.hadoop.{METASTORE_PRINCIPAL_KEY}"
    else:
        source = f"{METASTORE_PRINCIPAL_KEY} in hive-site.xml"
    configured = hadoop_conf(spark).get(METASTORE_PRINCIPAL_KEY)
    if configured is None:
        configured, source = HIVE_DEFAULT_METASTORE_PRINCIPAL, f"Hive's default, {METASTORE_PRINCIPAL_KEY} is not set"
    host = urlparse(metastore_uri.split(",")[0].strip()).hostname or ""
    return str(configured).replace("_HOST", host.lower()), source


def handshake_message(login: KerberosLogin, spark: Any, metastore_uri: str, failure: str) -> str:
    """What failed, with which files and principals, and what to check: the metastore refused the ticket (its
    side), or the KDC gave none (MIT's reason, asked with the run's own credentials)."""
    service, source = metastore_service_principal(spark, metastore_uri)
    head = (
        f"the Kerberos handshake with the Hive Metastore at {metastore_uri} failed (client principal "
        f"{login.principal}, keytab {login.keytab}; metastore service principal {service} from {source}; "
        f"Kerberos configuration {login.krb5_conf_shown}): "
    )
    setting = f"spark.hadoop.{METASTORE_PRINCIPAL_KEY} in spark_submit.extra_conf"
    if "Peer indicated failure" in failure:
        return head + (
            f"the metastore refused the ticket for {service}: it does not hold the current key of that principal. "
            f"Check that {service} is the metastore's own principal ({METASTORE_PRINCIPAL_KEY} in its hive-site.xml; "
            f"set {setting} to match it) and that the metastore's keytab (hive.metastore.kerberos.keytab.file) "
            "holds its current key. Nothing was done."
        )
    refused = service_ticket_refusal(login, service)
    return head + (
        f"no ticket for {service} could be obtained ({refused or 'the reason is in the driver log'}). Check that "
        f"{service} exists in the KDC (set {setting} to the metastore's own principal; `_HOST` stands for the "
        f"metastore URI's host) and that its realm is known to {login.krb5_conf or '/etc/krb5.conf'}. "
        "Nothing was done."
    )


def service_ticket_refusal(login: KerberosLogin, service: str) -> str | None:
    """MIT's reason why the KDC gives the run no ticket for `service` (`kvno` on the run's private cache), or None
    when it gives one (or kvno is not installed)."""
    kvno = shutil.which("kvno")
    if kvno is None or login.cache_dir is None:
        return None
    env = {**os.environ, **({"KRB5_CONFIG": login.krb5_conf} if login.krb5_conf else {})}
    command = [kvno, "-c", login.ccache, service]
    try:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return "the KDC did not answer"
    return None if result.returncode == 0 else last_line(result.stderr + result.stdout).removeprefix("kvno: ")
