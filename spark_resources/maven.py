"""Jars from Maven Central, fetched once with `mvn dependency:copy` into a cache shared by every checkout."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from spark_resources.errors import ResourceError


class MavenError(ResourceError):
    """A jar could not be fetched from Maven."""


def jar_cache() -> Path:
    """Where jars from Maven are kept once fetched ($LAKEKEEPER_JAR_CACHE, else ~/.cache/lakekeeper-dagster)."""
    root = os.environ.get("LAKEKEEPER_JAR_CACHE") or Path.home() / ".cache" / "lakekeeper-dagster"
    return Path(root) / "jars"


def maven_jar(artifact: str) -> Path:
    """The jar of `artifact` (group:name:version), fetched on first use; a MavenError names what to do."""
    _, name, version = artifact.split(":")
    jar = jar_cache() / f"{name}-{version}.jar"
    if jar.exists():
        return jar
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError(
            f"Maven (`mvn`) is not on PATH: this needs {artifact} from Maven Central once. Install "
            f"Maven (Debian: `apt-get install maven`), or put {jar.name} in {jar.parent} yourself."
        )
    jar.parent.mkdir(parents=True, exist_ok=True)
    # One fetch at a time (two test workers may start a Hadoop at once), into a directory of its own, then renamed:
    # a jar that exists is whole.
    with open(jar.parent / ".fetch.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if jar.exists():
            return jar
        with tempfile.TemporaryDirectory(dir=jar.parent, prefix=".fetching-") as fetching:
            command = [mvn, "-q", "-B", "dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={fetching}"]
            done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            fetched = Path(fetching) / jar.name
            if done.returncode != 0 or not fetched.exists():
                tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
                raise MavenError(
                    f"Maven could not fetch {artifact} (exit {done.returncode}); check that Maven Central (or "
                    f"your mirror in ~/.m2/settings.xml) is reachable. Maven said:\n{tail}"
                )
            os.replace(fetched, jar)
    return jar
