"""One contender's run in its own process (its own Spark JVM, as a user's run would be).

    python -m benchmarks.contenders ours|ours-per-unit|bare-each|bare-onejob --metastore-uri U --warehouse W \
        --table D.T --block-size-mb 128 --ratio 10 [--setting KEY=VALUE ...] [--spark-conf KEY=VALUE ...] \
        [--output DIR] --result result.json

- `ours`: `compact_table` of the engine, the full protocol, with the time of each step (benchmarks/steps.py), with
  the options a user's `lakekeeper.yaml` would give (`EngineSettings`); `--setting KEY=VALUE` (value in YAML/JSON
  syntax) sets one more of its keys, e.g. `byte_merge_min_row_group_mb=32`. A key this engine does not know is
  reported in the result (`settings_unknown`) and left out, so a benchmark runs on engines before and after it.
  A batch's partitions are written by one Spark job (`batching.write_mode: one_job`, the default).
- `ours-per-unit`: the same with `batching.write_mode: per_unit` (a Spark job per partition, 4 at once).
- `bare-each`: the floor, partition after partition in one session: read the partition's files with the table's
  schema, coalesce to the same target count, write them to `--output` (no backup, no verification, no swap).
- `bare-onejob`: the floor, every partition in one Spark job: one read of all partition directories, a shuffle
  that puts each (partition, bucket < target) on one task, one write partitioned by the partition column.

The result file holds the wall time of each phase measured inside the process; the caller measures the whole
process (Python and JVM start-up included).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import math
import os
import time
from collections import Counter
from pathlib import Path

import yaml

MIB = 1024 * 1024
PROFILE_VARIABLE = "LK_BENCH_PROFILE"  # set to a path prefix: each run's driver profile is written there


def start_session(metastore_uri: str, warehouse: str, app_name: str, conf: dict[str, str]):
    """The local-mode session of every contender; `conf` (e.g. `spark.master: spark://...`) applied last."""
    from spark_resources.session import local_hive_conf, start_spark_session

    return start_spark_session(local_hive_conf(metastore_uri, warehouse, app_name=app_name, extra_conf=conf))


def ours_options(database: str, table: str, block_size_mb: int, ratio: float, settings: dict) -> tuple:
    """(CompactionOptions as a user's settings give them, {key: value} of the settings this engine does not know)."""
    from lakekeeper_dagster.engine.settings import EngineSettings

    known = {k: v for k, v in settings.items() if k in EngineSettings.model_fields}
    engine = EngineSettings(block_size_mb=block_size_mb, compaction_ratio_threshold=ratio, **known)
    unknown = {k: v for k, v in settings.items() if k not in known}
    return engine.compaction_options(database, table, owner="benchmark"), unknown


def run_ours(
    spark, database: str, table: str, block_size_mb: int, ratio: float, _output: str | None, settings: dict
) -> dict:
    from benchmarks.steps import StepClock
    from lakekeeper_dagster.engine.ops.compaction import compact_table

    options, unknown = ours_options(database, table, block_size_mb, ratio, settings)
    clock = StepClock()
    clock.install()
    started = time.perf_counter()
    results = compact_table(spark, database, table, options)
    work = time.perf_counter() - started
    statuses = Counter(r.status for r in results)
    compacted = [r for r in results if r.status == "compacted"]
    return {
        "work_s": round(work, 3),
        "steps_s": clock.report(work),
        "step_calls": dict(clock.calls),
        "py4j_round_trips": dict(sorted(clock.round_trips.items(), key=lambda kv: -kv[1])),
        "py4j_sites": dict(sorted((clock.sites or {}).items(), key=lambda kv: -kv[1])[:60]),
        "units": dict(statuses),
        "files_before": sum(r.files_before for r in results),
        "files_after": sum(r.files_after for r in results),
        "bytes_before": sum(r.bytes_before for r in results),
        "bytes_after": sum(r.bytes_after for r in results),
        "settings": settings,
        "settings_unknown": unknown,
        "rows_verified": sum(r.rows_before or 0 for r in compacted),
        "all_verified": all(r.row_count_preserved and r.checksum_matches for r in compacted),
        "failures": [r.reason for r in results if r.status == "failed"][:3],
    }


def _plan(spark, database: str, table: str, block_size_mb: int):
    """(table schema without partition columns, partition column, [(dir name, location, target files)])."""
    from lakekeeper_dagster.engine.fs.storage import Storage

    info_table = spark.table(f"`{database}`.`{table}`")
    partition_columns = [
        c.name
        for c in spark.catalog.listColumns(table, database)
        if c.isPartition  # type: ignore[attr-defined]
    ]
    schema = info_table.drop(*partition_columns).schema
    location = spark.sql(f"DESCRIBE TABLE EXTENDED `{database}`.`{table}` AS JSON").collect()[0][0]
    location = json.loads(location)["location"]
    storage = Storage(spark)
    units = []
    for name in storage.list_names(location, directories=True):
        if name.startswith((".", "_")):
            continue
        files = storage.list_data_files(f"{location}/{name}")
        units.append(
            (name, f"{location}/{name}", max(1, math.ceil(sum(f.size for f in files) / (block_size_mb * MIB))))
        )
    return schema, partition_columns, units


def run_bare_each(spark, database: str, table: str, block_size_mb: int, _ratio: float, output: str, _s: dict) -> dict:
    started = time.perf_counter()
    schema, _columns, units = _plan(spark, database, table, block_size_mb)
    planned = time.perf_counter()
    for name, location, target in units:
        spark.read.schema(schema).parquet(location).coalesce(target).write.mode("errorifexists").option(
            "compression", "snappy"
        ).parquet(f"{output}/{name}")
    work = time.perf_counter() - started
    return {
        "work_s": round(work, 3),
        "steps_s": {"listing": round(planned - started, 3), "read+write": round(work - (planned - started), 3)},
        "units": {"written": len(units)},
    }


def run_bare_onejob(
    spark, database: str, table: str, block_size_mb: int, _ratio: float, output: str, _settings: dict
) -> dict:
    from pyspark.sql import functions as F

    started = time.perf_counter()
    schema, columns, units = _plan(spark, database, table, block_size_mb)
    (column,) = columns
    planned = time.perf_counter()
    targets = {name.split("=", 1)[1]: target for name, _location, target in units}
    base = spark.sql(f"DESCRIBE TABLE EXTENDED `{database}`.`{table}` AS JSON").collect()[0][0]
    df = spark.read.schema(schema).option("basePath", json.loads(base)["location"]).parquet(*(u[1] for u in units))
    df = df.withColumn(column, F.col(column).cast("string"))
    if max(targets.values()) == 1:
        bucket = F.lit(0)
    else:
        target = F.lit(1)
        for value, count in targets.items():
            target = F.when(F.col(column) == value, F.lit(count)).otherwise(target)
        bucket = F.pmod(F.xxhash64(*[F.col(f.name) for f in schema.fields]), target)
    tasks = max(int(spark.conf.get("spark.sql.shuffle.partitions")), 1)
    df = df.repartition(tasks, F.col(column), bucket)
    df.write.mode("errorifexists").option("compression", "snappy").partitionBy(column).parquet(output)
    work = time.perf_counter() - started
    return {
        "work_s": round(work, 3),
        "steps_s": {"listing": round(planned - started, 3), "read+shuffle+write": round(work - (planned - started), 3)},
        "units": {"written": len(units)},
    }


def run_ours_per_unit(
    spark, database: str, table: str, block_size_mb: int, ratio: float, output: str | None, settings: dict
) -> dict:
    per_unit = {**settings, "batching": {**settings.get("batching", {}), "write_mode": "per_unit"}}
    return run_ours(spark, database, table, block_size_mb, ratio, output, per_unit)


RUNNERS = {
    "ours": run_ours,
    "ours-per-unit": run_ours_per_unit,
    "bare-each": run_bare_each,
    "bare-onejob": run_bare_onejob,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("contender", choices=sorted(RUNNERS))
    parser.add_argument("--metastore-uri", required=True)
    parser.add_argument("--warehouse", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--block-size-mb", type=int, default=128)
    parser.add_argument("--ratio", type=float, default=10.0)
    parser.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE", help="an EngineSettings key")
    parser.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                        help="Spark conf over local mode's, e.g. spark.master=spark://127.0.0.1:7077")  # fmt: skip
    parser.add_argument("--output")
    parser.add_argument("--result", required=True)
    args = parser.parse_args(argv)
    settings = {k: yaml.safe_load(v) for k, _, v in (s.partition("=") for s in args.setting)}
    conf = {k: v for k, _, v in (c.partition("=") for c in args.spark_conf)}
    database, table = args.table.split(".", 1)
    started = time.perf_counter()
    spark = start_session(args.metastore_uri, args.warehouse, f"bench-{args.contender}", conf)
    session = time.perf_counter() - started
    runner = RUNNERS[args.contender]
    if profile := os.environ.get(PROFILE_VARIABLE):  # the driver's Python time by function, for `pstats`
        profiler = cProfile.Profile()
        result = profiler.runcall(runner, spark, database, table, args.block_size_mb, args.ratio, args.output, settings)
        profiler.dump_stats(f"{profile}-{args.contender}-{os.getpid()}.prof")
    else:
        result = runner(spark, database, table, args.block_size_mb, args.ratio, args.output, settings)
    stopping = time.perf_counter()
    spark.stop()
    result.update(
        contender=args.contender,
        session_start_s=round(session, 3),
        stop_s=round(time.perf_counter() - stopping, 3),
    )
    Path(args.result).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
