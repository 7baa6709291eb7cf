"""12. What compaction bought: the time of a full scan of a table of hourly partitions before compaction, after it,
and after its partitions were merged into months.

    PYTHONPATH=. nice -n 5 .venv/bin/python -m benchmarks.scan_bought --partitions 17520 --files 6

One table of P hourly partitions `dt='YYYYMMDDHH'` (from 2024-01-01), each of F files (the estate's tiny 3-row file,
hard-linked: `estate_data.py`), is built in a work directory of its own. The fixed scan reads every row of both
columns (`count(*)`, `sum(id)`, `max(length(payload))`), each time after `REFRESH TABLE` and with Spark's caches
cleared, so it lists the table's directories and opens its files as a new query would; its time is the median of
`--scans`. Three stages, one process and one local Spark session (`local[2]`):
1. before: the table as built;
2. compacted: `compact_table` of the engine (the full protocol, verified) over every partition;
3. merged: `merge_table` into months (`%Y%m`, a merged table behind the union view `<table>_all`, which is scanned).

Each stage's rows and content checksum are checked against the table as built (our own read), and its files,
partitions and read tasks (`getNumPartitions` of the scan) are reported beside the scan's time. Nothing here asserts
a time; the figures go to stdout and `.bench/results/scan_bought-<time>.json`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.estate_data import DATABASE, PARTITION_COLUMN, EstateSpec, build_estate
from benchmarks.harness import BENCH_HOME

SCAN = "SELECT count(*) AS rows, sum(id) AS ids, max(length(payload)) AS widest FROM {table}"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def fingerprint(spark, table: str) -> dict:
    """Rows and the content checksum of `table` (or view), read by Spark after a refresh (our own read)."""
    from lakekeeper_dagster.engine.rewrite.fingerprint import aggregates

    spark.catalog.refreshTable(table)
    df = spark.table(table)
    row = df.agg(*aggregates(df.schema)).first()
    return {"rows": int(row["rows"]), "checksum": str(row["checksum"])}


def data_files(root: Path) -> int:
    """Data files a scan of `root` reads: hidden and `_` names left out, and what is under them (as Hive and Spark
    leave them: the compaction's backups, the merge's copies under way)."""
    hidden = (".", "_")
    return sum(
        1
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(hidden) for part in p.relative_to(root).parts)
    )


def scan(spark, table: str, refresh: list[str], scans: int) -> dict:
    """The fixed scan of `table`, `scans` times, each after refreshing `refresh` and clearing Spark's caches."""
    from spark_resources.py4j import job_description

    times, tasks, result = [], 0, None
    for _ in range(scans):
        spark.catalog.clearCache()
        for name in refresh:
            spark.catalog.refreshTable(name)
        started = time.perf_counter()
        with job_description(spark, f"benchmark: the fixed scan of {table}"):
            df = spark.sql(SCAN.format(table=table))
            result = df.first().asDict()
        times.append(time.perf_counter() - started)
        tasks = spark.table(table).rdd.getNumPartitions()
    return {
        "scan_median_s": round(statistics.median(times), 2),
        "scan_s": [round(t, 2) for t in times],
        "read_tasks": tasks,
        "result": result,
    }


