"""A Kerberized local HDFS (`hadoop.LocalHadoop` with `kerberos`): the settings of a secure NameNode and DataNode
as Hadoop's own secure minicluster tests make them (SaslDataTransferTestCase): Kerberos authentication and service
authorization, block access tokens, SASL on the DataNode's data transfer (`authentication`) instead of privileged
ports, and the web servers on HTTPS only (what a DataNode with SASL requires), with a self-signed key store made
with the JDK's `keytool`.
"""

from __future__ import annotations

import secrets
import subprocess
from dataclasses import dataclass
from pathlib import Path

from spark_resources.errors import ResourceError
from spark_resources.metastore import _site_xml, java_executable

HOST_NAME = "localhost"  # the host part of the service principals; the clients name it, never _HOST


class HadoopKerberosError(ResourceError):
    """The Kerberized local HDFS could not be set up."""


@dataclass
class HadoopKerberos:
    """The identity of a secure local HDFS: `principal` (its NameNode's and DataNode's, e.g.
    `hdfs/localhost@REALM`, as CDP names them) and `http_principal` (`HTTP/localhost@REALM`, SPNEGO), both in
    `keytab`; `krb5_conf` the realm's configuration the JVM reads. A YARN beside it runs as `principal` too:
    Hadoop's MiniYARNCluster skips the ResourceManager's and NodeManagers' own keytab logins, so they serve as the
    JVM's login user (and a `yarn/...` principal of their own is refused by clients: "Server has invalid Kerberos
    principal"). Its containers run as the NodeManager's user (the DefaultContainerExecutor), the applications'
    HDFS access on their delegation tokens, which the NameNode honours `token_lifetime` seconds at most when set
    (Hadoop's default: 7 days)."""

    principal: str
    http_principal: str
    keytab: str
    krb5_conf: str
    token_lifetime: int | None = None

    def java_options(self) -> list[str]:
        return [f"-Djava.security.krb5.conf={self.krb5_conf}"]

    def core_settings(self) -> dict[str, str]:
        """core-site.xml of the servers and the clients: Kerberos and service-level authorization."""
        return {"hadoop.security.authentication": "kerberos", "hadoop.security.authorization": "true"}

    def client_settings(self) -> dict[str, str]:
        """What a client needs to reach this HDFS: the service principal it asks a ticket for and SASL on the data
        transfer."""
        return {
            **self.core_settings(),
            "dfs.namenode.kerberos.principal": self.principal,
            "dfs.datanode.kerberos.principal": self.principal,
            "dfs.data.transfer.protection": "authentication",
        }

    def yarn_settings(self) -> dict[str, str]:
        """The ResourceManager's and NodeManagers' principal, for them and their clients (Spark makes the
        ResourceManager's the renewer of an application's HDFS delegation tokens)."""
        return {"yarn.resourcemanager.principal": self.principal, "yarn.nodemanager.principal": self.principal}

    def server_settings(self) -> dict[str, str]:
        """The NameNode's and DataNode's settings (beside `client_settings`)."""
        return {
            **self.client_settings(),
            "dfs.namenode.keytab.file": self.keytab,
            "dfs.datanode.keytab.file": self.keytab,
            "dfs.web.authentication.kerberos.principal": self.http_principal,
            "dfs.web.authentication.kerberos.keytab": self.keytab,
            "dfs.block.access.token.enable": "true",
            "dfs.http.policy": "HTTPS_ONLY",
            "dfs.namenode.https-address": "127.0.0.1:0",
            "dfs.datanode.https.address": "127.0.0.1:0",
            "ipc.client.connect.max.retries.on.sasl": "10",
            **(self._token_settings() if self.token_lifetime else {}),
        }

    def _token_settings(self) -> dict[str, str]:
        """Delegation tokens valid `token_lifetime` seconds at most, renewed (and their keys rolled) at half that."""
        lifetime_ms = self.token_lifetime * 1000
        return {
            "dfs.namenode.delegation.token.max-lifetime": str(lifetime_ms),
            "dfs.namenode.delegation.token.renew-interval": str(lifetime_ms // 2),
            "dfs.namenode.delegation.key.update-interval": str(lifetime_ms // 2),
        }

    def write_ssl_conf(self, server_conf: Path) -> None:
        """ssl-server.xml and ssl-client.xml in `server_conf` (first on the servers' classpath) with a self-signed
        key store for HOST_NAME and a trust store of its certificate, made once."""
        keystore, truststore = server_conf / "keystore.jks", server_conf / "truststore.jks"
        password_file = server_conf / "ssl-password"
        if not (keystore.exists() and truststore.exists() and password_file.exists()):
            for stale in (keystore, truststore):
                stale.unlink(missing_ok=True)
            password = secrets.token_hex(12)
            keytool = str(Path(java_executable()).resolve().with_name("keytool"))
            cert = server_conf / "server.cer"
            store = ["-storepass", password, "-noprompt"]
            self._keytool(
                [keytool, "-genkeypair", "-alias", "server", "-keyalg", "RSA", "-keysize", "2048", "-validity", "3650"]
                + ["-dname", f"CN={HOST_NAME}", "-ext", f"SAN=dns:{HOST_NAME},ip:127.0.0.1"]
                + ["-keystore", str(keystore), "-keypass", password, *store]
            )
            self._keytool(
                [keytool, "-exportcert", "-alias", "server", "-keystore", str(keystore), "-file", str(cert), *store]
            )
            self._keytool(
                [keytool, "-importcert", "-alias", "server", "-file", str(cert), "-keystore", str(truststore), *store]
            )
            password_file.write_text(password)
        password = password_file.read_text()
        (server_conf / "ssl-server.xml").write_text(
            _site_xml(
                {
                    "ssl.server.keystore.location": str(keystore),
                    "ssl.server.keystore.password": password,
                    "ssl.server.keystore.keypassword": password,
                    "ssl.server.truststore.location": str(truststore),
                    "ssl.server.truststore.password": password,
                }
            )
        )
        (server_conf / "ssl-client.xml").write_text(
            _site_xml({"ssl.client.truststore.location": str(truststore), "ssl.client.truststore.password": password})
        )

    @staticmethod
    def _keytool(command: list[str]) -> None:
        done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            raise HadoopKerberosError(f"keytool failed ({' '.join(command[:2])}): {done.stderr.strip()}")
