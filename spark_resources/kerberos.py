"""Kerberos login for the Spark driver: keytab checks, a private credential cache, JVM login and relogin.

Two logins, on purpose:

- Before the JVM starts, MIT `kinit -k -t KEYTAB -c PRIVATE_CACHE PRINCIPAL` proves the keytab, the realm, the KDC
  and the clock in well under a second, with MIT's clear error texts, and fills a credential cache private to this
  run (`KRB5CCNAME` points there while the run lasts, so the user's default cache is never read or overwritten).
- After the session exists and before its first catalog call, `UserGroupInformation.loginUserFromKeytab` in the
  driver JVM. A ticket cache alone leaves Hadoop's UGI in "simple" mode; a keytab login also lets Hadoop (and Hive's
  metastore client) relogin by itself when the ticket nears its end, and `refresh` forces that check before every
  use of the session, so runs longer than the ticket lifetime go on. `spark.kerberos.principal` / `keytab` are set
  as well, so a `yarn` run renews its delegation tokens.

Only principal names are ever read out of a keytab or logged; keys and tickets are not.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spark_resources.errors import KerberosError
from spark_resources.py4j import hadoop_conf, java_messages, jvm

KRB5_CONF_PROPERTY = "java.security.krb5.conf"


def keytab_principals(keytab: str | Path) -> list[str]:
    """Principal names stored in an MIT keytab file (format 0x0502), in file order, without duplicates."""
    data = Path(keytab).read_bytes()
    if data[:2] != b"\x05\x02":
        raise ValueError("not a version 0x0502 keytab")
    names: list[str] = []
    pos = 2
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if size <= 0:  # a hole left by a removed entry
            pos += -size
            continue
        entry, pos = data[pos : pos + size], pos + size
        (count,) = struct.unpack_from(">H", entry, 0)
        offset = 2
        parts: list[str] = []
        for _ in range(count + 1):  # the realm, then the components
            (length,) = struct.unpack_from(">H", entry, offset)
            parts.append(entry[offset + 2 : offset + 2 + length].decode())
            offset += 2 + length
        name = "/".join(parts[1:]) + "@" + parts[0]
        if name not in names:
            names.append(name)
    return names


def check_keytab(principal: str, keytab: str) -> None:
    """Fail unless `keytab` is a readable keytab file holding keys of `principal`."""
    path = Path(keytab)
    if not path.exists():
        raise KerberosError(
            f"keytab {keytab} (spark_submit.keytab) does not exist. Copy the keytab of {principal} there, "
            "or point spark_submit.keytab (or the resource's `keytab`) at it."
        )
    if not path.is_file() or not os.access(path, os.R_OK):
        raise KerberosError(
            f"keytab {keytab} (spark_submit.keytab) is not a readable file for this user (uid {os.getuid()}). "
            f"Fix its owner and mode (e.g. `chmod 600 {keytab}` as its owner) so the Dagster run process can read it."
        )
    try:
        principals = keytab_principals(path)
    except (OSError, ValueError, struct.error, UnicodeDecodeError) as error:
        raise KerberosError(
            f"keytab {keytab} (spark_submit.keytab) is not a usable keytab file ({error}). Export it again, "
            f"e.g. `ktutil` or `kadmin -q 'ktadd -k {keytab} {principal}'`."
        ) from None
    if principal not in principals:
        found = ", ".join(principals) or "no principal"
        raise KerberosError(
            f"principal {principal} (spark_submit.principal) is not in keytab {keytab}, which holds: {found}. "
            "Set spark_submit.principal to one of those (realm included), or export a keytab for this principal."
        )


# (substring of a MIT or Java Kerberos error, message) — first match wins; {p}, {k}, {c}, {realm} are filled in.
_DIAGNOSES: list[tuple[tuple[str, ...], str]] = [
    (
        ("Cannot find KDC for realm", "Cannot locate KDC", "Cannot get kdc for realm"),
        "realm {realm} of principal {p} is not known to the Kerberos configuration {c}. Check the realm part of "
        "spark_submit.principal (it is case-sensitive) and that {c} has a [realms] entry with its KDC.",
    ),
    (
        ("Cannot contact any KDC", "Receive timed out", "Connection refused", "Network is unreachable"),
        "no KDC of realm {realm} answered (Kerberos configuration {c}). Check the KDC is up and reachable from "
        "this host (firewall, port 88), and the kdc entries of realm {realm} in {c}.",
    ),
    (
        ("Clock skew too great",),
        "clock skew too great between this host and the KDC of realm {realm} while logging in {p}. Synchronise "
        "this host's clock (NTP/chrony); Kerberos accepts 5 minutes of difference by default.",
    ),
    (
        ("not found in Kerberos database",),
        "the KDC of realm {realm} does not know principal {p} (spark_submit.principal). Check its spelling, or "
        "ask your Kerberos admin to create it.",
    ),
    (
        (
            "Preauthentication failed",
            "Password incorrect",
            "Integrity check on decrypted field failed",
            "Checksum failed",
            "Pre-authentication information was invalid",
        ),
        "the KDC rejected the key of {p} in keytab {k}: the keytab is out of date (the principal's key was "
        "changed since it was exported). Export a fresh keytab for {p}.",
    ),
    (
        ("Client's entry in database has expired", "Clients entry in database has expired"),
        "principal {p} has expired in the KDC of realm {realm}. Ask your Kerberos admin to extend it.",
    ),
    (
        ("Password has expired",),
        "the password (key) of principal {p} has expired in realm {realm}. Ask your Kerberos admin to renew it "
        "and export a fresh keytab.",
    ),
    (
        ("Keytab contains no suitable keys", "Unable to obtain password from user"),
        "keytab {k} holds no usable key of principal {p}. Export a keytab for {p} (spark_submit.principal must "
        "match an entry of `klist -k {k}` exactly).",
    ),
    (
        ("Ticket expired", "Failed to find any Kerberos tgt", "TGT has expired", "ticket is expired"),
        "the Kerberos ticket of {p} has expired and could not be renewed from keytab {k}. Check the keytab is "
        "still present and current, then run again.",
    ),
]


def diagnose(text: str, principal: str, keytab: str, krb5_conf: str | None) -> str | None:
    """The precise message for a Kerberos failure text (MIT or Java), or None when it is not a known one."""
    values = {
        "p": principal,
        "k": keytab,
        "c": krb5_conf or os.environ.get("KRB5_CONFIG") or "/etc/krb5.conf",
        "realm": principal.rpartition("@")[2] or "(default realm)",
    }
    for needles, message in _DIAGNOSES:
        if any(needle.lower() in text.lower() for needle in needles):
            return message.format(**values)
    return None


def java_error_text(error: BaseException) -> str:
    """The message of a (py4j-wrapped) Java exception with all its causes, one per line."""
    return "\n".join([str(error), *java_messages(error)])


def last_line(text: str) -> str:
    """The last non-empty line of a tool's output (at most 300 characters)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def krb5_conf_in_use(configured: str | None) -> tuple[str | None, str]:
    """The Kerberos configuration file kinit and the driver JVM both use, and where it was set: `configured`
    (spark_submit.krb5_conf), else $KRB5_CONFIG (as MIT tools read it), else None (both read /etc/krb5.conf)."""
    if configured:
        return configured, "spark_submit.krb5_conf"
    from_env = os.environ.get("KRB5_CONFIG")
    if not from_env:
        return None, "the system default"
    files = [name for name in from_env.split(":") if name]
    if len(files) != 1:  # MIT merges a list of files; the JVM reads exactly one
        raise KerberosError(
            f"KRB5_CONFIG lists {len(files)} files ({from_env}), but the Spark driver's JVM reads exactly one "
            "Kerberos configuration file. Set spark_submit.krb5_conf to one file holding the whole configuration "
            "(kinit then uses the same one). Nothing was done."
        )
    return files[0], "KRB5_CONFIG"