def stage(name: str, spark, table: str, refresh: list[str], files: int, partitions: int, args, built: dict) -> dict:
    figures = {"stage": name, "files": files, "partitions": partitions, **scan(spark, table, refresh, args.scans)}
    figures["verified"] = fingerprint(spark, table) == built
    log(
        f"{name}: {files:,} files in {partitions:,} partitions, {figures['read_tasks']} read tasks, scan "
        f"{figures['scan_median_s']} s (median of {args.scans}), data "
        + ("verified" if figures["verified"] else "DIFFERS")
    )
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=17520, help="hourly partitions (17,520: two years)")
    parser.add_argument("--files", type=int, default=6, help="small files a partition (6: one every 10 minutes)")
    parser.add_argument("--scans", type=int, default=3, help="scans a stage (the median is reported)")
    parser.add_argument("--work-dir", type=Path, help="where the table is built (default: a temp dir, removed)")
    parser.add_argument("--out", type=Path, help="the JSON of the figures")
    args = parser.parse_args(argv)

    from lakekeeper_dagster.config import parse_config
    from lakekeeper_dagster.engine.ops.compaction import compact_table
    from lakekeeper_dagster.engine.ops.merge import merge_table
    from lakekeeper_dagster.engine.settings import EngineSettings
    from spark_resources.session import local_hive_conf, start_spark_session

    BENCH_HOME.mkdir(parents=True, exist_ok=True)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="scan-bought-", dir=BENCH_HOME))
    spec = EstateSpec(1, args.partitions, args.files)
    log(f"building one table of {args.partitions:,} hourly partitions x {args.files} files in {work}")
    estate = build_estate(work, spec, log)
    log(f"built in {estate.figures['build_s']} s")
    name = spec.table_names()[0]
    table, location = f"{DATABASE}.{name}", estate.root / "tables" / name
    metastore = estate.metastore()
    metastore.start()
    results: dict = {"partitions": args.partitions, "files_per_partition": args.files, "stages": []}
    conf = local_hive_conf(metastore.uri, metastore.warehouse_dir.as_uri(), app_name="bench-scan-bought")
    spark = None
    try:
        spark = start_spark_session(conf)
        built = fingerprint(spark, table)
        results["rows"] = built["rows"]
        stages = results["stages"]
        stages.append(stage("before", spark, table, [table], data_files(location), args.partitions, args, built))

        options = EngineSettings(compaction_ratio_threshold=1.5).compaction_options(DATABASE, name, owner="bench")
        started = time.perf_counter()
        units = compact_table(spark, DATABASE, name, options)
        results["compaction_s"] = round(time.perf_counter() - started, 1)
        statuses = sorted({str(u.status) for u in units})
        log(f"compacted in {results['compaction_s']} s: {len(units)} unit(s), statuses {statuses}")
        files = data_files(location)
        stages.append(stage("compacted", spark, table, [table], files, args.partitions, args, built))

        policies = {
            "partition_time": {PARTITION_COLUMN: "%Y%m%d%H"},
            "merge": {"into": "%Y%m", "older_than": "1d", "view": f"{name}_all", "settle_seconds": 0},
        }
        config = parse_config({"table_overrides": {table: policies}}, "scan_bought")
        started = time.perf_counter()
        outcome = merge_table(spark, DATABASE, name, config.policies_for(DATABASE, name), skip_trash=True)
        results["merge_s"] = round(time.perf_counter() - started, 1)
        log(f"merged in {results['merge_s']} s: {len(outcome.merged)} month(s), failed {outcome.failed or 'none'}")
        merged = f"{DATABASE}.{name}__merged"
        left = len(spark.sql(f"SHOW PARTITIONS {table}").collect())
        months = len(spark.sql(f"SHOW PARTITIONS {merged}").collect())
        files = data_files(location) + data_files(location.parent / f"{name}__merged")
        view = f"{DATABASE}.{name}_all"
        stages.append(stage("merged into months", spark, view, [table, merged], files, left + months, args, built))
    finally:
        if spark is not None:
            spark.stop()
        metastore.stop()
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)

    print()
    print(f"| {args.partitions:,} hourly partitions x {args.files} files, {results['rows']:,} rows | files | "
          "partitions | read tasks | full scan (median) | data |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for s in results["stages"]:
        print(
            f"| {s['stage']} | {s['files']:,} | {s['partitions']:,} | {s['read_tasks']:,} | {s['scan_median_s']} s | "
            f"{'verified' if s['verified'] else 'DIFFERS'} |"
        )
    print(f"\ncompaction {results['compaction_s']} s, merge {results['merge_s']} s")
    out = args.out or BENCH_HOME / "results" / f"scan_bought-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1, default=str))
    log(f"figures in {out}")


if __name__ == "__main__":
    main()
