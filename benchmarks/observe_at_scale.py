"""3. Observation at scale: the observation job over N partitions of tiny files (wall time, where it goes, driver
memory, observations written), run twice (the second with nothing changed: one summary, no partition), and
file_count_sensor's tick time after each run.

    PYTHONPATH=. nice -n 15 .venv/bin/python -m benchmarks.observe_at_scale --partitions 10000 --files 3
    PYTHONPATH=. nice -n 15 .venv/bin/python -m benchmarks.observe_at_scale --partitions 50000 --files 1 \
        --listing-only --listings 3
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path

import dagster as dg

from benchmarks import harness
from benchmarks.machine import describe
from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine.fs.listing import list_directories
from lakekeeper_dagster.engine.hive.catalog import read_table, table_units
from lakekeeper_dagster.engine.plan.thresholds import Thresholds
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.observations import OBSERVE_JOB
from lakekeeper_dagster.surface.sensors.file_count import SENSOR_NAME

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def make_table(spark, root: Path, partitions: int, files: int) -> None:
    """`bench.wide`: `partitions` partition directories of `files` tiny files each (never read, only listed)."""
    for p in range(partitions):
        directory = root / f"p={p:05d}"
        directory.mkdir(parents=True)
        for f in range(files):
            (directory / f"part-{f:05d}.parquet").write_bytes(b"x" * (100 + f))
    spark.sql("CREATE DATABASE bench")
    spark.sql(
        f"CREATE EXTERNAL TABLE bench.wide (id BIGINT) PARTITIONED BY (p STRING) STORED AS PARQUET "
        f"LOCATION 'file:{root}'"
    )
    spark.sql("MSCK REPAIR TABLE bench.wide")


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def jvm_used_mib(spark) -> float:
    runtime = spark._jvm.java.lang.Runtime.getRuntime()
    return (runtime.totalMemory() - runtime.freeMemory()) / 1024 / 1024


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--files", type=int, default=3, help="tiny files per partition")
    parser.add_argument("--ticks", type=int, default=3, help="sensor evaluations timed after each run (cursor kept)")
    parser.add_argument("--listings", type=int, default=1, help="times the Spark file listing is timed")
    parser.add_argument("--listing-only", action="store_true", help="time the listings, not the job and sensor")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="lk-observe-bench-") as tmp, harness.Bench(Path(tmp) / "bench") as bench:
        work, spark, metastore = Path(tmp), bench.spark, bench.metastore
        started = time.monotonic()
        make_table(spark, work / "wide", args.partitions, args.files)
        setup_seconds = time.monotonic() - started

        info = read_table(spark, "bench", "wide")
        started = time.monotonic()
        units = table_units(spark, info)
        metastore_seconds = time.monotonic() - started
        small_below = Thresholds(128 * 1024 * 1024, 10.0).min_file_bytes
        listing_seconds = []
        for _ in range(args.listings):  # the first one in the session also warms the JVM up
            started = time.monotonic()
            listing = list_directories(spark, [unit.location for unit in units], "observe bench.wide", small_below)
            listing_seconds.append(round(time.monotonic() - started, 2))
            assert sum(s.file_count for s in listing.stats.values()) == args.partitions * args.files
        figures = {
            "machine": describe(),
            "partitions": args.partitions,
            "files_per_partition": args.files,
            "setup_seconds": round(setup_seconds, 1),
            "metastore_partition_listing_seconds": round(metastore_seconds, 2),
            "spark_file_listing_seconds": listing_seconds,
        }
        if args.listing_only:
            print(json.dumps(figures, indent=2))
            print(f"written to {harness.write_result('observe_at_scale', figures, args.out)}")
            return

        config = parse_config(
            {"tables": {"databases": ["bench"]}, "metastore": {"uri": metastore.uri}, "sensor": {"min_files": 2}},
            "benchmark",
        )
        defs = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
        rss_before = peak_rss_mib()
        (work / "dagster_home").mkdir()
        with dg.DagsterInstance.from_config(str(work / "dagster_home")) as instance:
            runs, ticks, requested, cursor = [], [], [], None
            for _ in range(2):  # the first records every partition; the second finds nothing changed
                started = time.monotonic()
                result = defs.get_job_def(OBSERVE_JOB).execute_in_process(instance=instance, run_config=QUIET)
                seconds = time.monotonic() - started
                assert result.success
                written = sum(e.event_type == dg.DagsterEventType.ASSET_OBSERVATION for e in result.all_events)
                runs.append((seconds, written))
                rss_after = peak_rss_mib()
                jvm_after = jvm_used_mib(spark)
                timed = []
                for _ in range(args.ticks):  # the first tick reads what the run recorded, the others nothing new
                    started = time.monotonic()
                    context = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs)
                    tick = defs.get_sensor_def(SENSOR_NAME)(context)
                    timed.append(time.monotonic() - started)
                    cursor = tick.cursor
                    if not requested:
                        requested = [
                            len(op["config"]["partitions"])
                            for r in tick.run_requests
                            for op in r.run_config["ops"].values()
                        ]
                ticks.append(timed)
            assert runs[1][1] == 1, f"the unchanged run recorded {runs[1][1]} observations, not the summary only"

    figures |= {
        "observation_job_seconds": round(runs[0][0], 1),
        "observations_recorded": runs[0][1],
        "unchanged_observation_job_seconds": round(runs[1][0], 1),
        "unchanged_observations_recorded": runs[1][1],
        "driver_python_peak_rss_mib_before_job": round(rss_before, 1),
        "driver_python_peak_rss_mib_after_job": round(rss_after, 1),
        "driver_jvm_heap_used_mib_after_job": round(jvm_after, 1),
        "sensor_tick_seconds": [round(t, 2) for t in ticks[0]],
        "sensor_tick_seconds_median": round(statistics.median(ticks[0]), 2),
        "sensor_tick_seconds_after_unchanged_run": [round(t, 2) for t in ticks[1]],
        "runs_requested_first_tick": len(requested),
        "partitions_requested_first_tick": sum(requested),
    }
    print(json.dumps(figures, indent=2))
    print(f"written to {harness.write_result('observe_at_scale', figures, args.out)}")


if __name__ == "__main__":
    main()
