"""What every benchmark shares: a throwaway metastore, fresh data per run, contenders in their own processes,
an independent check of what each left behind, medians, and the JSON + printed table of the figures."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import cpu, machine
from benchmarks.datagen import PARTITION_COLUMN, SUMMARY_FILE, DataSpec, fresh_copy, generate, register
from benchmarks.hdfs_tables import HdfsPath, HdfsTables

REPO = Path(__file__).resolve().parents[1]
BENCH_HOME = REPO / ".bench"
LAKEKEEPER_VERSION = "0.0.6"
IN_PROCESS = ("ours", "ours-per-unit", "bare-each", "bare-onejob")
RUN_FILES = ("result.json", "stdout.log", "stderr.log", "lakekeeper.yaml")  # what `run` writes in the run's directory


def common_arguments(parser: argparse.ArgumentParser, datasets: list[str], runs: int) -> None:
    parser.add_argument(
        "--dataset",
        action="append",
        dest="datasets",
        metavar="PxFxR",
        help=f"partitions x small files per partition x rows in the table, repeatable (default: {' '.join(datasets)})",
    )
    parser.set_defaults(default_datasets=datasets)
    parser.add_argument("--runs", type=int, default=runs, help="repetitions per contender (median reported)")
    parser.add_argument("--block-size-mb", type=int, default=128)
    parser.add_argument("--ratio", type=float, default=10.0)
    location_arguments(parser)


def location_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the master data, the per-run copies and the JSON result go."""
    parser.add_argument("--data-dir", type=Path, default=BENCH_HOME / "data", help="master copies of the data")
    parser.add_argument("--work-dir", type=Path, default=None, help="per-run copies (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=None, help="JSON result file (default: .bench/results/)")


def parse_dataset(text: str) -> DataSpec:
    try:
        partitions, files, rows = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise SystemExit(f"--dataset {text!r}: expected PARTITIONSxFILESxROWS, e.g. 100x20x5000000") from None
    return DataSpec(partitions, files, rows)


def datasets_of(args: argparse.Namespace) -> list[DataSpec]:
    return [parse_dataset(d) for d in (args.datasets or args.default_datasets)]


@dataclass
class Bench:
    """A metastore on a free port (never 9083) and an admin Spark session that registers and inspects tables."""

    work_dir: Path
    block_size_mb: int = 128
    ratio: float = 10.0
    variants: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # label -> (contender, its arguments)
    on_hdfs: set[str] = field(default_factory=set)  # labels whose table copies are on the HDFS (`start_hdfs`)
    sources: dict[str, Path] = field(default_factory=dict)  # label -> the source tree its code runs from (`baseline`)
    hdfs: HdfsTables | None = None
    _fingerprints: dict = field(default_factory=dict)
    _counter: int = 0

    def __enter__(self) -> Bench:
        from spark_resources.metastore import MetastoreServer, free_port
        from spark_resources.session import local_hive_conf, start_spark_session

        self.work_dir.mkdir(parents=True, exist_ok=True)
        (BENCH_HOME / "results").mkdir(parents=True, exist_ok=True)
        self.metastore = MetastoreServer(home=self.work_dir / "metastore", uri=f"thrift://127.0.0.1:{free_port()}")
        self.metastore.start()
        self.warehouse = self.metastore.warehouse_dir.as_uri()
        self.spark = start_spark_session(local_hive_conf(self.metastore.uri, self.warehouse, app_name="bench-admin"))
        return self

    def __exit__(self, *exc) -> None:
        self.spark.stop()
        self.metastore.stop()
        if self.hdfs is not None:
            self.hdfs.stop()

    def start_hdfs(self) -> None:
        """A local HDFS in the work dir for the labels in `on_hdfs` (stopped and removed at the end); started by
        the first @hdfs run unless before."""
        if self.hdfs is None:
            self.hdfs = HdfsTables(self.work_dir / "hadoop")
            log(f"local HDFS for the @hdfs runs: {self.hdfs.start(self.spark)}")

    # ---- data ---------------------------------------------------------------------------------------------

    def prepare(self, spec: DataSpec, data_dir: Path) -> dict:
        started = time.perf_counter()
        summary = generate(spec, data_dir)
        log(
            f"data {spec.name}: {summary['data_files']} files, {summary['bytes'] / 1e6:.1f} MB "
            f"({time.perf_counter() - started:.1f}s to generate or find)"
        )
        return summary

    def new_table(self, spec: DataSpec, data_dir: Path, contender: str) -> tuple[str, Path | HdfsPath]:
        """A fresh copy of the data registered as a table: (table, its location), on the HDFS for `on_hdfs`."""
        self._counter += 1
        database = f"bench_{''.join(c if c.isalnum() else '_' for c in contender)}_{self._counter}"  # ours@cluster
        self.run_dir(database).mkdir(parents=True)
        if contender in self.on_hdfs:
            self.start_hdfs()
            location = self.hdfs.copy(data_dir / spec.name, f"runs/{database}/events", leave_out=SUMMARY_FILE)
        else:
            location = fresh_copy(spec, data_dir, self.run_dir(database) / "events")
        return register(self.spark, database, "events", spec, location), location

    def run_dir(self, table: str) -> Path:
        """The local directory of a run's logs and result (the table copy's parent on the local filesystem)."""
        return self.work_dir / "runs" / table.split(".", 1)[0]

    def drop(self, table: str, location: Path | HdfsPath) -> None:
        database = table.split(".", 1)[0]
        self.spark.sql(f"DROP DATABASE IF EXISTS `{database}` CASCADE")
        if isinstance(location, HdfsPath):
            location.parent.delete()
        shutil.rmtree(self.run_dir(table), ignore_errors=True)

    # ---- independent checks (our own reads, not the contender's figures) ----------------------------------

    def _fingerprint(self, df) -> dict:
        from lakekeeper_dagster.engine.rewrite.fingerprint import aggregates

        row = df.agg(*aggregates(df.schema)).first()
        return {"rows": int(row["rows"]), "checksum": str(row["checksum"])}

    def table_fingerprint(self, table: str) -> dict:
        self.spark.catalog.refreshTable(table)
        return self._fingerprint(self.spark.table(table))

    def before(self, spec: DataSpec, table: str) -> dict:
        if spec not in self._fingerprints:
            self._fingerprints[spec] = self.table_fingerprint(table)
        return self._fingerprints[spec]

    def metastore_locations(self, table: str) -> dict:
        database, name = table.split(".", 1)
        raw = json.loads(self.spark.sql(f"DESCRIBE TABLE EXTENDED {table} AS JSON").collect()[0][0])
        catalog = self.spark._jsparkSession.sessionState().catalog().externalCatalog()
        partitions = catalog.listPartitions(database, name, self.spark._jvm.scala.Option.empty())
        iterator = partitions.iterator()
        locations = {}
        while iterator.hasNext():
            partition = iterator.next()
            locations[str(partition.spec().get(PARTITION_COLUMN).get())] = str(partition.location().toString())
        return {"table": raw["location"], "partitions": locations}

    def inspect_in_place(self, spec: DataSpec, table: str, location: Path | HdfsPath, locations_before: dict) -> dict:
        """What an in-place contender left: files, extra entries, metastore locations, content, MSCK effect."""
        partition_dirs = set(spec.partition_dirs())
        entries = sorted(p.name for p in location.iterdir())
        per_partition = [
            len([f for f in (location / d).iterdir() if f.is_file() and not f.name.startswith(("_", "."))])
            for d in sorted(partition_dirs)
            if (location / d).is_dir()
        ]
        ours = {location.name, *RUN_FILES}  # a local copy's parent is also the run's own directory
        siblings = sorted(p.name for p in location.parent.iterdir() if p.name not in ours)
        after = self.table_fingerprint(table)
        locations_after = self.metastore_locations(table)
        check = {
            "files_after": sum(per_partition),
            "max_files_per_partition": max(per_partition, default=0),
            "partition_dirs_present": len(per_partition),
            "other_entries_in_table_dir": [e for e in entries if e not in partition_dirs][:8],
            "other_entries_count": len([e for e in entries if e not in partition_dirs]),
            "siblings_of_table_dir": siblings[:8],
            "rows_after": after["rows"],
            "checksum_after": after["checksum"],
            "table_location_unchanged": locations_after["table"] == locations_before["table"],
            "partition_locations_unchanged": locations_after["partitions"] == locations_before["partitions"],
        }
        # What a routine `MSCK REPAIR TABLE` (partition discovery) makes of the directory afterwards.
        self.spark.sql(f"MSCK REPAIR TABLE {table}")
        repaired = self.table_fingerprint(table)
        check["after_msck_repair"] = {
            "partitions": len(self.metastore_locations(table)["partitions"]),
            "rows": repaired["rows"],
        }
        return check

    def inspect_output(self, table: str, output: Path | HdfsPath) -> dict:
        """What a bare job wrote to its output directory."""
        columns = self.spark.table(table).columns
        data_schema = self.spark.table(table).drop(PARTITION_COLUMN).schema
        df = self.spark.read.schema(data_schema).option("basePath", output.as_uri()).parquet(output.as_uri())
        per_partition = [
            len([f for f in d.iterdir() if f.is_file() and not f.name.startswith(("_", "."))])
            for d in output.iterdir()
            if d.is_dir()
        ]
        after = self._fingerprint(df.select(*columns))
        return {
            "files_after": sum(per_partition),
            "max_files_per_partition": max(per_partition, default=0),
            "partition_dirs_present": len(per_partition),
            "rows_after": after["rows"],
            "checksum_after": after["checksum"],
        }

    # ---- contenders ---------------------------------------------------------------------------------------

    def baseline(self, revision: str) -> Path:
        """The project's source tree at `revision` (a git revision of this repository), exported into the work dir,
        for a contender run on earlier code side by side with this code (`sources`)."""
        tree = self.work_dir / f"source-{revision}"
        if not tree.exists():
            tree.mkdir(parents=True)
            archive = subprocess.run(["git", "-C", str(REPO), "archive", revision], check=True, capture_output=True)
            subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        return tree

    def run(self, contender: str, spec: DataSpec, data_dir: Path) -> dict:
        """One run of one contender on a fresh copy of the data; wall time of its whole process."""
        table, location = self.new_table(spec, data_dir, contender)
        before = self.before(spec, table)
        locations_before = self.metastore_locations(table)
        run_dir = self.run_dir(table)
        result_file = run_dir / "result.json"
        output = location.parent / "bare-output"  # on the table copy's filesystem
        kind, arguments = self.variants.get(contender, (contender, []))
        conf = self.hdfs.spark_conf() if self.hdfs and contender in self.on_hdfs else {}
        if kind in IN_PROCESS:
            command = [
                sys.executable, "-m", "benchmarks.contenders", kind, *arguments,
                *(f"--spark-conf={k}={v}" for k, v in conf.items()),
                "--metastore-uri", self.metastore.uri, "--warehouse", self.warehouse, "--table", table,
                "--block-size-mb", str(self.block_size_mb), "--ratio", str(self.ratio),
                "--output", output.as_uri(), "--result", str(result_file),
            ]  # fmt: skip
            env = {**os.environ, "PYTHONPATH": str(self.sources.get(contender, REPO))}
        elif kind == "lakekeeper":
            command, env = lakekeeper_command(self, table, run_dir, conf)
        else:
            raise ValueError(f"unknown contender {contender}")
        with open(run_dir / "stdout.log", "w") as out, open(run_dir / "stderr.log", "w") as err:
            code, wall, usage = cpu.run(command, env=env, stdout=out, stderr=err, cwd=run_dir)
        result = json.loads(result_file.read_text()) if result_file.exists() else {}
        result.update(contender=contender, wall_s=round(wall, 3), exit_code=code, rows_before=before["rows"], **usage)
        if code != 0:
            result["stderr_tail"] = (run_dir / "stderr.log").read_text(errors="replace").splitlines()[-5:]
        if kind == "lakekeeper":
            result["stdout_tail"] = (run_dir / "stdout.log").read_text(errors="replace").splitlines()[-12:]
        if kind.startswith("bare"):
            check = self.inspect_output(table, output) if output.exists() else {}
        else:
            check = self.inspect_in_place(spec, table, location, locations_before)
        check["content_preserved"] = (
            check.get("rows_after") == before["rows"] and check.get("checksum_after") == before["checksum"]
        )
        result["check"] = check
        log(
            f"  {contender:<12} wall {wall:7.2f}s  cpu {usage['cpu_s']:7.2f}s  exit {code}  files after "
            f"{check.get('files_after')}  rows {check.get('rows_after')}/{before['rows']}  "
            f"content {'ok' if check['content_preserved'] else 'CHANGED'}"
            + (
                f"  UNITS FAILED {result['units'].get('failed')}: {result['failures'][0][:300]}"
                if result.get("failures")
                else ""
            )
        )
        self.drop(table, location)
        with open(BENCH_HOME / "results" / "runs.jsonl", "a") as runs:  # every run, even of an interrupted benchmark
            runs.write(json.dumps({"data": spec.name, **result}) + "\n")
        return result


def lakekeeper_venv() -> Path:
    """Lakekeeper in its own virtualenv under .bench/ (created on first use), with the same pyspark as ours."""
    import pyspark

    venv = BENCH_HOME / "lakekeeper-venv"
    cli = venv / "bin" / "lakekeeper"
    if not cli.exists():
        log(f"installing lakekeeper=={LAKEKEEPER_VERSION} and pyspark=={pyspark.__version__} into {venv}")
        subprocess.run(["python3", "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", f"lakekeeper=={LAKEKEEPER_VERSION}",
             f"pyspark=={pyspark.__version__}"],
            check=True,
        )  # fmt: skip
    return venv


def lakekeeper_command(bench: Bench, table: str, run_dir: Path, extra_conf: dict[str, str]) -> tuple[list[str], dict]:
    """Lakekeeper's own CLI in local mode: its SparkSession takes master and conf from PYSPARK_SUBMIT_ARGS, set
    to exactly the Spark conf our runs use (same master, driver memory, shuffle partitions, metastore, and
    `extra_conf`: the HDFS client's for an @hdfs run; Lakekeeper reaches files through the Hadoop FileSystem API)."""
    from spark_resources.session import local_hive_conf

    venv = lakekeeper_venv()
    config = run_dir / "lakekeeper.yaml"
    config.write_text(
        f"block_size_mb: {bench.block_size_mb}\ncompaction_ratio_threshold: {bench.ratio}\nlog_level: INFO\n"
        "spark_submit:\n  enabled: false\n"
    )
    conf = local_hive_conf(bench.metastore.uri, bench.warehouse, app_name="bench-lk", extra_conf=extra_conf)
    master = conf.pop("spark.master")
    conf.pop("spark.sql.catalogImplementation", None)  # Lakekeeper enables Hive support itself
    submit = ["--master", master] + [x for k, v in conf.items() for x in ("--conf", f"{k}={v}")] + ["pyspark-shell"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(
        PYSPARK_SUBMIT_ARGS=" ".join(submit),
        PYSPARK_PYTHON=str(venv / "bin" / "python"),
        PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
    )
    command = [
        str(venv / "bin" / "lakekeeper"), "--config-file", str(config), "compact", "--table", table,
        "--block-size", str(bench.block_size_mb), "--ratio-threshold", str(bench.ratio),
    ]  # fmt: skip
    return command, env


# ---- figures ----------------------------------------------------------------------------------------------


def summarize(runs: list[dict]) -> dict:
    walls = [r["wall_s"] for r in runs]
    summary = {
        "runs": len(runs),
        "wall_median_s": round(statistics.median(walls), 2),
        "wall_min_s": round(min(walls), 2),
        "wall_max_s": round(max(walls), 2),
        "all_exit_0": all(r["exit_code"] == 0 for r in runs),
        "all_content_preserved": all(r["check"]["content_preserved"] for r in runs),
        "units_failed": sum((r.get("units") or {}).get("failed", 0) for r in runs),  # ours: a unit it gave up on
    }
    for key in ("session_start", "work"):
        values = [r[f"{key}_s"] for r in runs if f"{key}_s" in r]
        if values:
            summary[f"{key}_median_s"] = round(statistics.median(values), 2)
    steps = [r["steps_s"] for r in runs if "steps_s" in r]
    if steps:
        names = list(steps[0])
        summary["steps_median_s"] = {n: round(statistics.median(s.get(n, 0.0) for s in steps), 3) for n in names}
    trips = [r["py4j_round_trips"] for r in runs if "py4j_round_trips" in r]
    if trips:
        names = sorted({n for t in trips for n in t}, key=lambda n: -trips[0].get(n, 0))
        summary["py4j_round_trips_median"] = {n: statistics.median(t.get(n, 0) for t in trips) for n in names}
    return summary


def interleaved(contenders: list[str], runs: int, one_run) -> dict[str, list[dict]]:
    """Round-robin (A B C, A B C, ...) so a load spike on the shared machine does not hit one contender only."""
    results: dict[str, list[dict]] = {c: [] for c in contenders}
    for repetition in range(runs):
        log(f"repetition {repetition + 1}/{runs}")
        for contender in contenders:
            results[contender].append(one_run(contender))
    return results


def table(rows: list[list], headers: list[str]) -> str:
    cells = [headers] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_result(name: str, payload: dict, out: Path | None) -> Path:
    out = out or BENCH_HOME / "results" / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2, default=str))
    return out


def work_dir(arg: Path | None) -> Path:
    return arg or Path(tempfile.mkdtemp(prefix="lk-bench-"))


def log(message: str) -> None:
    print(message, flush=True)


def header(payload: dict) -> None:
    log(json.dumps({"machine": payload["machine"]}, indent=None))


def base_payload(args: argparse.Namespace) -> dict:
    return {
        "machine": machine.describe(),
        "parameters": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
