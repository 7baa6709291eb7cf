"""Benchmark 1 — overhead against the floor: lakekeeper-dagster (full protocol: snapshot, write, verification of
count and content checksum, backup, re-list, swap, commit) against a bare Spark job that reads the same files,
coalesces to the same counts and writes them, partition after partition and in one job; ours runs with both
write modes (`ours`: one Spark job per partition, the default; `ours-one-job`: a batch's partitions in jobs of up
to 10).

    nice -n 15 .venv/bin/python -m benchmarks.overhead            # 100x20 (5M rows) and 3x200 (demo), 3 runs
    nice -n 15 .venv/bin/python -m benchmarks.overhead --dataset 10x20x500000 --runs 1   # quick
"""

from __future__ import annotations

import argparse

from benchmarks import harness

CONTENDERS = ["ours", "ours-one-job", "bare-each", "bare-onejob"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.common_arguments(parser, ["100x20x5000000", "3x200x300000"], runs=3)
    parser.add_argument("--contender", action="append", dest="contenders", choices=CONTENDERS,
                        help=f"repeatable (default: {' '.join(CONTENDERS)})")  # fmt: skip
    args = parser.parse_args(argv)
    contenders = args.contenders or CONTENDERS
    payload = harness.base_payload(args)
    harness.header(payload)
    payload["datasets"] = []
    with harness.Bench(harness.work_dir(args.work_dir), args.block_size_mb, args.ratio) as bench:
        for spec in harness.datasets_of(args):
            data = bench.prepare(spec, args.data_dir)
            runs = harness.interleaved(contenders, args.runs, lambda c, spec=spec: bench.run(c, spec, args.data_dir))
            summary = {c: harness.summarize(r) for c, r in runs.items()}
            ratios = ratios_of(summary)
            payload["datasets"].append({"data": data, "summary": summary, "ratios": ratios, "runs": runs})
            print_dataset(data, summary, ratios)
    path = harness.write_result("overhead", payload, args.out)
    harness.log(f"\nresults: {path}")


def ratios_of(summary: dict) -> dict:
    """Each engine contender's wall time over each bare one's, and one_job's over per_unit's, where both ran."""
    wall = {c: s["wall_median_s"] for c, s in summary.items()}
    pairs = [(a, b) for a in ("ours", "ours-one-job") for b in ("bare-onejob", "bare-each")]
    pairs.append(("ours-one-job", "ours"))
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
    steps = summary["ours"].get("steps_median_s", {})
    if steps:
        harness.log("ours, median seconds per protocol step: " + ", ".join(f"{k} {v}" for k, v in steps.items()))


if __name__ == "__main__":
    main()
