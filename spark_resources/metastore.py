"""A real Hive Metastore thrift server, run from pyspark's own jars (Derby-backed).

Several Spark processes can share it, unlike embedded Derby, which locks out the second process.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import struct
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse
from xml.sax.saxutils import escape

from spark_resources.errors import MetastoreError
from spark_resources.processes import stop_process

METASTORE_CLASS = "org.apache.hadoop.hive.metastore.HiveMetaStore"
DEFAULT_URI = "thrift://127.0.0.1:9083"
_RESERVED_BELOW = 10000  # free_port leaves well-known and registered services' ports alone


def pyspark_jars_dir() -> Path:
    """Directory holding the jars shipped with pyspark (Hive metastore and Derby included)."""
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def java_executable() -> str:
    """Path of the `java` to run the server with, from JAVA_HOME or PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise MetastoreError(
            "Java was not found (no JAVA_HOME, no `java` on PATH). Install a Java 17 runtime "
            "(e.g. `apt-get install openjdk-17-jre-headless`) or set JAVA_HOME."
        )
    return found


def parse_thrift_uri(uri: str) -> tuple[str, int]:
    """Split `thrift://host:port` into host and port, with a clear error otherwise."""
    form = f"metastore URI {uri!r} is not of the form thrift://HOST:PORT (PORT a number from 1 to 65535)"
    try:
        parsed = urlparse(uri)
        port = parsed.port  # ValueError for a port that is not a number or out of range
    except ValueError:
        raise MetastoreError(f"{form}; set metastore.uri or LAKEKEEPER_METASTORE_URI to e.g. {DEFAULT_URI}") from None
    if parsed.scheme != "thrift" or not parsed.hostname or not port or uri != uri.strip():
        raise MetastoreError(f"{form}; set metastore.uri or LAKEKEEPER_METASTORE_URI to e.g. {DEFAULT_URI}")
    return parsed.hostname, port


