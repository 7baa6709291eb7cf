"""Real external Hive tables full of small files, and ways to look at them, for the engine's tests."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

import yaml

from lakekeeper_dagster.engine.hive.model import partition_clause, partition_name, quote_identifier, sql_string
from lakekeeper_dagster.engine.ops.options import CompactionOptions
from lakekeeper_dagster.engine.plan.thresholds import Thresholds

REPO = Path(__file__).resolve().parents[1]
MB = 1024 * 1024
OPTIONS = CompactionOptions(Thresholds(128 * MB, 10.0))  # the engine's defaults
DATES = [{"date": "2024-01-01"}, {"date": "2024-01-02"}]
# The `spark_submit` block of the tests' CLI and Dagster subprocesses, from the environment when set: the test
# cluster's (conftest.spark_cluster), else local mode.
CLI_CONFIG_ENV = "LAKEKEEPER_TEST_CLI_CONFIG"


# Spark writes each distinct set of test files once per process, into a scratch directory; later calls copy them. The
# same ids, row count, file count, format and codec always give the same files, so a copy under a new job id is what a
# second Spark job would have written (most tests write the same few hundred rows).
_written: dict[tuple, Path] = {}
_scratch: list[tempfile.TemporaryDirectory] = []
# Spark's output names: part-<task>-<job uuid>-c<file><extension>, each with its Hadoop checksum file (.<name>.crc).
_PART_NAME = re.compile(r"^(\.?part-\d+-)[0-9a-f-]{36}(-c\d+.*)$")


def write_files(spark, location: str, first_id: int, rows: int, files: int, fmt: str, codec: str | None = None):
    """Append `rows` rows (from id `first_id`) as `files` files of format `fmt` under `location`."""
    target = _local_dir(location)
    on_hdfs = location.startswith("hdfs://") and "%" not in location
    if target is None and not on_hdfs:
        _spark_write(spark, location, first_id, rows, files, fmt, codec)
        return
    key = (first_id, rows, files, fmt, codec)
    if key not in _written:
        if not _scratch:
            _scratch.append(tempfile.TemporaryDirectory(prefix="lk-test-files-"))
        source = Path(_scratch[0].name) / str(len(_written))
        _spark_write(spark, source.as_uri(), first_id, rows, files, fmt, codec)
        _written[key] = source
    job = str(uuid.uuid4())
    # checksums first and _SUCCESS last, each file complete under a hidden name, then renamed: a reader sees whole
    # files, as after a job's commit
    written = sorted(_written[key].iterdir(), key=lambda p: (not p.name.startswith("."), p.name == "_SUCCESS"))
    if on_hdfs:
        _copy_to_hadoop(spark, [p for p in written if not p.name.startswith(".")], location, job)
        return
    target.mkdir(parents=True, exist_ok=True)
    for path in written:
        name = _PART_NAME.sub(lambda m: m.group(1) + job + m.group(2), path.name)
        partial = target / f".{name}.copying"
        shutil.copyfile(path, partial)
        os.replace(partial, target / name)


def _copy_to_hadoop(spark, paths: list[Path], location: str, job: str) -> None:
    """The files Spark wrote once, copied into `location` through the Hadoop FileSystem API under the job's name (no
    checksum files: HDFS keeps its own), each renamed into place once whole."""
    hadoop_path = spark.sparkContext._jvm.org.apache.hadoop.fs.Path
    directory = hadoop_path(location)
    fs = directory.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    fs.mkdirs(directory)
    for path in paths:
        name = _PART_NAME.sub(lambda m: m.group(1) + job + m.group(2), path.name)
        partial, final = hadoop_path(directory, f".{name}.copying"), hadoop_path(directory, name)
        fs.copyFromLocalFile(False, True, hadoop_path(str(path)), partial)
        if name == "_SUCCESS":
            fs.delete(final, False)
        if not fs.rename(partial, final):
            raise RuntimeError(f"could not rename {partial} to {final}")


def _local_dir(location: str) -> Path | None:
    """The directory of a `file:` location written as plain text (no %-escapes: Hadoop keeps them literally), else
    None (Spark writes it)."""
    parsed = urllib.parse.urlparse(location)
    if parsed.scheme != "file" or parsed.netloc or "%" in parsed.path:
        return None
    return Path(parsed.path)


def _spark_write(spark, location: str, first_id: int, rows: int, files: int, fmt: str, codec: str | None):
    df = spark.range(first_id, first_id + rows, numPartitions=files).selectExpr(
        "id", "concat('v', cast(id AS string)) AS v", "cast(id % 7 AS int) AS n"
    )
    writer = df.write.mode("append").format(fmt)
    if codec:
        writer = writer.option("compression", codec)
    writer.save(location)


def make_table(
    spark,
    database: str,
    name: str,
    root: Path | str,
    fmt: str = "parquet",
    partitions: list[dict[str, str]] | None = None,
    files: int = 5,
    rows: int = 200,
    properties: dict[str, str] | None = None,
    codec: str | None = None,
    buckets: int = 0,
) -> str:
    """An external table at `root` (a local directory, or a location such as `hdfs://...`), partitioned by the keys
    of `partitions`' specs, `files` files per unit; declared bucketed by `id` into `buckets` buckets when asked (its
    files are not written as buckets)."""
    location = root if isinstance(root, str) else root.as_uri()
    qualified = f"{quote_identifier(database)}.{quote_identifier(name)}"
    specs = partitions or [{}]
    partitioned = ""
    if partitions:
        partitioned = "PARTITIONED BY (" + ", ".join(f"`{c}` STRING" for c in partitions[0]) + ")"
    clustered = f"CLUSTERED BY (id) INTO {buckets} BUCKETS" if buckets else ""
    props = ""
    if properties:
        props = "TBLPROPERTIES (" + ", ".join(f"{sql_string(k)}={sql_string(v)}" for k, v in properties.items()) + ")"
    spark.sql(
        f"CREATE EXTERNAL TABLE {qualified} (id BIGINT, v STRING, n INT) {partitioned} {clustered} "
        f"STORED AS {fmt.upper()} LOCATION {sql_string(location)} {props}"
    )
    for index, spec in enumerate(specs):
        target = f"{location}/{partition_name(spec)}" if spec else location
        write_files(spark, target, index * rows, rows, files, fmt, codec)
        if spec:
            spark.sql(f"ALTER TABLE {qualified} ADD {partition_clause(spec)}")
    return f"{database}.{name}"


def rows_of(spark, table: str) -> list[tuple]:
    """Every row of the table, sorted: the content check that does not rely on the engine's checksum."""
    spark.catalog.refreshTable(table)
    return sorted(tuple(r) for r in spark.table(table).collect())


