"""The code location's load and runs against the Kerberized metastore, configured as users have it: principal and
keytab in spark_submit, KRB5_CONFIG in the environment, no krb5_conf key.

All steps run in one subprocess (kerberos_load_scenarios.py; one JVM, whose Kerberos configuration is per process):
the module's fixture runs it once and each test checks its steps.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lakekeeper_dagster_tests.resources.conftest import REALM, SERVICE
from lakekeeper_dagster_tests.tables import REPO

pytestmark = pytest.mark.kerberos

PRINCIPAL = f"loader@{REALM}"


def _run_scenarios(kdc, metastore, root: Path, keytab: str, plain_first: bool) -> dict:
    """Run kerberos_load_scenarios.py once in a fresh process; its steps by name and the paths the tests check."""
    user_cache = root / "user_default_ccache"
    params = {
        "plain_first": plain_first,
        "metastore_uri": metastore.uri,
        "warehouse_dir": (root / "warehouse").as_uri(),
        "table_dir": str(root / "flat"),
        "principal": PRINCIPAL,
        "keytab": keytab,
        "service_principal": SERVICE,
        "unknown_service": f"hive/nowhere@{REALM}",
        "keyless_service": f"hive/keyless@{REALM}",
    }
    (root / "params.json").write_text(json.dumps(params))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKEKEEPER_", "KRB5"))}
    env.update(
        PYTHONPATH=str(REPO),
        KRB5_CONFIG=kdc.krb5_conf,  # as users have it: the environment names the realm's file, the config does not
        KRB5CCNAME=f"FILE:{user_cache}",  # the user's default cache: must stay untouched
    )
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("kerberos_load_scenarios.py")), str(root / "params.json")],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    steps = {}
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            step = json.loads(line[len("RESULT ") :])
            steps[step.pop("step")] = step
    assert not user_cache.exists()
    return {"steps": steps, "keytab": keytab, "uri": metastore.uri, "krb5_conf": kdc.krb5_conf}


@pytest.fixture(scope="module")
def scenario(kdc, kerberized_metastore, tmp_path_factory) -> dict:
    """The Kerberized resource first in its process: creates the table, loads the location, runs, GSS failures."""
    kdc.principal_with_keytab("hive/keyless")  # known to the KDC; the metastore holds no key of it
    root = tmp_path_factory.mktemp("kerberos_load")
    return _run_scenarios(kdc, kerberized_metastore, root, kdc.principal_with_keytab("loader"), plain_first=False)


@pytest.fixture(scope="module")
def plain_first(scenario, kdc, kerberized_metastore, tmp_path_factory) -> dict:
    """A plain session first in its process (on the table `scenario` created), then the Kerberized resource."""
    root = tmp_path_factory.mktemp("kerberos_load_plain_first")
    return _run_scenarios(kdc, kerberized_metastore, root, scenario["keytab"], plain_first=True)


def _step(scenario: dict, name: str) -> dict:
    step = scenario["steps"][name]
    assert "failed" not in step, step.get("trace") or step
    return step


def test_krb5_config_from_the_environment_is_the_jvms(scenario):
    """kinit honours KRB5_CONFIG; the driver JVM must read the same file (not /etc/krb5.conf)."""
    created = _step(scenario, "create")
    assert created["launched_with"] == [f"-Djava.security.krb5.conf={scenario['krb5_conf']}"]
    assert created["files"] == 4 and created["running_after"] is False
    run = _step(scenario, "run")
    assert run["krb5_conf"] == scenario["krb5_conf"]
    assert run["login"] == f"{PRINCIPAL} (auth:KERBEROS)"
    assert run["kerberos_lines"] == [
        f"Kerberos: logged in as {PRINCIPAL} from keytab {scenario['keytab']} (private credential cache), "
        f"Kerberos configuration {scenario['krb5_conf']} (KRB5_CONFIG)"
    ]


def test_location_loads_and_runs_through_the_kerberized_metastore(scenario):
    """read_managed_tables goes through the runs' Kerberized resource, leaves no session behind, and a compaction
    run of the definitions built from it logs in on its own and compacts the table."""
    created = _step(scenario, "create")
    load = _step(scenario, "load")
    assert load == {"tables": ["kload.flat"], "running_after": False}
    run = _step(scenario, "run")
    assert run["success"] is True
    assert run["rows"] == created["rows"]
    assert len(run["rows"]) == 30
    assert run["files"] == 1  # 4 small files compacted into one, through the Kerberized metastore


@pytest.mark.slow  # a second JVM subprocess
def test_a_plain_session_started_earlier_is_not_reused(plain_first):
    """The old load started a plain session (and JVM) first; the resource must neither reuse that session nor, once
    it is stopped, let its JVM read another krb5.conf than kinit's."""
    step = _step(plain_first, "plain_first")
    assert step["cls"] == "KerberosError"
    assert step["error"].startswith(
        f"a Spark session without the Kerberos login of {PRINCIPAL} is already running in this process "
        "(spark.hadoop.hadoop.security.authentication=(not set)"
    )
    assert step["plain_alive"] is True  # the resource did not stop a session it did not start
    after = _step(plain_first, "after_plain")
    assert after.pop("launched_with") == []  # the JVM started without a krb5.conf option
    login = f"{PRINCIPAL} (auth:KERBEROS)"
    assert after == {"tables": ["kload.flat"], "krb5_conf": plain_first["krb5_conf"], "login": login}


def test_gss_failure_at_the_metastore_is_a_kerberos_error(scenario):
    """kinit and the JVM login succeed, the metastore handshake does not: a KerberosError naming the krb5.conf, both
    principals and what to check (the old load gave py4j's `Unable to instantiate SessionHiveMetaStoreClient`)."""
    keytab, uri, krb5_conf = scenario["keytab"], scenario["uri"], scenario["krb5_conf"]
    setting = "spark.hadoop.hive.metastore.kerberos.principal"
    for name, service, reason in [
        (
            "unknown_service",
            f"hive/nowhere@{REALM}",
            f"no ticket for hive/nowhere@{REALM} could be obtained (Server hive/nowhere@{REALM} not found in "
            f"Kerberos database while getting credentials for hive/nowhere@{REALM}). Check that hive/nowhere@{REALM} "
            "exists in the KDC",
        ),
        (
            "keyless_service",
            f"hive/keyless@{REALM}",
            f"the metastore refused the ticket for hive/keyless@{REALM}: it does not hold the current key of that "
            "principal",
        ),
    ]:
        step = _step(scenario, name)
        assert step["cls"] == "KerberosError", step
        assert step["error"].startswith(
            f"the Kerberos handshake with the Hive Metastore at {uri} failed (client principal {PRINCIPAL}, keytab "
            f"{keytab}; metastore service principal {service} from {setting}; Kerberos configuration {krb5_conf} "
            f"(KRB5_CONFIG)): {reason}"
        ), step["error"]
        assert step["context_shown"] is False and step["cause"] == "None"  # no py4j error behind it
        assert "py4j" not in step["error"].lower() and "SessionHiveMetaStoreClient" not in step["error"]
