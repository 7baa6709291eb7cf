"""A Kerberized HDFS (the local Hadoop with `kerberos`: service principal hdfs/localhost, SASL on the data transfer,
HTTPS only) against the test KDC, and Spark clients of it, each in a subprocess of its own (kerberos_hdfs_scenarios.py;
UGI is JVM-global): logged in from a keytab through the resource's login it writes and reads a table on HDFS
through a Kerberized metastore; without a ticket it is refused, and Hadoop's message names Kerberos."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakekeeper_dagster_tests.jvm import TEST_JVM_FLAGS, TEST_METASTORE_FLAGS
from lakekeeper_dagster_tests.resources.conftest import REALM
from lakekeeper_dagster_tests.tables import REPO
from spark_resources.hadoop import LocalHadoop
from spark_resources.hadoop_kerberos import HadoopKerberos
from spark_resources.metastore import MetastoreServer, free_port

pytestmark = [pytest.mark.kerberos, pytest.mark.hdfs, pytest.mark.slow]

HDFS_SERVICE = f"hdfs/localhost@{REALM}"
METASTORE_SERVICE = f"hive-hdfs/localhost@{REALM}"  # not hive/localhost: the session's other metastore has that one
USER = "etl"


@pytest.fixture(scope="module")
def secure_hdfs(kdc, tmp_path_factory) -> LocalHadoop:
    """The local HDFS, Kerberized, with a home directory /user/etl owned by etl (made by the HDFS superuser,
    logged in from the service keytab with kinit, through Hadoop's own shell)."""
    keytab = kdc.principal_with_keytab("hdfs/localhost")
    kdc.kadmin(f"addprinc -randkey HTTP/localhost@{REALM}")
    kdc.kadmin(f"ktadd -k {keytab} HTTP/localhost@{REALM}")
    kerberos = HadoopKerberos(HDFS_SERVICE, f"HTTP/localhost@{REALM}", keytab, kdc.krb5_conf)
    home = tmp_path_factory.mktemp("secure_hadoop")
    hadoop = LocalHadoop(home=home, kerberos=kerberos, java_options=TEST_JVM_FLAGS)
    hadoop.start()
    try:
        cache = f"FILE:{home / 'superuser-ccache'}"
        env = {**os.environ, **kdc.realm.env, "KRB5CCNAME": cache}
        subprocess.run(["kinit", "-k", "-t", keytab, HDFS_SERVICE], env=env, check=True, capture_output=True)
        shell = [*hadoop.java(hadoop.conf_dir), "org.apache.hadoop.fs.FsShell"]
        for args in (["-mkdir", "-p", f"/user/{USER}"], ["-chown", USER, f"/user/{USER}"]):
            done = subprocess.run([*shell, *args], env=env, capture_output=True, text=True, timeout=180)
            assert done.returncode == 0, done.stderr[-3000:]
        yield hadoop
    finally:
        hadoop.stop()


@pytest.fixture(scope="module")
def hdfs_metastore(kdc, secure_hdfs, tmp_path_factory) -> MetastoreServer:
    """A Kerberized metastore that is a client of the Kerberized HDFS (it checks table locations there)."""
    keytab = kdc.principal_with_keytab(METASTORE_SERVICE.split("@")[0])
    server = MetastoreServer(
        home=tmp_path_factory.mktemp("hdfs_metastore"),
        uri=f"thrift://localhost:{free_port()}",
        extra_hive_site={
            "hive.metastore.sasl.enabled": "true",
            "hive.metastore.kerberos.principal": METASTORE_SERVICE,
            "hive.metastore.kerberos.keytab.file": keytab,
        },
        extra_core_site=secure_hdfs.client_conf(),
        java_options=[*TEST_METASTORE_FLAGS, f"-Djava.security.krb5.conf={kdc.krb5_conf}"],
        plain_thrift=False,
    )
    server.start()
    yield server
    server.stop()


def _scenario(name: str, params: dict, env: dict[str, str], tmp_path: Path) -> dict:
    (tmp_path / "params.json").write_text(json.dumps(params))
    script = Path(__file__).with_name("kerberos_hdfs_scenarios.py")
    proc = subprocess.run(
        [sys.executable, str(script), name, str(tmp_path / "params.json")],
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(lines[-1][len("RESULT ") :])


def test_a_keytab_login_writes_and_reads_a_table_on_the_kerberized_hdfs(kdc, secure_hdfs, hdfs_metastore, tmp_path):
    keytab = kdc.principal_with_keytab(USER)
    params = {
        "metastore_uri": hdfs_metastore.uri,
        "metastore_principal": METASTORE_SERVICE,
        "warehouse_dir": (tmp_path / "warehouse").as_uri(),
        "krb5_conf": kdc.krb5_conf,
        "hdfs_conf": secure_hdfs.spark_conf(),
        "home": f"{secure_hdfs.uri}/user/{USER}",
    }
    user_cache = tmp_path / "user_default_ccache"
    env = {**kdc.realm.env, "KRB5CCNAME": f"FILE:{user_cache}", "LK_PRINCIPAL": f"{USER}@{REALM}", "LK_KEYTAB": keytab}
    done = _scenario("logged_in", params, env, tmp_path)
    assert done["login"] == f"{USER}@{REALM} (auth:KERBEROS)"
    assert done["rows"] == [30, sum(range(30))]
    assert done["sample"] == ["row-0", "row-1", "row-2"]
    assert done["files"] and all(owner == USER for _, owner in done["files"])  # written as etl, not as root
    assert done["home"] == ["events"]
    tickets = [line for line in kdc.kdc_log().splitlines() if f"{USER}@{REALM} for {HDFS_SERVICE}" in line]
    assert any("ISSUE" in line for line in tickets)  # a service ticket of the NameNode's principal, for etl
    assert not user_cache.exists()


def test_without_a_ticket_the_kerberized_hdfs_refuses_and_names_kerberos(kdc, secure_hdfs, tmp_path):
    params = {
        "hdfs_conf": secure_hdfs.spark_conf(),
        "krb5_driver": {"spark.driver.extraJavaOptions": f"-Djava.security.krb5.conf={kdc.krb5_conf}"},
        "home": f"{secure_hdfs.uri}/user/{USER}",
    }
    empty_cache = f"FILE:{tmp_path / 'no_ccache'}"  # no ticket anywhere
    refused = _scenario("no_ticket", params, {**kdc.realm.env, "KRB5CCNAME": empty_cache}, tmp_path)["error"]
    assert "Client cannot authenticate via:[TOKEN, KERBEROS]" in refused
