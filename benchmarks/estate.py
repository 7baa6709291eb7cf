"""8. The Dagster surface at an estate: N tables x P hourly partitions, on a SQLite and a Postgres instance side by
side: code-location load (code server; run worker), observation job (first run, run with nothing changed), events
written, file_count_sensor tick, instance size; with `--ui`, the asset catalog and a Partitions tab in chromium.

    PYTHONPATH=. nice -n 15 .venv/bin/python -m benchmarks.estate --tables 500 --partitions 100
    PYTHONPATH=. nice -n 15 .venv/bin/python -m benchmarks.estate --tables 5 --partitions 20   # quick
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks import harness
from benchmarks.estate_data import DATABASE, PARTITION_COLUMN, Estate, EstateSpec, build_estate, cached_estate
from benchmarks.estate_services import (
    Service,
    instance_bytes,
    launch_and_wait,
    location_jobs,
    start_code_server,
    start_webserver,
)
from benchmarks.ui_pages import page_times

REPO = harness.REPO
MODULE = "lakekeeper_dagster.definitions"
INSTANCE_TEMPLATE = REPO / "lakekeeper_dagster" / "dagster_instance.yaml"
BACKENDS = ("sqlite", "postgres")
CLEARED_ENV = ("LAKEKEEPER_METASTORE_URI", "LAKEKEEPER_CONFIG", "DAGSTER_HOME")
# The location's refresh from the metastore (it stores the managed tables as a new state version in the instance).
REFRESH = f"{Path(sys.executable).parent / 'dg'} utils refresh-defs-state"


def refresh_definitions_state(command: list[str], env: dict, log_file: Path) -> float | None:
    """The location's explicit refresh from the metastore before the code server starts (e.g. `dg utils
    refresh-defs-state`); seconds, or None when the mechanism has none (the code server's load reads the
    metastore itself)."""
    if not command:
        return None
    started = time.monotonic()
    with open(log_file, "ab") as out:
        done = subprocess.run(command, env=env, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"the refresh {shlex.join(command)} exited with {done.returncode}:\n{tail}")
    return round(time.monotonic() - started, 2)


def instance_yaml(postgres_url: str | None) -> str:
    """The project's instance settings, with runs launched at once (DefaultRunCoordinator: no daemon, no queue)
    and, for Postgres, its storage."""
    settings = yaml.safe_load(INSTANCE_TEMPLATE.read_text()) if INSTANCE_TEMPLATE.exists() else {}
    settings["run_coordinator"] = {"module": "dagster.core.run_coordinator", "class": "DefaultRunCoordinator"}
    settings["telemetry"] = {"enabled": False}
    if postgres_url:  # through psycopg2 (dagster-postgres's dependency), whatever SQLAlchemy's default driver
        url = postgres_url.replace("postgresql://", "postgresql+psycopg2://", 1)
        settings["storage"] = {"postgres": {"postgres_url": url}}
    return yaml.safe_dump(settings, sort_keys=False)


def location_config(metastore_uri: str, home: Path) -> str:
    return yaml.safe_dump(
        {
            "tables": {"databases": [DATABASE]},
            "metastore": {"uri": metastore_uri, "home": str(home / "lakekeeper")},
            "sensor": {"min_files": 2},
        },
        sort_keys=False,
    )


def measure_backend(backend: str, estate: Estate, metastore_uri: str, work: Path, args) -> dict:
    """One instance from nothing: refresh, code server, webserver, two observation runs, sensor ticks, sizes."""
    import dagster as dg

    from lakekeeper_dagster.surface.observations import OBSERVE_JOB

    home = work / backend
    home.mkdir(parents=True)
    postgres = None
    if backend == "postgres":
        from lakekeeper_dagster_tests.postgres import PostgresServer

        postgres = PostgresServer().start()
    url = postgres.url if postgres else None
    (home / "dagster.yaml").write_text(instance_yaml(url))
    (home / "lakekeeper.yaml").write_text(location_config(metastore_uri, home))
    env = {k: v for k, v in os.environ.items() if k not in CLEARED_ENV}
    env.update(
        DAGSTER_HOME=str(home),
        LAKEKEEPER_CONFIG=str(home / "lakekeeper.yaml"),
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    )
    figures: dict = {"backend": backend}
    services: list[Service] = []
    try:
        harness.log(f"[{backend}] refresh")
        figures["refresh_s"] = refresh_definitions_state(args.refresh_command, env, home / "refresh.log")
        harness.log(f"[{backend}] code server")
        code_server, grpc_port, figures["code_server_load_s"] = start_code_server(
            env, home, REPO, args.module, args.timeout
        )
        services.append(code_server)
        webserver, port = start_webserver(env, home, REPO, grpc_port, args.timeout)
        services.append(webserver)
        jobs = location_jobs(port)
        figures["location_jobs"] = len(jobs)
        if len(jobs) < estate.spec.tables:
            harness.log(f"[{backend}] WARNING: {len(jobs)} jobs for {estate.spec.tables} tables: no refresh step?")
        with dg.DagsterInstance.from_config(str(home)) as instance:
            for label in ("first", "unchanged"):
                harness.log(f"[{backend}] observation run ({label})")
                run = launch_and_wait(instance, port, code_server.process.pid, OBSERVE_JOB, args.timeout)
                run.update(instance_bytes(home, url))
                figures[f"observe_{label}"] = run
                harness.log(
                    f"[{backend}]   {run['status']}: worker load {run['run_worker_load_s']}s, execution "
                    f"{run['execution_s']}s, {run['events']} events "
                    f"({run['events_by_type'].get('ASSET_OBSERVATION', 0)} observations)"
                )
        harness.log(f"[{backend}] sensor ticks")
        figures["sensor"] = sensor_ticks(env, home, args)
        if args.ui:
            harness.log(f"[{backend}] the UI's pages in chromium")
            figures["ui"] = page_times(port, DATABASE, estate.spec.table_names(), PARTITION_COLUMN)
    finally:
        for service in reversed(services):
            service.stop()
        if postgres:
            figures.update(instance_bytes(home, url))
            postgres.stop()
    if not postgres:
        figures.update(instance_bytes(home, None))
    return figures


def sensor_ticks(env: dict, home: Path, args) -> dict:
    """file_count_sensor evaluated in a process of its own on the loaded definitions (benchmarks/estate_probe.py)."""
    command = [sys.executable, "-m", "benchmarks.estate_probe", "--module", args.module, "--ticks", str(args.ticks)]
    with open(home / "probe.log", "ab") as err:
        done = subprocess.run(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=err, check=False)
    if done.returncode != 0:
        tail = "\n".join((home / "probe.log").read_text(errors="replace").splitlines()[-20:])
        raise RuntimeError(f"the sensor probe exited with {done.returncode}:\n{tail}")
    return json.loads(done.stdout.decode().strip().splitlines()[-1])


RUN_ROWS = [
    ("run worker load (s)", "run_worker_load_s"),
    ("launch to worker process (s)", "launch_to_worker_process_s"),
    ("execution (s)", "execution_s"),
    ("start to the first table recorded (s)", "start_to_listed_s"),
    ("  units read from the metastore", "units"),
    ("  directories listed", "listed"),
    ("  tables read in full", "tables_read_in_full"),
    ("  metastore read and directory times, all tables, beside the listing (s)", "metastore_read_s"),
    ("  partition sync, all tables (s)", "partition_sync_s"),
    ("  modification times and listing (s)", "listing_s"),
    ("events", "events"),
    ("observations", ("events_by_type", "ASSET_OBSERVATION")),
    ("of which without partition", ("events_by_type", "ASSET_OBSERVATION without partition")),
    ("worker peak RSS (MiB)", "worker_python_peak_rss_mib"),
    ("worker JVM peak RSS (MiB)", "worker_jvm_peak_rss_mib"),
    ("instance after it (bytes)", "instance_bytes"),
]
ROWS = [
    ("refresh from the metastore (s)", "refresh_s"),
    ("code server load (s)", "code_server_load_s"),
    ("jobs in the location", "location_jobs"),
    *[(f"observe {run}: {label}", (f"observe_{run}", *([key] if isinstance(key, str) else key)))
      for run in ("first", "unchanged") for label, key in RUN_ROWS],
    ("sensor: load in its process (s)", ("sensor", "probe_load_s")),
    ("sensor ticks (s)", ("sensor", "ticks", "seconds")),
    ("sensor run requests", ("sensor", "ticks", "run_requests")),
    ("instance at the end (bytes)", "instance_bytes"),
    ("UI: asset catalog, first table shown (s)", ("ui", "catalog", "shown_s")),
    ("UI: asset catalog, network idle (s)", ("ui", "catalog", "idle_s")),
    ("UI: Partitions tab, a partition shown (s)", ("ui", "partitions_tab", "shown_s")),
    ("UI: Partitions tab, network idle (s)", ("ui", "partitions_tab", "idle_s")),
]  # fmt: skip


def cell(figures: dict, path: str | tuple) -> str:
    """The figure at `path` (a list of ticks gives each tick's value), "-" when it was not measured."""
    value = figures
    for key in [path] if isinstance(path, str) else path:
        if isinstance(value, list):
            return " ".join(str(item.get(key)) for item in value)
        if not isinstance(value, dict) or key not in value:
            return "-"
        value = value[key]
    return f"{value:,}" if isinstance(value, int) else str(value)


def printed(results: list[dict]) -> str:
    rows = [[label, *(cell(result, path) for result in results)] for label, path in ROWS]
    return harness.table(rows, ["", *[r["backend"] for r in results]])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=100, help="hourly partitions per table")
    parser.add_argument("--files", type=int, default=1, help="tiny files per partition (all the same file)")
    parser.add_argument("--backend", action="append", choices=BACKENDS, help="repeatable (default: both)")
    parser.add_argument("--ticks", type=int, default=3, help="sensor evaluations (the cursor carried between them)")
    parser.add_argument(
        "--refresh-command",
        type=shlex.split,
        default=shlex.split(REFRESH),
        help="the location's refresh from the metastore, run before the code server starts (default: "
        "'dg utils refresh-defs-state'; '' for none)",
    )
    parser.add_argument("--module", default=MODULE, help="the code location's module")
    parser.add_argument("--build-only", action="store_true", help="build (or find) the estate and stop")
    parser.add_argument("--ui", action="store_true", help="time the asset catalog and a Partitions tab in chromium")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds for a load or a run at most")
    parser.add_argument("--data-dir", type=Path, default=harness.BENCH_HOME / "data", help="where estates are kept")
    parser.add_argument("--work-dir", type=Path, default=None, help="the instances (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=None, help="JSON result file (default: .bench/results/)")
    args = parser.parse_args(argv)
    backends = args.backend or list(BACKENDS)
    out = args.out or harness.BENCH_HOME / "results" / f"estate-{time.strftime('%Y%m%dT%H%M%S')}.json"

    spec = EstateSpec(args.tables, args.partitions, args.files)
    estate = cached_estate(args.data_dir, spec)
    if estate is None:
        harness.log(f"building {spec.name} in {args.data_dir}")
        estate = build_estate(args.data_dir, spec, harness.log)
        harness.log(f"built in {estate.figures['build_s']}s: {json.dumps(estate.figures)}")
    else:
        harness.log(f"reusing {estate.root} (built in {estate.figures['build_s']}s)")
    payload = {**harness.base_payload(args), "estate": estate.figures, "backends": []}
    if args.build_only:
        print(f"written to {harness.write_result('estate', payload, out)}")
        return

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="lk-estate-"))
    metastore = estate.metastore()
    metastore.start()
    try:
        for backend in backends:
            payload["backends"].append(measure_backend(backend, estate, metastore.uri, work, args))
            harness.write_result("estate", payload, out)  # what is measured so far survives a later failure
    finally:
        metastore.stop()
    if args.work_dir is None:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{spec.name}: {spec.tables} tables x {spec.partitions} partitions x {spec.files} file(s)")
    print(printed(payload["backends"]))
    print(f"written to {harness.write_result('estate', payload, out)}")


if __name__ == "__main__":
    main()