def port_is_open(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now, below the kernel's ephemeral range when it can: a
    port the kernel hands out (to `bind(0)`, to an outgoing connection) may be taken by another process in the
    moment a server is restarted on it."""
    low = _ephemeral_low()
    candidates = random.SystemRandom().sample(range(_RESERVED_BELOW, low), min(32, max(0, low - _RESERVED_BELOW)))
    for port in candidates:
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.bind(("127.0.0.1", port))
            return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _thrift_string(value: str) -> bytes:
    data = value.encode()
    return struct.pack(">i", len(data)) + data


def _read_exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise MetastoreError("the metastore closed the connection mid-answer")
        buf += chunk
    return buf


def list_databases(host: str, port: int, timeout: float = 10.0) -> list[str]:
    """Ask the metastore for its databases with one real thrift call (`get_all_databases`).

    Speaks the plain binary protocol the unsecured server uses; proves the server answers, not only that
    its port is open.
    """
    message = struct.pack(">I", 0x80010001) + _thrift_string("get_all_databases") + struct.pack(">i", 1) + b"\x00"
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(message)
        (version,) = struct.unpack(">I", _read_exact(sock, 4))
        if version & 0xFFFF0000 != 0x80010000:
            raise MetastoreError(f"unexpected thrift answer from {host}:{port}")
        (name_len,) = struct.unpack(">i", _read_exact(sock, 4))
        _read_exact(sock, name_len + 4)  # method name, sequence id
        if version & 0xFF == 3:
            raise MetastoreError(f"the metastore at {host}:{port} answered with an exception")
        databases: list[str] = []
        while True:
            field_type = _read_exact(sock, 1)[0]
            if field_type == 0:
                return databases
            (field_id,) = struct.unpack(">h", _read_exact(sock, 2))
            if field_id == 0 and field_type == 15:
                _elem_type, count = struct.unpack(">bi", _read_exact(sock, 5))
                for _ in range(count):
                    (n,) = struct.unpack(">i", _read_exact(sock, 4))
                    databases.append(_read_exact(sock, n).decode())
            else:
                raise MetastoreError(f"the metastore at {host}:{port} answered get_all_databases with an error")


def _site_xml(properties: dict[str, str]) -> str:
    rows = "".join(
        f"  <property><name>{escape(k)}</name><value>{escape(v)}</value></property>\n" for k, v in properties.items()
    )
    return f'<?xml version="1.0"?>\n<configuration>\n{rows}</configuration>\n'


@dataclass
class MetastoreServer:
    """A Derby-backed Hive Metastore thrift server whose files live under `home`.

    `extra_hive_site` and `extra_core_site` add properties (e.g. SASL/Kerberos); `java_options` adds JVM flags.
    """

    home: Path
    uri: str = DEFAULT_URI
    extra_hive_site: dict[str, str] = field(default_factory=dict)
    extra_core_site: dict[str, str] = field(default_factory=dict)
    java_options: list[str] = field(default_factory=list)
    heap: str = "512m"
    plain_thrift: bool = True

    def __post_init__(self) -> None:
        self.home = Path(self.home).absolute()
        self.host, self.port = parse_thrift_uri(self.uri)

    @property
    def pid_file(self) -> Path:
        return self.home / "metastore.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "metastore.log"

    @property
    def conf_dir(self) -> Path:
        return self.home / "conf"

    @property
    def warehouse_dir(self) -> Path:
        return self.home / "warehouse"

    @property
    def derby_dir(self) -> Path:
        return self.home / "metastore_db"

    def pid(self) -> int | None:
        """Pid of the server started from this home, if it is still alive."""
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        cmdline = Path(f"/proc/{pid}/cmdline")
        if cmdline.exists() and METASTORE_CLASS.encode() not in cmdline.read_bytes():
            return None  # the pid was recycled by another program
        return pid

    def is_running(self) -> bool:
        return self.pid() is not None

    def status(self) -> str:
        """One line saying whether the server runs, its URI and pid."""
        pid = self.pid()
        if pid is None:
            return f"stopped ({self.uri}, home {self.home})"
        ready = "answering" if (not self.plain_thrift or self._answers()) else "not answering yet"
        return f"running at {self.uri} (pid {pid}, {ready}, home {self.home}, log {self.log_file})"

    def _answers(self) -> bool:
        try:
            list_databases(self.host, self.port, timeout=2)
            return True
        except (OSError, MetastoreError):
            return False

    def write_config(self) -> None:
        """Write hive-site.xml / core-site.xml for the server into `home/conf`."""
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        self.warehouse_dir.mkdir(parents=True, exist_ok=True)
        hive_site = {
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={self.derby_dir};create=true",
            "datanucleus.schema.autoCreateAll": "true",
            "hive.metastore.schema.verification": "false",
            "hive.metastore.warehouse.dir": self.warehouse_dir.as_uri(),
            "hive.async.log.enabled": "false",
            # BoneCP is not among pyspark's jars; without this a worker thread dies on dropDatabase.
            "datanucleus.connectionPoolingType": "None",
            **self.extra_hive_site,
        }
        (self.conf_dir / "hive-site.xml").write_text(_site_xml(hive_site))
        (self.conf_dir / "core-site.xml").write_text(_site_xml(self.extra_core_site))

    def start(self, timeout: float = 90.0) -> str:
        """Start the server (no-op when it already runs from this home); return its URI once it answers."""
        if self.is_running():
            self._wait_ready(timeout)
            return self.uri
        if port_is_open(self.host, self.port):
            raise MetastoreError(
                f"port {self.port} on {self.host} is already in use by another process, not by the metastore "
                f"of {self.home}. Stop that process or choose another port (metastore.uri in the config file "
                "or LAKEKEEPER_METASTORE_URI)."
            )
        java = java_executable()
        self.write_config()
        classpath = f"{self.conf_dir}{os.pathsep}{pyspark_jars_dir() / '*'}"
        command = [
            java,
            f"-Xmx{self.heap}",
            "-Dhive.async.log.enabled=false",
            f"-Dderby.system.home={self.home}",
            *self.java_options,
            "-cp",
            classpath,
            METASTORE_CLASS,
            "-p",
            str(self.port),
        ]
        with open(self.log_file, "ab") as log:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.home,
                start_new_session=True,
            )
        self.pid_file.write_text(str(process.pid))
        try:
            self._wait_ready(timeout, process)
        except MetastoreError:
            self.stop()
            raise
        return self.uri

    def _wait_ready(self, timeout: float, process: subprocess.Popen | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise MetastoreError(
                    f"the metastore server exited with code {process.returncode} while starting. "
                    f"Last lines of {self.log_file}:\n{self.log_tail()}"
                )
            if port_is_open(self.host, self.port) and (not self.plain_thrift or self._answers()):
                return
            time.sleep(0.3)
        raise MetastoreError(
            f"the metastore did not answer on {self.uri} within {timeout:.0f}s. "
            f"Last lines of {self.log_file}:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the server (SIGTERM, then SIGKILL after `timeout` seconds); True when one was running. Returns once
        the process is gone, so its port is free."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        stop_process(pid, timeout)
        self.pid_file.unlink(missing_ok=True)
        return True
