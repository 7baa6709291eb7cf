"""Benchmark 5 — scaling: compaction time of lakekeeper-dagster against data size (at a fixed partition count) and
against partition count (at a fixed data size), with throughput set against a plain file copy of the same data
(read + write + sync) on the same disk, the physical ceiling.

    nice -n 15 .venv/bin/python -m benchmarks.scaling                      # both sweeps, 1 run each
    nice -n 15 .venv/bin/python -m benchmarks.scaling --sweep size --runs 3
    nice -n 15 .venv/bin/python -m benchmarks.scaling --dataset 10x20x500000 --dataset 40x20x500000
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time

from benchmarks import harness
from benchmarks.datagen import DataSpec

# ~46 bytes a row on disk: 1.1M rows ~ 50 MB, 4.4M ~ 200 MB, 17.4M ~ 800 MB.
SWEEPS = {
    "size": ["100x20x1100000", "100x20x4400000", "100x20x17400000"],
    "partitions": ["10x20x1000000", "100x20x1000000", "1000x20x1000000"],
}


def copy_bandwidth(bench: harness.Bench, spec: DataSpec, data_dir, runs: int) -> float:
    """MB/s of a plain copy of the data set's files (read + write, then sync), median of `runs`."""
    speeds = []
    for index in range(runs):
        target = bench.work_dir / "copies" / f"{spec.name}-{index}"
        os.sync()
        started = time.perf_counter()
        shutil.copytree(data_dir / spec.name, target)
        os.sync()
        elapsed = time.perf_counter() - started
        size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
        speeds.append(size / 1e6 / elapsed)
        shutil.rmtree(target)
    return round(statistics.median(speeds), 1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.common_arguments(parser, [], runs=1)
    parser.add_argument("--sweep", choices=["size", "partitions", "both"], default="both")
    parser.add_argument("--with-floor", action="store_true", help="also time the bare one-job floor")
    args = parser.parse_args(argv)
    if not args.datasets:
        args.default_datasets = [d for name, ds in SWEEPS.items() if args.sweep in (name, "both") for d in ds]
    contenders = ["ours"] + (["bare-onejob"] if args.with_floor else [])
    payload = harness.base_payload(args)
    harness.header(payload)
    payload["datasets"] = []
    rows = []
    with harness.Bench(harness.work_dir(args.work_dir), args.block_size_mb, args.ratio) as bench:
        for spec in harness.datasets_of(args):
            data = bench.prepare(spec, args.data_dir)
            copy = copy_bandwidth(bench, spec, args.data_dir, max(args.runs, 3))
            runs = harness.interleaved(contenders, args.runs, lambda c, spec=spec: bench.run(c, spec, args.data_dir))
            summary = {c: harness.summarize(r) for c, r in runs.items()}
            ours = summary["ours"]
            mb = data["bytes"] / 1e6
            figures = {
                "input_mb": round(mb, 1),
                "wall_median_s": ours["wall_median_s"],
                "work_median_s": ours.get("work_median_s"),
                "work_mb_per_s": round(mb / ours["work_median_s"], 1) if ours.get("work_median_s") else None,
                "copy_mb_per_s": copy,
                "work_s_per_partition": round(ours["work_median_s"] / spec.partitions, 3),
                "floor_wall_median_s": summary.get("bare-onejob", {}).get("wall_median_s"),
            }
            payload["datasets"].append({"data": data, "figures": figures, "summary": summary, "runs": runs})
            rows.append(
                [f"{spec.partitions}x{spec.files}", f"{spec.rows:,}", figures["input_mb"], figures["wall_median_s"],
                 figures["work_median_s"], figures["work_s_per_partition"], figures["work_mb_per_s"], copy,
                 figures["floor_wall_median_s"] or "-", ours["all_content_preserved"]]
            )  # fmt: skip
    harness.log("")
    harness.log(
        harness.table(
            rows,
            [
                "partitions x files",
                "rows",
                "MB",
                "wall s",
                "work s",
                "work s / partition",
                "work MB/s",
                "plain copy MB/s",
                "floor wall s",
                "content ok",
            ],
        )  # fmt: skip
    )
    path = harness.write_result("scaling", payload, args.out)
    harness.log(f"\nresults: {path}")


if __name__ == "__main__":
    main()
