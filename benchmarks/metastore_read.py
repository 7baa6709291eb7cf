"""11. A table's partitions read from the metastore: one JSON document against a py4j round trip per partition.

On a built estate (benchmark 8's, `--tables` x `--partitions`), each of the first `--read` tables is read both ways,
interleaved (who goes first alternates), in one Spark session against the estate's own metastore:
`catalog.list_partitions` (one metastore call, the partitions' values and locations as one JSON document: 7ce0ce1)
and the loop it replaced (py4j calls for each partition's values and location, reproduced here as `per_partition`).
Both must give the same partitions and locations. The observation job pays this read for every table each run.

    PYTHONPATH=. nice -n 15 .venv/bin/python -m benchmarks.metastore_read --tables 20 --partitions 17520 --read 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks import harness
from benchmarks.estate_data import DATABASE, EstateSpec, cached_estate
from lakekeeper_dagster.engine.hive.catalog import list_partitions, read_table
from lakekeeper_dagster.engine.hive.model import Unit
from spark_resources.py4j import external_catalog, jvm, scala_seq
from spark_resources.session import local_hive_conf, start_spark_session


def per_partition(spark, info) -> list[Unit]:
    """The read before 7ce0ce1: one metastore call, then py4j calls for each partition's values and location."""
    java = jvm(spark)
    hadoop_path = java.org.apache.hadoop.fs.Path
    partitions = external_catalog(spark).listPartitions(info.database, info.name, java.scala.Option.empty())
    result = []
    for partition in scala_seq(partitions):
        spec_map = partition.spec()
        spec = {column: str(spec_map.apply(column)) for column in info.partition_columns}
        result.append(Unit(spec=spec, location=str(hadoop_path(partition.location()).toString())))
    return sorted(result, key=lambda p: p.partition)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=20, help="the estate's tables")
    parser.add_argument("--partitions", type=int, default=17520, help="the estate's partitions per table")
    parser.add_argument("--read", type=int, default=3, help="tables read, each both ways")
    parser.add_argument("--data-dir", type=Path, default=harness.BENCH_HOME / "data", help="where estates are kept")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    spec = EstateSpec(args.tables, args.partitions)
    estate = cached_estate(args.data_dir, spec)
    if estate is None:
        raise SystemExit(f"no {spec.name} in {args.data_dir}: build it with benchmarks.estate --build-only")
    payload = {**harness.base_payload(args), "reads": []}
    metastore = estate.metastore()
    metastore.start()
    try:
        spark = start_spark_session(local_hive_conf(metastore.uri, metastore.warehouse_dir.as_uri()))
        try:
            contenders = [("json", list_partitions), ("per_partition", per_partition)]
            for number, name in enumerate(spec.table_names()[: args.read]):
                info = read_table(spark, DATABASE, name)
                units = {}
                for contender, read in contenders if number % 2 == 0 else contenders[::-1]:  # who goes first alternates
                    started = time.monotonic()
                    units[contender] = read(spark, info)
                    seconds = round(time.monotonic() - started, 2)
                    payload["reads"].append({"table": name, "contender": contender, "seconds": seconds})
                    harness.log(json.dumps(payload["reads"][-1]))
                assert units["json"] == units["per_partition"] and len(units["json"]) == args.partitions, name
        finally:
            spark.stop()
    finally:
        metastore.stop()
    rows = []
    for contender in ("json", "per_partition"):
        seconds = [r["seconds"] for r in payload["reads"] if r["contender"] == contender]
        rows.append([contender, len(seconds), statistics.median(seconds), min(seconds), max(seconds)])
    print(harness.table(rows, ["contender", "tables", "median (s)", "min (s)", "max (s)"]))
    print(f"written to {harness.write_result('metastore_read', payload, args.out)}")


if __name__ == "__main__":
    main()
