"""The real Kerberos of the resource tests: a throwaway MIT KDC realm and a SASL/Kerberos Hive Metastore (shared by
test_kerberos.py and test_kerberos_load.py, one of each per test session)."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakekeeper_dagster_tests.jvm import TEST_METASTORE_FLAGS
from spark_resources.metastore import MetastoreServer, free_port

REALM = "LAKE.TEST"
SERVICE = f"hive/localhost@{REALM}"


@dataclass
class Kdc:
    """A running throwaway realm: its k5test object, directory and krb5.conf."""

    realm: object
    dir: Path

    @property
    def krb5_conf(self) -> str:
        return self.realm.env["KRB5_CONFIG"]

    def kadmin(self, query: str) -> None:
        self.realm.run_kadminl(query)

    def principal_with_keytab(self, name: str, options: str = "") -> str:
        """Create `name@REALM` with a random key and return the path of its keytab."""
        keytab = self.dir / f"{name.replace('/', '_')}.keytab"
        self.kadmin(f"addprinc -randkey {options} {name}@{REALM}")
        self.realm.extract_keytab(f"{name}@{REALM}", str(keytab))
        return str(keytab)

    def kdc_log(self) -> str:
        return (self.dir / "kdc.log").read_text(errors="replace")


def _kdc_missing() -> str | None:
    for tool in ("krb5kdc", "kdb5_util", "kadmin.local", "kinit", "krb5-config"):
        if not (shutil.which(tool) or Path("/usr/sbin", tool).exists()):
            return tool
    return None


@pytest.fixture(scope="session")
def kdc() -> Kdc:
    """One MIT KDC realm LAKE.TEST on loopback for the test session (Debian krb5 packages + PyPI k5test)."""
    missing = _kdc_missing()
    if missing:
        reason = (
            f"MIT Kerberos KDC tools not installed ({missing} not found): "
            "apt-get install krb5-kdc krb5-admin-server krb5-user libkrb5-dev"
        )
        if os.environ.get("LAKEKEEPER_REQUIRE_KDC") == "1":
            pytest.fail(f"LAKEKEEPER_REQUIRE_KDC=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    import k5test

    realm = k5test.K5Realm(realm=REALM, portbase=free_port(), create_user=False, create_host=False, get_creds=False)
    yield Kdc(realm=realm, dir=Path(realm.tmpdir))
    realm.stop()


@pytest.fixture(scope="session")
def kerberized_metastore(kdc, tmp_path_factory) -> MetastoreServer:
    """The local Hive Metastore with SASL/Kerberos on, as service principal hive/localhost."""
    keytab = kdc.principal_with_keytab("hive/localhost")
    server = MetastoreServer(
        home=tmp_path_factory.mktemp("kerberized_metastore"),
        uri=f"thrift://localhost:{free_port()}",
        extra_hive_site={
            "hive.metastore.sasl.enabled": "true",
            "hive.metastore.kerberos.principal": SERVICE,
            "hive.metastore.kerberos.keytab.file": keytab,
        },
        extra_core_site={"hadoop.security.authentication": "kerberos"},
        java_options=[*TEST_METASTORE_FLAGS, f"-Djava.security.krb5.conf={kdc.krb5_conf}"],
        plain_thrift=False,  # the server now speaks SASL only; readiness is its open port
    )
    server.start()
    yield server
    server.stop()