@dataclass
class KerberosLogin:
    """The Kerberos identity of one run: keytab checks, kinit into a private cache, JVM login, relogin.

    `krb5_conf` None means $KRB5_CONFIG when it is set (see `krb5_conf_in_use`): kinit and the JVM use one file.
    """

    principal: str
    keytab: str
    krb5_conf: str | None = None
    krb5_source: str = field(default="spark_submit.krb5_conf", init=False)
    cache_dir: Path | None = field(default=None, init=False)
    _saved_env: dict[str, str | None] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.krb5_conf, self.krb5_source = krb5_conf_in_use(self.krb5_conf)

    @property
    def krb5_conf_shown(self) -> str:
        """The Kerberos configuration file as messages name it, with where it was set."""
        return f"{self.krb5_conf or '/etc/krb5.conf'} ({self.krb5_source})"

    @property
    def ccache(self) -> str:
        """`FILE:` name of this run's private credential cache."""
        if self.cache_dir is None:
            raise KerberosError("the Kerberos login of this run has not been done yet (call KerberosLogin.login)")
        return f"FILE:{self.cache_dir / 'krb5cc'}"

    def spark_conf(self) -> dict[str, str]:
        """Spark conf for a Kerberized driver (`spark.hadoop.*` keys a cluster's site files may also set)."""
        conf = {
            "spark.kerberos.principal": self.principal,
            "spark.kerberos.keytab": self.keytab,
            "spark.hadoop.hadoop.security.authentication": "kerberos",
            "spark.hadoop.hive.metastore.sasl.enabled": "true",
        }
        if self.krb5_conf:  # the driver only: YARN executors authenticate with delegation tokens
            conf["spark.driver.extraJavaOptions"] = f"-D{KRB5_CONF_PROPERTY}={self.krb5_conf}"
        return conf

    def check_running_session(self, running: dict[str, str]) -> None:
        """Refuse a Spark session already running in this process without this login's settings: `getOrCreate`
        would return it, and its metastore client would not use Kerberos (or not as this principal)."""
        wanted = {k: v for k, v in self.spark_conf().items() if not k.endswith("extraJavaOptions")}
        differing = [f"{k}={running.get(k, '(not set)')}" for k, v in wanted.items() if running.get(k) != v]
        if differing:
            raise KerberosError(
                f"a Spark session without the Kerberos login of {self.principal} is already running in this process "
                f"({', '.join(differing)}): it would be reused, and its metastore client would not authenticate as "
                f"{self.principal}. Stop that session first, or start it through the same Kerberized "
                "HiveSparkResource (the code location reads the metastore through it). Nothing was done."
            )

    def _error(self, text: str, step: str) -> KerberosError:
        known = diagnose(text, self.principal, self.keytab, self.krb5_conf)
        if known:
            return KerberosError(f"Kerberos {step} failed: {known}")
        return KerberosError(
            f"Kerberos {step} of {self.principal} with keytab {self.keytab} failed: {last_line(text)}. "
            f"Try `kinit -k -t {self.keytab} {self.principal}` on this host to reproduce it."
        )

    def login(self) -> None:
        """Before the JVM starts: check the keytab, kinit into a private cache and point KRB5CCNAME at it."""
        check_keytab(self.principal, self.keytab)
        if self.krb5_conf and not os.access(self.krb5_conf, os.R_OK):
            raise KerberosError(
                f"the Kerberos configuration {self.krb5_conf_shown} does not exist or is not readable by this user "
                f"(uid {os.getuid()}). Point spark_submit.krb5_conf (or KRB5_CONFIG) at your realm's krb5.conf. "
                "Nothing was done."
            )
        kinit = shutil.which("kinit")
        if kinit is None:
            raise KerberosError(
                "`kinit` was not found on PATH; the Kerberos login of this run needs the MIT Kerberos client "
                "(Debian/Ubuntu: `apt-get install krb5-user`; RHEL: `dnf install krb5-workstation`)."
            )
        self.cache_dir = Path(tempfile.mkdtemp(prefix="lakekeeper-krb5-"))
        env = {**os.environ, "KRB5CCNAME": self.ccache}
        if self.krb5_conf:
            env["KRB5_CONFIG"] = self.krb5_conf
        try:
            result = subprocess.run(
                [kinit, "-k", "-t", self.keytab, "-c", self.ccache, self.principal],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
        except subprocess.TimeoutExpired:
            self.close()
            raise self._error("Cannot contact any KDC (kinit timed out)", "login") from None
        if result.returncode != 0:
            self.close()
            raise self._error(result.stderr + result.stdout, "login")
        self._set_env("KRB5CCNAME", self.ccache)
        if self.krb5_conf:
            self._set_env("KRB5_CONFIG", self.krb5_conf)

    def _set_env(self, name: str, value: str) -> None:
        self._saved_env.setdefault(name, os.environ.get(name))
        os.environ[name] = value

    def login_jvm(self, spark: Any) -> None:
        """Log the driver JVM in from the keytab; call after getOrCreate and before the first catalog call."""
        ugi = jvm(spark).org.apache.hadoop.security.UserGroupInformation
        try:
            self._point_jvm_at_krb5_conf(spark)
            ugi.setConfiguration(hadoop_conf(spark))
            ugi.loginUserFromKeytab(self.principal, self.keytab)
        except Exception as error:  # py4j wraps every Java exception
            raise self._error(java_error_text(error), "login of the Spark driver") from None

    def _point_jvm_at_krb5_conf(self, spark: Any) -> None:
        """Make the JVM read this login's krb5.conf. The driver option set at JVM start does it, but a JVM started
        earlier in this process (by a session since stopped) kept its own: then set the property and reload."""
        system = jvm(spark).java.lang.System
        if system.getProperty(KRB5_CONF_PROPERTY) != self.krb5_conf:
            if self.krb5_conf:
                system.setProperty(KRB5_CONF_PROPERTY, self.krb5_conf)
            else:
                system.clearProperty(KRB5_CONF_PROPERTY)
            jvm(spark).sun.security.krb5.Config.refresh()  # opened to py4j by Spark's --add-opens defaults

    def refresh(self, spark: Any) -> None:
        """Relogin from the keytab when the driver's ticket nears its end; fail precisely when that is impossible."""
        ugi = jvm(spark).org.apache.hadoop.security.UserGroupInformation
        try:
            ugi.getLoginUser().checkTGTAndReloginFromKeytab()
        except Exception as error:
            reason = diagnose(java_error_text(error), self.principal, self.keytab, self.krb5_conf)
            raise KerberosError(
                f"the Kerberos ticket of {self.principal} has expired (or is about to) and renewing it from keytab "
                f"{self.keytab} failed: {reason or last_line(java_error_text(error))} Nothing was changed by this run."
            ) from None

    def close(self) -> None:
        """Delete the private credential cache and restore the environment."""
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env.clear()
        if self.cache_dir is not None:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
            self.cache_dir = None


def login_for(principal: str | None, keytab: str | None, krb5_conf: str | None) -> KerberosLogin | None:
    """The Kerberos login of a run (the Dagster resource's and the CLI's): None with neither a principal nor a
    keytab (no Kerberos); half a pair is refused, since Spark would silently run without Kerberos."""
    if not principal and not keytab:
        return None
    if not principal or not keytab:
        given, missing = ("keytab", "principal") if keytab else ("principal", "keytab")
        raise KerberosError(
            f"a Kerberos {given} is set (spark_submit.{given}, or the Dagster resource's `{given}`) but no {missing}: "
            f"the run would go on without Kerberos. Set spark_submit.{missing} too (or the resource's `{missing}`, "
            f"e.g. an EnvVar), or remove the {given} on a cluster without Kerberos. Nothing was done."
        )
    return KerberosLogin(principal, keytab, krb5_conf)
