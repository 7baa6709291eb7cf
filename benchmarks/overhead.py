"""Benchmark 1 — overhead against the floor: lakekeeper-dagster (full protocol: snapshot, write, verification of
count and content checksum, backup, re-list, swap, commit) against a bare Spark job that reads the same files,
coalesces to the same counts and writes them, partition after partition and in one job; ours runs with both
write modes (`ours`: a batch's partitions in one Spark job, the default; `ours-per-unit`: a Spark job per partition,
4 at once). `--baseline REVISION` also runs `ours` on that revision's code (`ours@REVISION`).

    nice -n 15 .venv/bin/python -m benchmarks.overhead            # 100x20 (5M rows) and 3x200 (demo), 3 runs
    nice -n 15 .venv/bin/python -m benchmarks.overhead --dataset 10x20x500000 --runs 1   # quick
    nice -n 15 .venv/bin/python -m benchmarks.overhead --master local --master cluster   # local mode vs a cluster
    nice -n 15 .venv/bin/python -m benchmarks.overhead --master local --master cluster --master yarn   # and YARN
    nice -n 15 .venv/bin/python -m benchmarks.overhead --filesystem local --filesystem hdfs   # local FS vs HDFS

`--master cluster` starts a Spark standalone cluster for the benchmark (`spark_resources/cluster.py`: a Master and
2 Workers of 1 core, executors of 1 GB: the same 2 cores as local mode's local[2]; the driver in the contender's
process, client mode) and stops it at the end; `--master spark://HOST:PORT` uses a running one. Each contender then
runs on each master, labelled `<contender>@<master>`, with local mode's settings otherwise. `--master yarn` starts
the local Hadoop with YARN (`spark_resources/hadoop.py`: a ResourceManager and 2 NodeManagers, Spark's jars staged on
its HDFS; 2 executors of 1 core and 1 GB, client mode; the tables stay on the local filesystem) and stops it at the
end. The CPU figures of a
run on a cluster are the driver's only (the contender's process and JVM; its executors run under the Workers), so
they are named `driver_cpu_s`, `driver_cpu_jvm_s`, ... in its results.

`--filesystem hdfs` puts the table copies (and the bare jobs' output) on a local HDFS started for the benchmark
(benchmarks/hdfs_tables.py: Hadoop's minicluster, a NameNode and a DataNode in one JVM on the same machine) and
stops it at the end; with `--filesystem local` too, each contender runs on both, interleaved, the HDFS runs
labelled `<contender>@hdfs` (after the master's suffix: `ours@cluster@hdfs`). The HDFS's JVM is not in any
contender's CPU figures.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from benchmarks import harness, hdfs_tables

CONTENDERS = ["ours", "ours-per-unit", "bare-each", "bare-onejob"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.common_arguments(parser, ["100x20x5000000", "3x200x300000"], runs=3)
    parser.add_argument("--contender", action="append", dest="contenders", choices=CONTENDERS,
                        help=f"repeatable (default: {' '.join(CONTENDERS)})")  # fmt: skip
    parser.add_argument("--master", action="append", dest="masters", metavar="MASTER",
                        help="where the contenders' Spark runs, repeatable (side by side): local (default), cluster "
                             "(a standalone cluster started for the benchmark), yarn (the local Hadoop's YARN, "
                             "started for it) or spark://HOST:PORT")  # fmt: skip
    parser.add_argument("--baseline", metavar="REVISION",
                        help="also run `ours` on the code of this git revision, labelled ours@REVISION (before and "
                             "after a change, side by side in one run)")  # fmt: skip
    hdfs_tables.filesystem_arguments(parser)
    args = parser.parse_args(argv)
    contenders = args.contenders or CONTENDERS
    masters = args.masters or ["local"]
    filesystems = hdfs_tables.filesystems_of(args)
    payload = harness.base_payload(args)
    payload.update(masters=masters, filesystems=filesystems)
    harness.header(payload)
    payload["datasets"] = []
    with (
        harness.Bench(harness.work_dir(args.work_dir), args.block_size_mb, args.ratio) as bench,
        contextlib.ExitStack() as clusters,
    ):
        if "hdfs" in filesystems:
            bench.start_hdfs()
        labels, on_cluster = [], set()
        for master in masters:
            arguments = [f"--spark-conf={k}={v}" for k, v in spark_conf_for(master, bench.work_dir, clusters).items()]
            for contender in contenders:
                for filesystem in filesystems:  # a contender's runs on both back to back
                    label = contender + suffix_of(master) + hdfs_tables.suffix_of(filesystem)
                    bench.variants[label] = (contender, arguments)
                    labels.append(label)
                    if master != "local":
                        on_cluster.add(label)
                    if filesystem == "hdfs":
                        bench.on_hdfs.add(label)
        if args.baseline:
            label = f"ours@{args.baseline}"
            bench.variants[label], bench.sources[label] = ("ours", []), bench.baseline(args.baseline)
            labels.insert(0, label)
        for spec in harness.datasets_of(args):
            data = bench.prepare(spec, args.data_dir)
            runs = harness.interleaved(
                labels, args.runs, lambda c, spec=spec: driver_side(c in on_cluster, bench.run(c, spec, args.data_dir))
            )
            summary = {c: harness.summarize(r) for c, r in runs.items()}
            ratios = ratios_of(summary, list(map(suffix_of, masters)), list(map(hdfs_tables.suffix_of, filesystems)))
            for label in [s for s in bench.sources if "ours" in summary]:  # the baseline
                ratios[f"ours / {label}"] = round(summary["ours"]["wall_median_s"] / summary[label]["wall_median_s"], 3)
            payload["datasets"].append({"data": data, "summary": summary, "ratios": ratios, "runs": runs})
            print_dataset(data, summary, ratios)
    path = harness.write_result("overhead", payload, args.out)
    harness.log(f"\nresults: {path}")


def suffix_of(master: str) -> str:
    """The label suffix of the contenders run on `master`: none in local mode, else `@cluster` / `@spark://...`."""
    return "" if master == "local" else f"@{master}"


DRIVER_ONLY = ("cpu_s", "cpu_python_s", "cpu_jvm_s", "max_rss_mb")


def driver_side(on_cluster: bool, result: dict) -> dict:
    """The run's figures, those of `cpu.run` renamed `driver_<name>` for a run on a cluster: they measure the
    contender's process and its JVM, the driver; the executors run under the cluster's Workers."""
    if not on_cluster:
        return result
    return {f"driver_{key}" if key in DRIVER_ONLY else key: value for key, value in result.items()}


def spark_conf_for(master: str, work_dir: Path, clusters: contextlib.ExitStack) -> dict[str, str]:
    """The Spark conf (over local mode's) of the contenders run on `master`; `cluster` starts one, stopped by
    `clusters` at the end."""
    if master == "local":
        return {}
    if master not in ("cluster", "yarn") and not master.startswith("spark://"):
        raise SystemExit(f"--master {master!r}: expected local, cluster, yarn or spark://HOST:PORT")
    harness.log(f"@{master} runs: the cpu figures are the driver's only (the executors' CPU is not measured)")
    if master == "cluster":
        from spark_resources.cluster import SparkCluster

        cluster = SparkCluster(home=work_dir / "spark-cluster", worker_memory="2g", executor_memory="1g")
        clusters.callback(cluster.stop)
        harness.log(f"Spark standalone cluster: {cluster.start()} ({cluster.workers} workers of 1 core)")
        return cluster.session_conf()
    if master == "yarn":
        return yarn_conf(work_dir, clusters)
    return {"spark.master": master}


def yarn_conf(work_dir: Path, clusters: contextlib.ExitStack) -> dict[str, str]:
    """Start the local Hadoop with YARN (stopped by `clusters`); the conf of a client-mode driver on it, with
    executors sized as the standalone cluster's and the local filesystem the default one (the tables stay there)."""
    import os
    from getpass import getuser

    from spark_resources.hadoop import LocalHadoop
    from spark_resources.local_yarn import LocalYarn
    from spark_resources.settings import SparkSubmitSettings, render_spark_conf

    hadoop = LocalHadoop(home=work_dir / "yarn", nodemanagers=2)
    clusters.callback(hadoop.stop)
    harness.log(f"local Hadoop with YARN: {hadoop.start()} ({hadoop.status()})")
    os.environ["HADOOP_CONF_DIR"] = str(hadoop.conf_dir)  # the contenders' processes inherit it
    local_fs = {"spark.hadoop.fs.defaultFS": "file:///", "spark.yarn.stagingDir": f"{hadoop.uri}/user/{getuser()}"}
    block = LocalYarn(hadoop, extra_conf=local_fs).spark_submit()
    return render_spark_conf(SparkSubmitSettings.model_validate({**block, "executor_memory": "1g"}))


def ratios_of(summary: dict, masters: list[str], filesystems: list[str]) -> dict:
    """Each engine contender's wall time over each bare one's, and per_unit's over one_job's, where both ran (on
    each master and filesystem: their label suffixes); a contender's on a cluster over its own in local mode (on
    the same filesystem), and its on HDFS over its own on the local filesystem (on the same master)."""
    wall = {c: s["wall_median_s"] for c, s in summary.items()}
    pairs = []
    for m in masters:
        for f in filesystems:
            s = m + f
            pairs += [(a + s, b + s) for a in ("ours", "ours-per-unit") for b in ("bare-onejob", "bare-each")]
            pairs.append(("ours-per-unit" + s, "ours" + s))
            pairs += [(c + s, c + f) for c in CONTENDERS if m]
            pairs += [(c + s, c + m) for c in CONTENDERS if f]
    return {f"{a} / {b}": round(wall[a] / wall[b], 3) for a, b in pairs if a in wall and b in wall}


def print_dataset(data: dict, summary: dict, ratios: dict) -> None:
    harness.log(
        f"\n{data['partitions']} partitions x {data['files']} files, {data['rows']:,} rows, "
        f"{data['bytes'] / 1e6:.0f} MB"
    )
    rows = [
        [c, s["runs"], s["wall_median_s"], f"{s['wall_min_s']}-{s['wall_max_s']}", s.get("session_start_median_s"),
         s.get("work_median_s"), s["all_exit_0"], s["all_content_preserved"], s["units_failed"]]
        for c, s in summary.items()
    ]  # fmt: skip
    harness.log(
        harness.table(
            rows,
            [
                "contender",
                "runs",
                "wall median s",
                "range",
                "spark start s",
                "work s",
                "exit 0",
                "content ok",
                "units failed",
            ],
        )
    )
    for name, value in ratios.items():
        harness.log(f"{name}: {value}")
    for label in [c for c in summary if c.split("@")[0].startswith("ours")]:
        steps = summary[label].get("steps_median_s", {})
        if steps:
            figures = ", ".join(f"{k} {v}" for k, v in steps.items())
            harness.log(f"{label}, median seconds per protocol step: {figures}")
        trips = summary[label].get("py4j_round_trips_median", {})
        if trips:
            figures = ", ".join(f"{k} {v:g}" for k, v in trips.items())
            harness.log(f"{label}, py4j round trips per protocol step (median): {figures}")


if __name__ == "__main__":
    main()
