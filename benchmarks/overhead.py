"""Benchmark 1 — overhead against the floor: lakekeeper-dagster (full protocol: snapshot, write, verification of
count and content checksum, backup, re-list, swap, commit) against a bare Spark job that reads the same files,
coalesces to the same counts and writes them, partition after partition and in one job; ours runs with both
write modes (`ours`: one Spark job per partition, the default; `ours-one-job`: a batch's partitions in jobs of up
to 10).

    nice -n 15 .venv/bin/python -m benchmarks.overhead            # 100x20 (5M rows) and 3x200 (demo), 3 runs
    nice -n 15 .venv/bin/python -m benchmarks.overhead --dataset 10x20x500000 --runs 1   # quick
    nice -n 15 .venv/bin/python -m benchmarks.overhead --master local --master cluster   # local mode vs a cluster

`--master cluster` starts a Spark standalone cluster for the benchmark (`spark_resources/cluster.py`: a Master and
2 Workers of 1 core, executors of 1 GB: the same 2 cores as local mode's local[2]; the driver in the contender's
process, client mode) and stops it at the end; `--master spark://HOST:PORT` uses a running one. Each contender then
runs on each master, labelled `<contender>@<master>`, with local mode's settings otherwise. The CPU figures of a
run on a cluster are the driver's only (the contender's process and JVM; its executors run under the Workers), so
they are named `driver_cpu_s`, `driver_cpu_jvm_s`, ... in its results.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from benchmarks import harness

CONTENDERS = ["ours", "ours-one-job", "bare-each", "bare-onejob"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.common_arguments(parser, ["100x20x5000000", "3x200x300000"], runs=3)
    parser.add_argument("--contender", action="append", dest="contenders", choices=CONTENDERS,
                        help=f"repeatable (default: {' '.join(CONTENDERS)})")  # fmt: skip
    parser.add_argument("--master", action="append", dest="masters", metavar="MASTER",
                        help="where the contenders' Spark runs, repeatable (side by side): local (default), cluster "
                             "(a standalone cluster started for the benchmark) or spark://HOST:PORT")  # fmt: skip
    args = parser.parse_args(argv)
    contenders = args.contenders or CONTENDERS
    masters = args.masters or ["local"]
    payload = harness.base_payload(args)
    payload["masters"] = masters
    harness.header(payload)
    payload["datasets"] = []
    with (
        harness.Bench(harness.work_dir(args.work_dir), args.block_size_mb, args.ratio) as bench,
        contextlib.ExitStack() as clusters,
    ):
        labels = []
        for master in masters:
            arguments = [f"--spark-conf={k}={v}" for k, v in spark_conf_for(master, bench.work_dir, clusters).items()]
            for contender in contenders:
                label = contender + suffix_of(master)
                bench.variants[label] = (contender, arguments)
                labels.append(label)
        for spec in harness.datasets_of(args):
            data = bench.prepare(spec, args.data_dir)
            runs = harness.interleaved(
                labels, args.runs, lambda c, spec=spec: driver_side(c, bench.run(c, spec, args.data_dir))
            )
            summary = {c: harness.summarize(r) for c, r in runs.items()}
            ratios = ratios_of(summary, [suffix_of(m) for m in masters])
            payload["datasets"].append({"data": data, "summary": summary, "ratios": ratios, "runs": runs})
            print_dataset(data, summary, ratios)
    path = harness.write_result("overhead", payload, args.out)
    harness.log(f"\nresults: {path}")


def suffix_of(master: str) -> str:
    """The label suffix of the contenders run on `master`: none in local mode, else `@cluster` / `@spark://...`."""
    return "" if master == "local" else f"@{master}"


DRIVER_ONLY = ("cpu_s", "cpu_python_s", "cpu_jvm_s", "max_rss_mb")


def driver_side(label: str, result: dict) -> dict:
    """The run's figures, those of `cpu.run` renamed `driver_<name>` for a run on a cluster (`label` has an `@`):
    they measure the contender's process and its JVM, the driver; the executors run under the cluster's Workers."""
    if "@" not in label:
        return result
    return {f"driver_{key}" if key in DRIVER_ONLY else key: value for key, value in result.items()}


def spark_conf_for(master: str, work_dir: Path, clusters: contextlib.ExitStack) -> dict[str, str]:
    """The Spark conf (over local mode's) of the contenders run on `master`; `cluster` starts one, stopped by
    `clusters` at the end."""
    if master == "local":
        return {}
    if master != "cluster" and not master.startswith("spark://"):
        raise SystemExit(f"--master {master!r}: expected local, cluster or spark://HOST:PORT")
    harness.log(f"@{master} runs: the cpu figures are the driver's only (the executors' CPU is not measured)")
    if master == "cluster":
        from spark_resources.cluster import SparkCluster

        cluster = SparkCluster(home=work_dir / "spark-cluster", worker_memory="2g", executor_memory="1g")
        clusters.callback(cluster.stop)
        harness.log(f"Spark standalone cluster: {cluster.start()} ({cluster.workers} workers of 1 core)")
        return cluster.session_conf()
    return {"spark.master": master}


def ratios_of(summary: dict, suffixes: list[str]) -> dict:
    """Each engine contender's wall time over each bare one's, and one_job's over per_unit's, where both ran (on
    each master: `suffixes`); a contender's on a cluster over its own in local mode."""
    wall = {c: s["wall_median_s"] for c, s in summary.items()}
    pairs = []
    for s in suffixes:
        pairs += [(a + s, b + s) for a in ("ours", "ours-one-job") for b in ("bare-onejob", "bare-each")]
        pairs.append(("ours-one-job" + s, "ours" + s))
        pairs += [(c + s, c) for c in CONTENDERS if s]
    return {f"{a} / {b}": round(wall[a] / wall[b], 3) for a, b in pairs if a in wall and b in wall}


def print_dataset(data: dict, summary: dict, ratios: dict) -> None:
    harness.log(
        f"\n{data['partitions']} partitions x {data['files']} files, {data['rows']:,} rows, "
        f"{data['bytes'] / 1e6:.0f} MB"
    )
    rows = [
        [c, s["runs"], s["wall_median_s"], f"{s['wall_min_s']}-{s['wall_max_s']}", s.get("session_start_median_s"),
         s.get("work_median_s"), s["all_exit_0"], s["all_content_preserved"]]
        for c, s in summary.items()
    ]  # fmt: skip
    harness.log(
        harness.table(
            rows, ["contender", "runs", "wall median s", "range", "spark start s", "work s", "exit 0", "content ok"]
        )
    )
    for name, value in ratios.items():
        harness.log(f"{name}: {value}")
    for label in [c for c in summary if c.split("@")[0] == "ours"]:
        steps = summary[label].get("steps_median_s", {})
        if steps:
            figures = ", ".join(f"{k} {v}" for k, v in steps.items())
            harness.log(f"{label}, median seconds per protocol step: {figures}")


if __name__ == "__main__":
    main()
