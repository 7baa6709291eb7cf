"""Benchmark 1 — overhead against the floor: lakekeeper-dagster (full protocol: snapshot, write, verification of
count and content checksum, backup, re-list, swap, commit) against a bare Spark job that reads the same files,
coalesces to the same counts and writes them, partition after partition and in one job; ours runs with both
write modes (`ours`: a batch in one Spark job, `ours-per-unit`: one job per partition).

    nice -n 15 .venv/bin/python -m benchmarks.overhead            # 100x20 (5M rows) and 3x200 (demo), 3 runs
    nice -n 15 .venv/bin/python -m benchmarks.overhead --dataset 10x20x500000 --runs 1   # quick
"""

from __future__ import annotations

import argparse

from benchmarks import harness

CONTENDERS = ["ours", "ours-per-unit", "bare-each", "bare-onejob"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.common_arguments(parser, ["100x20x5000000", "3x200x300000"], runs=3)
    args = parser.parse_args(argv)
    payload = harness.base_payload(args)
    harness.header(payload)
    payload["datasets"] = []
    with harness.Bench(harness.work_dir(args.work_dir), args.block_size_mb, args.ratio) as bench:
        for spec in harness.datasets_of(args):
            data = bench.prepare(spec, args.data_dir)
            runs = harness.interleaved(CONTENDERS, args.runs, lambda c, spec=spec: bench.run(c, spec, args.data_dir))
            summary = {c: harness.summarize(r) for c, r in runs.items()}
            ours = summary["ours"]["wall_median_s"]
            ratios = {
                "ours / bare-onejob": round(ours / summary["bare-onejob"]["wall_median_s"], 3),
                "ours / bare-each": round(ours / summary["bare-each"]["wall_median_s"], 3),
                "ours-per-unit / bare-onejob": round(
                    summary["ours-per-unit"]["wall_median_s"] / summary["bare-onejob"]["wall_median_s"], 3
                ),
                "ours (one_job) / ours-per-unit": round(ours / summary["ours-per-unit"]["wall_median_s"], 3),
                "ours / faster bare": round(
                    ours / min(summary[c]["wall_median_s"] for c in ("bare-each", "bare-onejob")), 3
                ),
            }
            payload["datasets"].append({"data": data, "summary": summary, "ratios": ratios, "runs": runs})
            print_dataset(data, summary, ratios)
    path = harness.write_result("overhead", payload, args.out)
    harness.log(f"\nresults: {path}")


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
    steps = summary["ours"].get("steps_median_s", {})
    if steps:
        harness.log("ours, median seconds per protocol step: " + ", ".join(f"{k} {v}" for k, v in steps.items()))


if __name__ == "__main__":
    main()
