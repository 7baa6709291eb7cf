"""A Kerberized HDFS (the local Hadoop with `kerberos`: service principal hdfs/localhost, SASL on the data transfer,
HTTPS only) against the test KDC, and Spark clients of it, each in a subprocess of its own (kerberos_hdfs_scenarios.py;
UGI is JVM-global): logged in from a keytab through the resource's login it writes and reads a table on HDFS
through a Kerberized metastore, across a ticket that runs out mid-run; on the Kerberized YARN its executors work on
delegation tokens, across tokens that run out mid-run; without a ticket it is refused, and Hadoop's message names
Kerberos."""

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
from spark_resources.local_yarn import LocalYarn
from spark_resources.metastore import MetastoreServer, free_port

# In the YARN tier, beside the suite: a secure Hadoop of its own is a long start.
pytestmark = [pytest.mark.kerberos, pytest.mark.hdfs, pytest.mark.slow, pytest.mark.cluster(only="yarn")]

HDFS_SERVICE = f"hdfs/localhost@{REALM}"
METASTORE_SERVICE = f"hive-hdfs/localhost@{REALM}"  # not hive/localhost: the session's other metastore has that one
USER = "etl"
TICKET_LIFETIME = 15  # seconds: the user's tickets in the first test, so that one runs out mid-run
TOKEN_LIFETIME = 40  # seconds: the NameNode's delegation tokens at most, so that those of a YARN test run out mid-run


@pytest.fixture(scope="module")
def secure_hdfs(kdc, tmp_path_factory) -> LocalHadoop:
    """The local Hadoop, Kerberized, with one NodeManager and a home directory /user/etl owned by etl (made by the
    HDFS superuser, logged in from the service keytab with kinit, through Hadoop's own shell)."""
    keytab = kdc.principal_with_keytab("hdfs/localhost")
    kdc.kadmin(f"addprinc -randkey HTTP/localhost@{REALM}")
    kdc.kadmin(f"ktadd -k {keytab} HTTP/localhost@{REALM}")
    kerberos = HadoopKerberos(
        HDFS_SERVICE, f"HTTP/localhost@{REALM}", keytab, kdc.krb5_conf, token_lifetime=TOKEN_LIFETIME
    )
    home = tmp_path_factory.mktemp("secure_hadoop")
    hadoop = LocalHadoop(home=home, nodemanagers=1, kerberos=kerberos, java_options=TEST_JVM_FLAGS)
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


