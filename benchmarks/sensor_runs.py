"""4. Many partitions through Dagster: N small-file partitions observed, requested by file_count_sensor, and run
as it requested (runs, Spark sessions, wall time per step).

    PYTHONPATH=. nice -n 15 .venv/bin/python -m benchmarks.sensor_runs --partitions 200 --files 10
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import dagster as dg

from benchmarks import harness
from benchmarks.machine import describe
from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.observations import OBSERVE_JOB
from lakekeeper_dagster.surface.sensors.file_count import SENSOR_NAME, execute_request

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def make_table(spark, root: Path, partitions: int, files: int, rows: int) -> None:
    """`bench.many`: `partitions` partitions of `files` small Parquet files, `rows` rows each partition."""
    spark.sql("CREATE DATABASE bench")
    spark.sql(
        "CREATE EXTERNAL TABLE bench.many (id BIGINT, v STRING) PARTITIONED BY (p STRING) STORED AS PARQUET "
        f"LOCATION 'file:{root}'"
    )
    (
        spark.range(0, partitions * rows, numPartitions=partitions * files)
        .selectExpr("id", "concat('v', id) AS v", f"lpad(cast(floor(id / {rows}) AS string), 5, '0') AS p")
        .write.partitionBy("p")
        .mode("append")
        .parquet(f"file:{root}")
    )
    spark.sql("MSCK REPAIR TABLE bench.many")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=200)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--rows", type=int, default=2000, help="rows per partition")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="lk-sensor-bench-") as tmp, harness.Bench(Path(tmp) / "bench") as bench:
        work, spark, metastore = Path(tmp), bench.spark, bench.metastore
        make_table(spark, work / "many", args.partitions, args.files, args.rows)
        rows_before = spark.table("bench.many").count()
        config = parse_config({"tables": {"databases": ["bench"]}, "metastore": {"uri": metastore.uri}}, "bench")
        defs = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
        (work / "dagster_home").mkdir()
        with dg.DagsterInstance.from_config(str(work / "dagster_home")) as instance:
            started = time.monotonic()
            defs.get_job_def(OBSERVE_JOB).execute_in_process(instance=instance, run_config=QUIET)
            observe_seconds = time.monotonic() - started
            started = time.monotonic()
            tick = defs.get_sensor_def(SENSOR_NAME)(dg.build_sensor_context(instance=instance, definitions=defs))
            tick_seconds = time.monotonic() - started
            contexts, runs = set(), []
            started = time.monotonic()
            for request in tick.run_requests:
                result = execute_request(defs, instance, request, QUIET)
                contexts.add(spark.sparkContext.applicationId)
                metadata = result.get_asset_materialization_events()[0].materialization.metadata
                runs.append({"success": result.success, "partitions_compacted": metadata["partitions_compacted"].value})
            runs_seconds = time.monotonic() - started
        spark.catalog.refreshTable("bench.many")
        rows_after = spark.table("bench.many").count()

    figures = {
        "machine": describe(),
        "partitions": args.partitions,
        "files_per_partition": args.files,
        "observation_job_seconds": round(observe_seconds, 1),
        "sensor_tick_seconds": round(tick_seconds, 2),
        "runs_requested": len(tick.run_requests),
        "runs": runs,
        "spark_sessions": len(contexts),
        "compaction_runs_seconds": round(runs_seconds, 1),
        "seconds_per_partition": round(runs_seconds / max(1, args.partitions), 3),
        "rows_before": rows_before,
        "rows_after": rows_after,
    }
    print(json.dumps(figures, indent=2))
    print(f"written to {harness.write_result('sensor_runs', figures, args.out)}")


if __name__ == "__main__":
    main()
