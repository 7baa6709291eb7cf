"""Benchmark 2 — against the seed system: Lakekeeper 0.0.6 from PyPI (its own virtualenv under .bench/, created on
first use) driven by its own CLI in local mode against the same metastore, each contender on its own copy of the
same data, with the same block size and ratio; plus what it leaves behind, checked by our own reads.

    nice -n 15 .venv/bin/python -m benchmarks.vs_lakekeeper                    # 100x20 (5M rows), 3 runs
    nice -n 15 .venv/bin/python -m benchmarks.vs_lakekeeper --dataset 10x20x500000 --runs 1
"""

from __future__ import annotations

import argparse

from benchmarks import harness

CONTENDERS = ["ours", "lakekeeper", "bare-each"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.common_arguments(parser, ["100x20x5000000"], runs=3)
    args = parser.parse_args(argv)
    harness.lakekeeper_venv()
    payload = harness.base_payload(args)
    payload["lakekeeper_version"] = harness.LAKEKEEPER_VERSION
    harness.header(payload)
    payload["datasets"] = []
    with harness.Bench(harness.work_dir(args.work_dir), args.block_size_mb, args.ratio) as bench:
        for spec in harness.datasets_of(args):
            data = bench.prepare(spec, args.data_dir)
            runs = harness.interleaved(CONTENDERS, args.runs, lambda c, spec=spec: bench.run(c, spec, args.data_dir))
            summary = {c: harness.summarize(r) for c, r in runs.items()}
            ours = summary["ours"]["wall_median_s"]
            ratios = {
                "lakekeeper / ours": round(summary["lakekeeper"]["wall_median_s"] / ours, 3),
                "lakekeeper / bare-each": round(
                    summary["lakekeeper"]["wall_median_s"] / summary["bare-each"]["wall_median_s"], 3
                ),
            }
            payload["datasets"].append({"data": data, "summary": summary, "ratios": ratios, "runs": runs})
            print_dataset(data, summary, ratios, runs)
    path = harness.write_result("vs_lakekeeper", payload, args.out)
    harness.log(f"\nresults: {path}")


def print_dataset(data: dict, summary: dict, ratios: dict, runs: dict) -> None:
    harness.log(
        f"\n{data['partitions']} partitions x {data['files']} files, {data['rows']:,} rows, "
        f"{data['bytes'] / 1e6:.0f} MB"
    )
    rows = []
    for contender, s in summary.items():
        check = runs[contender][-1]["check"]
        rows.append(
            [
                contender,
                s["runs"],
                s["wall_median_s"],
                f"{s['wall_min_s']}-{s['wall_max_s']}",
                s["all_exit_0"],
                check.get("files_after"),
                f"{check.get('rows_after')}/{data['rows']}",
                s["all_content_preserved"],
                check.get("table_location_unchanged", "-"),
                check.get("other_entries_count", "-"),
                check.get("after_msck_repair", {}).get("rows", "-"),
            ]
        )
    headers = ["contender", "runs", "wall median s", "range", "exit 0", "files after", "rows after", "content ok",
               "location kept", "extra dirs", "rows after MSCK"]  # fmt: skip
    harness.log(harness.table(rows, headers))
    for name, value in ratios.items():
        harness.log(f"{name}: {value}")
    check = runs["lakekeeper"][-1]["check"]
    harness.log(f"lakekeeper left in the table directory: {check.get('other_entries_in_table_dir')}")


if __name__ == "__main__":
    main()
