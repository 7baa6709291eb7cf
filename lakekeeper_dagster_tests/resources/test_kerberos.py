"""Kerberos against a real throwaway MIT KDC realm and a real SASL/Kerberos Hive Metastore thrift server.

Failures that happen before the JVM (keytab, realm, KDC, key) run in this process through a Dagster job; the
Kerberized Spark scenarios run in one subprocess (kerberos_scenarios.py), since UGI is JVM-global.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import dagster as dg
import pytest

from lakekeeper_dagster_tests.resources.conftest import REALM, SERVICE
from lakekeeper_dagster_tests.tables import REPO, cli_spark_submit, run_cli
from spark_resources.kerberos import keytab_principals
from spark_resources.resource import HiveSparkResource

pytestmark = pytest.mark.kerberos

TICKET_LIFETIME = 15  # seconds: the max life of the renewal principal


def test_keytab_principals_reads_a_real_keytab(kdc):
    keytab = kdc.principal_with_keytab("reader")
    kdc.principal_with_keytab("reader/batch")
    kdc.kadmin(f"ktadd -k {keytab} reader/batch@{REALM}")
    assert keytab_principals(keytab) == [f"reader@{REALM}", f"reader/batch@{REALM}"]


# --- failures before the JVM, each provoked for real, in a real Dagster run -----------------------------------


def _run_job(principal: str, keytab: str, krb5_conf: str, data_dir: Path) -> dg.ExecuteInProcessResult:
    """A one-op job that would write a file into `data_dir` once it holds a Spark session."""

    @dg.op
    def touch_table(spark: HiveSparkResource) -> None:
        spark.spark_session  # noqa: B018 - the Kerberos login happens on first use
        (data_dir / "written").write_text("changed")

    @dg.job
    def kerberos_job() -> None:
        touch_table()

    resource = HiveSparkResource(
        metastore_uri="thrift://localhost:1",
        principal=principal,
        keytab=keytab,
        spark_submit={"master": "local[1]", "krb5_conf": krb5_conf},
    )
    return kerberos_job.execute_in_process(resources={"spark": resource}, raise_on_error=False)


def _failure_message(run: dg.ExecuteInProcessResult) -> str:
    failures = [e for e in run.all_events if e.is_step_failure]
    assert len(failures) == 1
    error = failures[0].step_failure_data.error
    while error.cause is not None and "KerberosError" not in error.cls_name:
        error = error.cause
    assert error.cls_name == "KerberosError", error.message
    return error.message


@pytest.fixture
def failure_case(kdc, tmp_path, monkeypatch):
    """Run the job with (principal, keytab[, krb5.conf]); return the KerberosError text after checking no change."""
    before = {k: os.environ.get(k) for k in ("KRB5CCNAME", "KRB5_CONFIG")}
    tempdir = tmp_path / "tmp"
    tempdir.mkdir()

    def run(principal: str, keytab: str, krb5_conf: str | None = None) -> str:
        data_dir = tmp_path / "data"
        data_dir.mkdir(exist_ok=True)
        monkeypatch.setattr(tempfile, "tempdir", str(tempdir))
        result = _run_job(principal, keytab, krb5_conf or kdc.krb5_conf, data_dir)
        assert not result.success
        assert list(data_dir.iterdir()) == []  # nothing was changed
        assert list(tempdir.iterdir()) == []  # the private credential cache is gone
        assert {k: os.environ.get(k) for k in before} == before
        return _failure_message(result)

    return run


def test_missing_keytab(kdc, failure_case, tmp_path):
    message = failure_case(f"alice@{REALM}", str(tmp_path / "nowhere.keytab"))
    assert f"keytab {tmp_path / 'nowhere.keytab'} (spark_submit.keytab) does not exist" in message
    assert f"alice@{REALM}" in message


def test_unreadable_keytab(kdc, failure_case, tmp_path):
    message = failure_case(f"alice@{REALM}", str(tmp_path))
    assert f"keytab {tmp_path} (spark_submit.keytab) is not a readable file" in message
    garbage = tmp_path / "garbage.keytab"
    garbage.write_bytes(b"this is not a keytab")
    message = failure_case(f"alice@{REALM}", str(garbage))
    assert "is not a usable keytab file" in message
    assert "this is not" not in message  # keytab contents are never shown


def test_principal_not_in_keytab(kdc, failure_case):
    keytab = kdc.principal_with_keytab("carol")
    message = failure_case(f"dave@{REALM}", keytab)
    assert f"principal dave@{REALM} (spark_submit.principal) is not in keytab {keytab}" in message
    assert f"which holds: carol@{REALM}" in message


def test_wrong_realm(kdc, failure_case):
    keytab = Path(kdc.principal_with_keytab("erin"))
    other = keytab.with_name("erin-other-realm.keytab")
    other.write_bytes(keytab.read_bytes().replace(REALM.encode(), b"WIND.TEST"))  # same entry, other realm
    message = failure_case("erin@WIND.TEST", str(other))
    expected = "realm WIND.TEST of principal erin@WIND.TEST is not known to the Kerberos configuration"
    assert f"{expected} {kdc.krb5_conf}" in message


def test_unknown_principal_and_outdated_keytab(kdc, failure_case):
    ghost = kdc.principal_with_keytab("ghost")
    kdc.kadmin(f"delprinc -force ghost@{REALM}")
    assert f"the KDC of realm {REALM} does not know principal ghost@{REALM}" in failure_case(f"ghost@{REALM}", ghost)

    stale = kdc.principal_with_keytab("frank")
    kdc.kadmin(f"cpw -randkey frank@{REALM}")
    message = failure_case(f"frank@{REALM}", stale)
    assert f"the KDC rejected the key of frank@{REALM} in keytab {stale}: the keytab is out of date" in message


def test_kdc_unreachable(kdc, failure_case):
    keytab = kdc.principal_with_keytab("grace")
    kdc.realm.stop_kdc()
    try:
        message = failure_case(f"grace@{REALM}", keytab)
    finally:
        kdc.realm.start_kdc()
    assert f"no KDC of realm {REALM} answered (Kerberos configuration {kdc.krb5_conf})" in message


def test_clock_skew(kdc, failure_case, monkeypatch):
    """kinit on a clock one hour ahead (libfaketime), with krb5.conf `kdc_timesync = 0`.

    MIT clients correct their clock from the KDC's by default (kdc_timesync = 1), which hides small skews from
    kinit; the JVM does not, so the message covers both.
    """
    libfaketime = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not libfaketime:
        reason = "libfaketime not installed (apt-get install faketime): cannot shift kinit's clock"
        if os.environ.get("LAKEKEEPER_REQUIRE_KDC") == "1":
            pytest.fail(f"LAKEKEEPER_REQUIRE_KDC=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    keytab = kdc.principal_with_keytab("heidi")
    no_timesync = kdc.realm.special_env("no_timesync", False, krb5_conf={"libdefaults": {"kdc_timesync": "0"}})
    monkeypatch.setenv("LD_PRELOAD", str(libfaketime[0]))
    monkeypatch.setenv("FAKETIME", "+1h")
    message = failure_case(f"heidi@{REALM}", keytab, no_timesync["KRB5_CONFIG"])
    assert (
        f"Kerberos login failed: clock skew too great between this host and the KDC of realm {REALM} "
        f"while logging in heidi@{REALM}. Synchronise this host's clock (NTP/chrony)"
    ) in message


# --- the Kerberized metastore, through the resource's session, in one subprocess ------------------------------


@pytest.mark.slow
def test_kerberized_metastore_tables_renewal_expiry_and_refusal(kdc, kerberized_metastore, tmp_path):
    name = "renewer"
    keytab = kdc.principal_with_keytab(name, options=f'-maxlife "{TICKET_LIFETIME} seconds"')
    kdc.principal_with_keytab("hive/otherhost")  # known to the KDC, but the metastore holds no key of it
    data_dir, tmp_root = tmp_path / "data", tmp_path / "tmp"
    data_dir.mkdir()
    tmp_root.mkdir()
    user_cache = tmp_path / "user_default_ccache"
    params = {
        "metastore_uri": kerberized_metastore.uri,
        "warehouse_dir": (tmp_path / "warehouse").as_uri(),
        "krb5_conf": kdc.krb5_conf,
        "principal": f"{name}@{REALM}",
        "service_principal": SERVICE,
        "wrong_service_principal": f"hive/otherhost@{REALM}",
        "data_dir": str(data_dir),
        "tmp_root": str(tmp_root),
        "ticket_lifetime": TICKET_LIFETIME,
        "kadmin_local": shutil.which("kadmin.local") or "/usr/sbin/kadmin.local",
    }
    (tmp_path / "params.json").write_text(json.dumps(params))
    env = {
        **os.environ,
        **kdc.realm.env,
        "PYTHONPATH": str(REPO),
        "TMPDIR": str(tmp_root),
        "KRB5CCNAME": f"FILE:{user_cache}",  # the user's default cache: must stay untouched
        "LK_PRINCIPAL": f"{name}@{REALM}",
        "LK_KEYTAB": keytab,
    }
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("kerberos_scenarios.py")), str(tmp_path / "params.json")],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=400,
    )
    steps = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            step = json.loads(line[len("RESULT ") :])
            steps[step.pop("step")] = step
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]

    refused = steps["metastore_refuses"]["error"]
    assert refused.startswith(
        f"the Kerberos handshake with the Hive Metastore at {kerberized_metastore.uri} failed (client principal "
        f"{name}@{REALM}, keytab {keytab}; metastore service principal hive/otherhost@{REALM}"
    )
    assert f"the metastore refused the ticket for hive/otherhost@{REALM}" in refused

    session = steps["session"]
    assert session["ccache"].startswith(f"FILE:{tmp_root}/lakekeeper-krb5-")
    assert session["login"] == f"{name}@{REALM} (auth:KERBEROS)"
    assert "kerberized" in steps["databases"]["names"]

    after = steps["after_renewal"]
    assert after["rows"] == [["2026-01-01", 40, sum(range(40))], ["2026-01-02", 40, sum(range(40, 80))]]
    assert after["sample"] == ["row-0", "row-1", "row-2"]
    assert after["partitions"] == ["dt=2026-01-01", "dt=2026-01-02"]
    assert after["compacted"] == [
        ["dt=2026-01-01", "compacted", 4, 1, True],
        ["dt=2026-01-02", "compacted", 4, 1, True],
    ]
    parquet = [f for f in after["files"] if f.endswith(".parquet")]
    assert len(parquet) == 2  # compacted through the Kerberized metastore: one file per partition
    logins = [line for line in kdc.kdc_log().splitlines() if "AS_REQ" in line and f"{name}@{REALM} for" in line]
    issued = [line for line in logins if "ISSUE" in line]
    assert len(issued) >= 3, logins  # kinit, JVM login, and the relogin after the first ticket expired

    expired = steps["expired"]["error"]
    assert expired.startswith(
        f"the Kerberos ticket of {name}@{REALM} has expired (or is about to) and renewing it from keytab {keytab} "
        "failed: the KDC rejected the key"
    )
    assert steps["expired"]["files"] == after["files"]  # nothing was changed
    partition_dirs = sorted(p.name for p in data_dir.joinpath("events").iterdir() if not p.name.startswith(".lk-old-"))
    assert partition_dirs == ["dt=2026-01-01", "dt=2026-01-02"]

    assert steps["teardown"] == {"ccache": f"FILE:{user_cache}", "private_cache_left": False}
    assert not user_cache.exists() and not list((tmp_path / "tmp").glob("lakekeeper-krb5-*"))


# --- the command line: the same login as the resource ----------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("krb5_from", ["spark_submit.krb5_conf", "KRB5_CONFIG"])
def test_the_cli_logs_in_as_the_resource_does(kdc, kerberized_metastore, tmp_path, krb5_from):
    """`analyze` from a YAML config with spark_submit.principal and keytab, krb5.conf from the
    config or from KRB5_CONFIG, against the Kerberized metastore. It failed with `Cannot locate KDC` and a message
    blaming the table's permissions: the CLI checked the keytab and never logged in. A metastore whose service
    principal is not the one asked for is named as a Kerberos handshake failure (exit 2), not a permission problem."""
    name = "cli-" + krb5_from.rsplit(".", 1)[-1].lower().replace("_", "")
    keytab = kdc.principal_with_keytab(name)
    submit = {**cli_spark_submit(), "principal": f"{name}@{REALM}", "keytab": keytab}
    env = {k: v for k, v in kdc.realm.env.items() if k != "KRB5_CONFIG"}
    if krb5_from == "KRB5_CONFIG":
        env["KRB5_CONFIG"] = kdc.krb5_conf
    else:
        submit["krb5_conf"] = kdc.krb5_conf
    user_cache = tmp_path / "user_ccache"
    env["KRB5CCNAME"] = f"FILE:{user_cache}"  # the user's own cache: never read or written
    env["TMPDIR"] = str(tmp_path / "tmp")  # where the private cache is made; gone when the command exits
    (tmp_path / "tmp").mkdir()

    def analyze(service: str):
        extra = {**submit.get("extra_conf", {}), "spark.hadoop.hive.metastore.kerberos.principal": service}
        config = {"spark_submit": {**submit, "extra_conf": extra}}
        args = ["analyze", "--table", "default.lk_absent"]
        return run_cli(args, tmp_path, kerberized_metastore.uri, env, config=config)

    done = analyze(SERVICE)  # the Kerberized metastore answers, as it answers only an authenticated client
    assert done.returncode == 2, done.stderr[-3000:]
    assert "table default.lk_absent does not exist in the metastore" in done.stderr
    assert f"Kerberos: logged in as {name}@{REALM} from keytab {keytab}" in done.stderr
    assert f"Kerberos configuration {kdc.krb5_conf} ({krb5_from})" in done.stderr
    logins = [line for line in kdc.kdc_log().splitlines() if "AS_REQ" in line and f"{name}@{REALM} for" in line]
    assert len([line for line in logins if "ISSUE" in line]) >= 2, logins  # kinit, then the driver's keytab login
    assert not user_cache.exists() and not list((tmp_path / "tmp").glob("lakekeeper-krb5-*"))

    kdc.principal_with_keytab(f"hive/{name}-other")  # known to the KDC; the metastore holds no key of it
    refused = analyze(f"hive/{name}-other@{REALM}")
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert f"the Kerberos handshake with the Hive Metastore at {kerberized_metastore.uri} failed" in refused.stderr
    assert "permission" not in refused.stderr.lower()