def data_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.is_file() and not p.name.startswith(("_", ".")))


def hidden_dirs(root: Path) -> list[str]:
    """lakekeeper's hidden staging/old/rolled-back directories anywhere under `root`."""
    return sorted(str(p.relative_to(root)) for p in root.rglob(".lk-*") if p.is_dir())


def cli_spark_submit() -> dict:
    """The `spark_submit` block of a subprocess's config: on the test cluster in a `--spark-cluster` run, else
    local[1]."""
    return yaml.safe_load(os.environ.get(CLI_CONFIG_ENV, "spark_submit:\n  master: local[1]\n"))["spark_submit"]


def run_cli(
    args: list[str],
    cwd: Path,
    metastore_uri: str,
    env_extra: dict | None = None,
    wait: bool = True,
    config: dict | None = None,
):
    """The `lakekeeper-dagster` command in a subprocess (its own Spark JVM, on the test cluster in a `--spark-cluster`
    run) against the test metastore; `config` adds keys to its config file."""
    (cwd / "lakekeeper.yaml").write_text(yaml.safe_dump({"spark_submit": cli_spark_submit(), **(config or {})}))
    env = {**os.environ, "PYTHONPATH": str(REPO), "LAKEKEEPER_METASTORE_URI": metastore_uri, **(env_extra or {})}
    env.pop("LAKEKEEPER_CONFIG", None)
    command = [sys.executable, "-m", "lakekeeper_dagster.cli", *args]
    if not wait:
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # stdin as a script's (no terminal), so a command that asks on a terminal never waits for the test's.
    return subprocess.run(
        command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300
    )


def run_cli_in_process(spark, args: list[str], cwd: Path, config: dict | None = None):
    """The `lakekeeper-dagster` command run in this process (`cli.main`) on the test session, for a test of what
    the command does and prints, not of its process (a kill, a lease held by another process, the session it
    starts: those stay `run_cli`): its config file in `cwd`, as `run_cli` writes it, and the same result (exit
    code, stdout, stderr). The session settings the command applies are put back afterwards."""
    import contextlib
    import io

    from lakekeeper_dagster.cli import app as cli
    from lakekeeper_dagster.config import load_config

    (cwd / "lakekeeper.yaml").write_text(yaml.safe_dump({"spark_submit": cli_spark_submit(), **(config or {})}))
    previous, config_env = Path.cwd(), os.environ.pop("LAKEKEEPER_CONFIG", None)
    out, err = io.StringIO(), io.StringIO()
    os.chdir(cwd)
    touched = {key: spark.conf.get(key, None) for key in load_config(None).spark_conf()}
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(args)
            except SystemExit as stop:  # argparse's own usage errors
                code = stop.code
    finally:
        os.chdir(previous)
        if config_env is not None:
            os.environ["LAKEKEEPER_CONFIG"] = config_env
        for key, value in touched.items():  # the command's session settings must not leak into other tests
            if not spark.conf.isModifiable(key):
                continue
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
    return subprocess.CompletedProcess(["lakekeeper-dagster", *args], code, out.getvalue(), err.getvalue())


def new_cluster_apps(cluster, known: set[str], timeout: float = 60.0) -> list[tuple[str, str]]:
    """(name, state) of the applications the Master of `cluster` registered beyond `known` (its app ids before a
    run), once every one is over, or as they stand after `timeout` seconds: the Master learns that a driver went
    asynchronously."""
    deadline = time.monotonic() + timeout
    while True:
        new = [app for app_id, app in cluster.applications().items() if app_id not in known]
        if (new and all(state == "FINISHED" for _name, state in new)) or time.monotonic() > deadline:
            return new
        time.sleep(0.5)


class Pause(io.TextIOBase):
    """A `pause@<point>:<file>` fault for an in-process run, and a stand-in for stderr: `reached` is set when the run
    pauses at `point` (it says so on stderr); `release()` lets it go on. The file lives in `directory`."""

    def __init__(self, point: str, directory: Path):
        self.point = point
        self.release_file = directory / f"release-{point}-{uuid.uuid4().hex}"
        self.fault = f"pause@{point}:{self.release_file}"
        self.reached = threading.Event()

    def write(self, text: str) -> int:
        if f"pausing at {self.point} until" in text:
            self.reached.set()
        return len(text)

    def release(self) -> None:
        self.release_file.touch()


def set_back(*directories: Path, seconds: int = 3600) -> None:
    """Set the directories' modification time `seconds` back: as if last changed that long ago."""
    for directory in directories:
        then = time.time() - seconds
        os.utime(directory, (then, then))
