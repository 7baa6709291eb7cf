"""A throwaway PostgreSQL server (Debian `postgresql`) on a free loopback port in a temp directory, for a Dagster
instance backed by `dagster-postgres`. initdb and postgres refuse to run as root: as root the server runs as the
`postgres` system user (`runuser`), its directory in a fresh /tmp directory that user owns."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from spark_resources.metastore import free_port

DATABASE = "dagster"


def _bin_dir() -> Path:
    """The newest installed server's bin directory (`/usr/lib/postgresql/<major>/bin`)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parent.parent.name))
    if not found:
        raise RuntimeError("no PostgreSQL server found under /usr/lib/postgresql: install Debian's postgresql package")
    return Path(found[-1]).parent


class PostgresServer:
    """`start()` initialises a cluster, starts it on `port` (trust auth, no fsync) and creates `DATABASE`."""

    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.port = free_port()
        self.home = Path(tempfile.mkdtemp(prefix="lk-postgres-"))
        self.data = self.home / "data"
        self._as_root = os.geteuid() == 0

    @property
    def url(self) -> str:
        return self.url_of(DATABASE)

    def url_of(self, database: str) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/{database}"  # the driver dagster-postgres has

    def create_database(self, database: str) -> str:
        """A new empty database on this server (one Dagster instance each); returns its URL."""
        self._run("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", database)
        return self.url_of(database)

    def _run(self, *args: str) -> None:
        command = [str(self.bin / args[0]), *args[1:]]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")

    def start(self) -> PostgresServer:
        if self._as_root:
            shutil.chown(self.home, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        options = f"-h 127.0.0.1 -p {self.port} -k {self.home} -c fsync=off -c synchronous_commit=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.home / "server.log"), "-w", "start")
        self.create_database(DATABASE)
        return self

    def stop(self) -> None:
        if self.data.exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.home, ignore_errors=True)