def _scenario(name: str, params: dict, env: dict[str, str], tmp_path: Path, all_steps: bool = False) -> dict:
    """The scenario's result (with `all_steps`, every step's, by step)."""
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
    steps = [json.loads(line[len("RESULT ") :]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    return {step.pop("step"): step for step in steps} if all_steps else steps[-1]


@pytest.fixture(scope="module")
def user_keytab(kdc) -> str:
    return kdc.principal_with_keytab(USER)


def _user_params(kdc, secure_hdfs, hdfs_metastore, tmp_path) -> dict:
    return {
        "metastore_uri": hdfs_metastore.uri,
        "metastore_principal": METASTORE_SERVICE,
        "warehouse_dir": (tmp_path / "warehouse").as_uri(),
        "krb5_conf": kdc.krb5_conf,
        "hdfs_conf": secure_hdfs.spark_conf(),
        "home": f"{secure_hdfs.uri}/user/{USER}",
    }


def test_a_spark_application_on_the_kerberized_yarn_works_on_delegation_tokens_across_their_expiry(
    kdc, secure_hdfs, hdfs_metastore, user_keytab, tmp_path
):
    params = _user_params(kdc, secure_hdfs, hdfs_metastore, tmp_path)
    params["spark_submit"] = LocalYarn(secure_hdfs, num_executors=1).spark_submit()
    params["yarn_dir"] = str(secure_hdfs.home / "yarn")
    params["token_lifetime"] = TOKEN_LIFETIME
    env = {
        **kdc.realm.env,
        "KRB5CCNAME": f"FILE:{tmp_path / 'user_default_ccache'}",
        "LK_PRINCIPAL": f"{USER}@{REALM}",
        "LK_KEYTAB": user_keytab,
        "HADOOP_CONF_DIR": str(secure_hdfs.conf_dir),
    }
    steps = _scenario("on_yarn", params, env, tmp_path, all_steps=True)
    done, later = steps["logged_in"], steps["after_token_expiry"]
    assert done["master"] == "yarn" and done["executors"] == 1
    assert done["login"] == f"{USER}@{REALM} (auth:KERBEROS)"
    # The ApplicationMaster's container and the executor's were launched with an HDFS delegation token (Spark's,
    # obtained from the keytab login, renewed by the ResourceManager); no container holds a Kerberos credential.
    assert len(done["tokens"]) == 2, done["tokens"]
    assert all("HDFS_DELEGATION_TOKEN" in kinds for kinds in done["tokens"].values()), done["tokens"]
    # Written and read by the executor in a YARN container, which holds no Kerberos credentials: on the tokens.
    assert done["rows"] == [30, sum(range(30))]
    assert done["sample"] == ["row-0", "row-1", "row-2"]
    assert len(done["files"]) == 2 and all(owner == USER for _, owner in done["files"])
    assert LocalYarn(secure_hdfs).application(done["app_id"])["user"] == USER
    # The tokens the containers started with ran out (the NameNode honours them TOKEN_LIFETIME seconds at most) before
    # the executor wrote again: it wrote and read on the new ones Spark obtained from the keytab login.
    assert later["lifetimes"] and all(lifetime == TOKEN_LIFETIME for lifetime in later["lifetimes"]), later
    assert later["rows"] == [40, sum(range(40))]


def test_a_keytab_login_writes_and_reads_a_table_on_the_kerberized_hdfs(
    kdc, secure_hdfs, hdfs_metastore, user_keytab, tmp_path
):
    params = _user_params(kdc, secure_hdfs, hdfs_metastore, tmp_path)
    keytab = user_keytab
    principal = f"{USER}@{REALM}"
    params["ticket_lifetime"] = TICKET_LIFETIME
    kdc.kadmin(f'modprinc -maxlife "{TICKET_LIFETIME} seconds" {principal}')
    user_cache = tmp_path / "user_default_ccache"
    env = {**kdc.realm.env, "KRB5CCNAME": f"FILE:{user_cache}", "LK_PRINCIPAL": f"{USER}@{REALM}", "LK_KEYTAB": keytab}
    logins_before = _logins(kdc, principal)
    try:
        steps = _scenario("logged_in", params, env, tmp_path, all_steps=True)
    finally:  # the other tests' etl: tickets of the default life
        kdc.kadmin(f'modprinc -maxlife "1 day" {principal}')
    done = steps["logged_in"]
    assert done["login"] == f"{USER}@{REALM} (auth:KERBEROS)"
    assert done["rows"] == [30, sum(range(30))]
    assert done["sample"] == ["row-0", "row-1", "row-2"]
    assert done["files"] and all(owner == USER for _, owner in done["files"])  # written as etl, not as root
    assert "events" in done["home"]
    tickets = [line for line in kdc.kdc_log().splitlines() if f"{USER}@{REALM} for {HDFS_SERVICE}" in line]
    assert any("ISSUE" in line for line in tickets)  # a service ticket of the NameNode's principal, for etl
    renewed = steps["renewed"]  # the first ticket had run out: logged in again from the keytab, written on
    assert renewed["rows"] == [40, sum(range(40))]
    assert _logins(kdc, principal) - logins_before >= 3  # kinit, the JVM's login, the relogin
    assert not user_cache.exists()


def _logins(kdc, principal: str) -> int:
    """Tickets the KDC has issued to `principal` from its key (AS requests), as its log shows."""
    lines = kdc.kdc_log().splitlines()
    return sum("AS_REQ" in line and "ISSUE" in line and f"{principal} for krbtgt/" in line for line in lines)


def test_without_a_ticket_the_kerberized_hdfs_refuses_and_names_kerberos(kdc, secure_hdfs, tmp_path):
    params = {
        "hdfs_conf": secure_hdfs.spark_conf(),
        "krb5_driver": {"spark.driver.extraJavaOptions": f"-Djava.security.krb5.conf={kdc.krb5_conf}"},
        "home": f"{secure_hdfs.uri}/user/{USER}",
    }
    empty_cache = f"FILE:{tmp_path / 'no_ccache'}"  # no ticket anywhere
    refused = _scenario("no_ticket", params, {**kdc.realm.env, "KRB5CCNAME": empty_cache}, tmp_path)["error"]
    assert "Client cannot authenticate via:[TOKEN, KERBEROS]" in refused
