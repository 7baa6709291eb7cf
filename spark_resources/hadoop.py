"""A local Hadoop on this machine: Hadoop's own minicluster (a real NameNode and DataNodes and, when asked, a YARN
ResourceManager and NodeManagers, in one JVM), for tests, benchmarks and trials on the systems the users run.

Started like the local metastore: a process in a session of its own, its pid and ports in `hadoop.json` under a home
directory, free loopback ports, stopped only when it is the one this home started. `LocalHadoopCluster.java` (run by
`java` from source) starts Hadoop's `MiniDFSCluster` and `MiniYARNCluster`. Its jar,
`org.apache.hadoop:hadoop-client-minicluster`, comes from Maven once (into `jar_cache()`) with the few jars its YARN
half loads beside it (MAVEN_JARS), at the version of the Hadoop client pyspark ships (`HADOOP_VERSION`, checked
against pyspark's `hadoop-client-api` jar); the classes it shades against are pyspark's own jars.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from spark_resources import yarn
from spark_resources.errors import ResourceError
from spark_resources.hadoop_kerberos import HadoopKerberos
from spark_resources.maven import maven_jar
from spark_resources.metastore import _site_xml, free_port, java_executable, port_is_open, pyspark_jars_dir
from spark_resources.processes import stop_process

HADOOP_VERSION = "3.5.0"  # pyspark 4.3's Hadoop client (hadoop-client-api-3.5.0.jar)
MINICLUSTER = f"org.apache.hadoop:hadoop-client-minicluster:{HADOOP_VERSION}"
# What the minicluster jar leaves out and MiniYARNCluster loads: JUnit's assertions (its test directory helper) and
# Bouncy Castle (the ResourceManager's proxy CA), at the versions Hadoop 3.5.0 builds with.
MAVEN_JARS = [
    MINICLUSTER,
    "org.junit.jupiter:junit-jupiter-api:5.10.2",
    "org.opentest4j:opentest4j:1.3.0",
    "org.bouncycastle:bcprov-jdk18on:1.78.1",
    "org.bouncycastle:bcpkix-jdk18on:1.78.1",
    "org.bouncycastle:bcutil-jdk18on:1.78.1",
]
LAUNCHER = Path(__file__).with_name("LocalHadoopCluster.java")
HOST = "127.0.0.1"
TRASH_MINUTES = 1440  # the NameNode's fs.trash.interval: a day, as CDP and HDP ship it


class HadoopError(ResourceError):
    """The local HDFS could not be fetched, started, reached or stopped."""


def _check_client_version() -> None:
    client = pyspark_jars_dir() / f"hadoop-client-api-{HADOOP_VERSION}.jar"
    if not client.exists():
        found = sorted(p.name for p in pyspark_jars_dir().glob("hadoop-client-api-*.jar"))
        raise HadoopError(
            f"pyspark's Hadoop client is {', '.join(found) or 'missing'}, not {HADOOP_VERSION}: the local HDFS "
            f"(spark_resources/hadoop.py HADOOP_VERSION) must be the Hadoop of the installed pyspark. Reinstall "
            "the virtualenv (`make venv`) or change HADOOP_VERSION with pyspark's."
        )


def hadoop_jars() -> list[Path]:
    """The jars of MAVEN_JARS, each fetched with Maven on first use (`maven.maven_jar`)."""
    _check_client_version()
    return [maven_jar(artifact) for artifact in MAVEN_JARS]


@dataclass
class LocalHadoop:
    """An HDFS of `datanodes` DataNodes (ACLs on, a Trash of TRASH_MINUTES) whose files live under `home`, and with
    `nodemanagers` > 0 a YARN of that many NodeManagers (`yarn.py`).

    `home` holds `hadoop.json` (pid and ports), `hadoop.log`, the blocks and metadata (`data/`), YARN's directories
    (`yarn/`: containers' working directories and logs) and the client configuration (`conf/core-site.xml`,
    `conf/hdfs-site.xml`, with YARN `conf/yarn-site.xml`: a HADOOP_CONF_DIR). `key_provider_keys` names keys
    made before the NameNode starts in a local key store (`kms.jceks`), so that encryption zones can be made.
    `groups` gives users (by short name) their groups in the NameNode, whatever the operating system knows of them
    (Hadoop's static mapping), so that an ordinary user (HADOOP_USER_NAME) can belong to a group. `java_options` adds
    JVM flags. With `kerberos` the HDFS is a secure one (`hadoop_kerberos.py`): its clients log in with Kerberos.
    """

    home: Path
    datanodes: int = 1
    nodemanagers: int = 0
    key_provider_keys: list[str] = field(default_factory=list)
    groups: dict[str, list[str]] = field(default_factory=dict)
    heap: str = "768m"
    java_options: list[str] = field(default_factory=list)
    kerberos: HadoopKerberos | None = None

    def __post_init__(self) -> None:
        self.home = Path(self.home).absolute()

    @property
    def state_file(self) -> Path:
        return self.home / "hadoop.json"

    @property
    def log_file(self) -> Path:
        return self.home / "hadoop.log"

    @property
    def conf_dir(self) -> Path:
        return self.home / "conf"

    @property
    def key_provider(self) -> str:
        return f"jceks://file@{self.home / 'kms.jceks'}"

    def _state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def pid(self) -> int | None:
        """Pid of the minicluster started from this home, while it runs (not a recycled pid, not another home's)."""
        pid = self._state().get("pid")
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes() if pid else b""
        except OSError:
            return None
        ours = f"hdfs.minidfs.basedir={self.home / 'data'}".encode()
        return pid if LAUNCHER.name.encode() in command and ours in command else None

    def is_running(self) -> bool:
        return self.pid() is not None

    @property
    def uri(self) -> str:
        """hdfs://HOST:PORT of the running NameNode (a HadoopError when none runs from this home)."""
        if not self.is_running():
            raise HadoopError(f"no local HDFS runs from {self.home}; start it (`lakekeeper-dagster hadoop start`)")
        return f"hdfs://{HOST}:{self._state()['namenode_port']}"

    def client_conf(self) -> dict[str, str]:
        """The Hadoop client settings a process needs beside the NameNode's URI: as many replicas as DataNodes,
        no DataNode replacement in a write pipeline (there is none to replace it with), the key store."""
        conf = {
            "dfs.replication": str(self.datanodes),
            "dfs.client.block.write.replace-datanode-on-failure.enable": "false",
        }
        if self.key_provider_keys:
            conf["hadoop.security.key.provider.path"] = self.key_provider
        if self.kerberos:
            conf.update(self.kerberos.client_settings())
        return conf

    def spark_conf(self) -> dict[str, str]:
        """`client_conf` as Spark settings (`spark.hadoop.*`)."""
        return {f"spark.hadoop.{key}": value for key, value in self.client_conf().items()}

    @property
    def has_yarn(self) -> bool:
        """Whether the running minicluster has a ResourceManager (it was started with NodeManagers)."""
        return bool(self._state().get("yarn")) and self.is_running()

    def yarn_addresses(self) -> dict[str, str]:
        """The running ResourceManager's addresses (yarn-site.xml's settings)."""
        if not self.has_yarn:
            raise HadoopError(
                f"no local YARN runs from {self.home}; start it (`lakekeeper-dagster hadoop start --yarn`)"
            )
        return self._state()["yarn"]

    def yarn_spark_conf(self) -> dict[str, str]:
        """The Spark settings of an application on this YARN (`yarn.spark_conf`) beside `spark_conf`; Spark also
        needs HADOOP_CONF_DIR set to `conf_dir`."""
        self.yarn_addresses()
        principal = {f"spark.hadoop.{k}": v for k, v in self.kerberos.yarn_settings().items()} if self.kerberos else {}
        return {**self.spark_conf(), **principal, **yarn.spark_conf(self.uri)}

    def status(self) -> str:
        if not self.is_running():
            return f"stopped (home {self.home})"
        nodes = f"{self.datanodes} DataNode(s)"
        if self.has_yarn:
            address = self.yarn_addresses()["yarn.resourcemanager.address"]
            web = self.yarn_addresses()["yarn.resourcemanager.webapp.address"]
            nodes += f", YARN at {address} (web UI http://{web}), {self._state()['nodemanagers']} NodeManager(s)"
        return f"running at {self.uri} (pid {self.pid()}, {nodes}, home {self.home})"

    def java(self, *classpath_first: Path) -> list[str]:
        """`java` with the minicluster's classpath (after `classpath_first`): Hadoop's tools (`FsShell`,
        `KeyShell`) as the cluster runs them."""
        java = java_executable()
        log_conf = self.home / "log4j2.properties"  # warnings and errors only, to hadoop.log
        log_conf.write_text(
            "rootLogger.level = warn\nrootLogger.appenderRef.out.ref = out\nappender.out.type = Console\n"
            "appender.out.name = out\nappender.out.target = SYSTEM_ERR\nappender.out.layout.type = PatternLayout\n"
            "appender.out.layout.pattern = %d %p %c{1}: %m%n\n"
        )
        jars = [*classpath_first, *hadoop_jars(), pyspark_jars_dir() / "*"]
        classpath = os.pathsep.join(map(str, jars))
        temp = self.home / "tmp"  # the web servers' jetty directories, not in /tmp
        temp.mkdir(exist_ok=True)
        flags = [f"-Xmx{self.heap}", f"-Dlog4j2.configurationFile={log_conf.as_uri()}", f"-Djava.io.tmpdir={temp}"]
        flags.append(f"-Dtest.build.data={self.home / 'yarn'}")  # MiniYARNCluster's directories
        flags += self.java_options + (self.kerberos.java_options() if self.kerberos else [])
        return [java, *flags, "-cp", classpath]

    def _make_keys(self) -> None:
        """Create the key store's keys (the NameNode reads it when it starts)."""
        for key in self.key_provider_keys:
            command = [*self.java(), "org.apache.hadoop.crypto.key.KeyShell", "create", key]
            done = subprocess.run(
                [*command, "-provider", self.key_provider], capture_output=True, text=True, stdin=subprocess.DEVNULL
            )
            if done.returncode != 0:
                raise HadoopError(f"could not create key {key} in {self.key_provider}: {done.stderr.strip()}")

    def start(self, timeout: float = 180.0) -> str:
        """Start the NameNode and DataNodes, and the ResourceManager and NodeManagers with `nodemanagers` (a no-op
        when they run from this home); the NameNode's URI once every node has registered. The filesystem persists
        across restarts, on the same port while it is free (the metastore's locations name it); the first start
        formats it and makes the keys. A start with YARN stages Spark's jars on HDFS once
        (`yarn.spark_archive_path`)."""
        if self.is_running():
            if self.nodemanagers and not self.has_yarn:
                raise HadoopError(
                    f"the local Hadoop of {self.home} runs without YARN; stop it (`lakekeeper-dagster hadoop stop`) "
                    "and start it with YARN (`hadoop start --yarn`)"
                )
            return self.uri
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        ready = self.home / "ready.json"
        ready.unlink(missing_ok=True)
        fresh = not (self.home / "data").exists()
        if fresh:
            (self.home / "kms.jceks").unlink(missing_ok=True)
            self._make_keys()
        port = self._state().get("namenode_port")
        if not port or port_is_open(HOST, port):
            port = free_port()
        settings = {
            "hdfs.minidfs.basedir": str(self.home / "data"),
            "dfs.namenode.acls.enabled": "true",
            "fs.trash.interval": str(TRASH_MINUTES),
            "dfs.namenode.rpc-bind-host": HOST,
            "hadoop.security.key.provider.path": self.key_provider if self.key_provider_keys else "",
        }
        # The NameNode's groups come from a Configuration it makes itself (Hadoop's `Groups`, once per JVM), which
        # reads core-site.xml from the classpath, never the -D settings: the static mapping goes there.
        server_conf = self.home / "server-conf"
        server_conf.mkdir(exist_ok=True)
        mapping = "".join(f"{user}={','.join(groups)};" for user, groups in self.groups.items())
        core = {"hadoop.user.group.static.mapping.overrides": mapping} if mapping else {}
        if self.kerberos:  # UGI, and the NodeManager's localizer (its own Configuration), read core-site.xml too
            core.update(self.kerberos.client_settings())
            settings.update(self.kerberos.server_settings())
            self.kerberos.write_ssl_conf(server_conf)
        (server_conf / "core-site.xml").write_text(_site_xml(core))
        (server_conf / "capacity-scheduler.xml").write_text(yarn.capacity_scheduler_xml())
        command = [*self.java(server_conf), str(LAUNCHER), "--ready", str(ready), *(["--format"] if fresh else [])]
        command += ["--datanodes", str(self.datanodes), "--nodemanagers", str(self.nodemanagers)]
        command += ["--namenode-port", str(port)]
        if self.nodemanagers:
            command += ["--spark-jars", str(pyspark_jars_dir()), "--spark-archive", yarn.spark_archive_path()]
            settings.update(yarn.server_settings(self.home))
            settings.update(self.kerberos.yarn_settings() if self.kerberos else {})
        command += [arg for key, value in settings.items() if value for arg in ("-D", f"{key}={value}")]
        java_home = str(Path(java_executable()).resolve().parents[1])  # the containers' java ($JAVA_HOME)
        with open(self.log_file, "ab") as log:
            process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.home,
                env={**os.environ, "JAVA_HOME": java_home},
                start_new_session=True,
            )
        self.state_file.write_text(json.dumps({"pid": process.pid, "namenode_port": port}))
        deadline = time.monotonic() + timeout
        while not (ready.exists() and port_is_open(HOST, port)):
            if process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                if fresh:  # never formatted: the next start formats it again
                    shutil.rmtree(self.home / "data", ignore_errors=True)
                what = f"exited with code {process.returncode}" if process.poll() is not None else "did not start"
                raise HadoopError(
                    f"the local HDFS {what} (waited {timeout:.0f}s at most). Last lines of {self.log_file}:\n"
                    f"{self.log_tail()}"
                )
            time.sleep(0.3)
        yarn_addresses = yarn.client_settings(json.loads(ready.read_text()))
        state = {"pid": process.pid, "namenode_port": port, "yarn": yarn_addresses, "nodemanagers": self.nodemanagers}
        self.state_file.write_text(json.dumps(state))
        self._write_client_conf()
        return self.uri

    def _write_client_conf(self) -> None:
        """core-site.xml (the default filesystem), hdfs-site.xml and, with YARN, yarn-site.xml for a
        HADOOP_CONF_DIR."""
        core = {"fs.defaultFS": self.uri, **(self.kerberos.core_settings() if self.kerberos else {})}
        (self.conf_dir / "core-site.xml").write_text(_site_xml(core))
        (self.conf_dir / "hdfs-site.xml").write_text(_site_xml(self.client_conf()))
        yarn_site = self.conf_dir / "yarn-site.xml"
        yarn_site.unlink(missing_ok=True)
        if self.has_yarn:
            principal = self.kerberos.yarn_settings() if self.kerberos else {}
            yarn_site.write_text(_site_xml({**self.yarn_addresses(), **principal}))

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the minicluster this home started (its files stay for the next start), and any container its
        NodeManagers left running (they end theirs when stopped in order, not when killed); True when it was
        running."""
        pid = self.pid()
        if pid is not None:
            stop_process(pid, timeout)
        for container in yarn.container_pids(self.home / "yarn"):
            stop_process(container, 5.0)
        return pid is not None
