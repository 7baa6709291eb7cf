"""Benchmark 6 — steady state: every partition holds one large, already compacted file plus a few new small ones
(what the second and every later compaction of a partition sees). Ours, Lakekeeper 0.0.6 and a bare rewrite of the
whole partition, interleaved in one run, each on its own copy; what each rewrote is counted from the files.

    nice -n 15 .venv/bin/python -m benchmarks.steady_state                 # 100 partitions x (1 large + 10 small)
    nice -n 15 .venv/bin/python -m benchmarks.steady_state --partitions 10 --runs 1      # quick

The large file (~3.4 MB, `--large-rows`) counts as large for the 4 MB block size (>= 0.75 x block, the default
`min_file_size_ratio`); a partition (large + small, ~3.9 MB) still fits one block, so a rewrite of the whole
partition writes one file, and leaving the large file alone writes one file of the small ones. The ratio (5) makes
every partition a candidate for Lakekeeper's rule (average file < block / ratio) and for ours.
"""

from __future__ import annotations

import argparse

from benchmarks import harness
from benchmarks.accounting import AccountingBench, mb
from benchmarks.datagen import DataSpec

CONTENDERS = ["ours", "lakekeeper", "bare-onejob"]
CHOICES = ["ours", "lakekeeper", "bare-onejob", "bare-each"]


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--small-files", type=int, default=10, help="new small files per partition")
    parser.add_argument("--small-rows", type=int, default=1000, help="rows per small file (~47 KB)")
    parser.add_argument("--large-rows", type=int, default=76_000, help="rows of each partition's large file")
    parser.add_argument("--block-size-mb", type=int, default=4)
    parser.add_argument("--ratio", type=float, default=5.0)
    parser.add_argument("--runs", type=int, default=3, help="repetitions per contender (median reported)")
    parser.add_argument("--contender", action="append", dest="contenders", choices=CHOICES,
                        help=f"repeatable (default: {' '.join(CONTENDERS)})")  # fmt: skip
    parser.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                        help="an engine setting for ours (lakekeeper.yaml key), repeatable")  # fmt: skip
    harness.location_arguments(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    contenders = args.contenders or CONTENDERS
    if "lakekeeper" in contenders:
        harness.lakekeeper_venv()
    spec = DataSpec(
        args.partitions, args.small_files, args.partitions * args.small_files * args.small_rows,
        large_rows=args.large_rows,
    )  # fmt: skip
    payload = harness.base_payload(args)
    payload["lakekeeper_version"] = harness.LAKEKEEPER_VERSION
    harness.header(payload)
    settings = [x for s in args.setting for x in ("--setting", s)]
    with AccountingBench(
        harness.work_dir(args.work_dir), args.block_size_mb, args.ratio, variants={"ours": ("ours", settings)}
    ) as bench:
        data = bench.prepare(spec, args.data_dir)
        large_enough = data.get("large_file_bytes_min", 0) >= 0.75 * args.block_size_mb * 2**20
        if not large_enough:
            harness.log(f"WARNING: the large files ({data.get('large_file_bytes_min')} bytes) are below 0.75 x block")
        runs = harness.interleaved(contenders, args.runs, lambda c: bench.run(c, spec, args.data_dir))
    summary = {c: harness.summarize(r) for c, r in runs.items()}
    for contender, s in summary.items():
        s.update(accounting(runs[contender]))
    ratios = {}
    if "ours" in summary:
        ours = summary["ours"]["wall_median_s"]
        ratios = {f"{c} / ours": round(s["wall_median_s"] / ours, 3) for c, s in summary.items() if c != "ours"}
    payload.update(data=data, large_file_is_large=large_enough, summary=summary, ratios=ratios, runs=runs)
    print_summary(data, summary, ratios)
    path = harness.write_result("steady_state", payload, args.out)
    harness.log(f"\nresults: {path}")


def accounting(runs: list[dict]) -> dict:
    """What the last run rewrote (the same data every run) and the CPU seconds' median."""
    check = runs[-1]["check"]
    keys = ("files_kept", "bytes_input", "bytes_kept", "bytes_replaced", "bytes_written", "large_kept", "large_files")
    cpu = sorted(r["cpu_s"] for r in runs)
    return {"cpu_median_s": cpu[len(cpu) // 2], **{k: check[k] for k in keys if k in check}}


def print_summary(data: dict, summary: dict, ratios: dict) -> None:
    harness.log(
        f"\n{data['partitions']} partitions x (1 large file of {data['large_file_bytes_min'] / 1e6:.2f}-"
        f"{data['large_file_bytes_max'] / 1e6:.2f} MB + {data['files']} small), {data['rows_total']:,} rows, "
        f"{data['bytes'] / 1e6:.0f} MB"
    )
    rows = [
        [c, s["runs"], s["wall_median_s"], f"{s['wall_min_s']}-{s['wall_max_s']}", s["cpu_median_s"], s["all_exit_0"],
         s["all_content_preserved"], mb(s.get("bytes_replaced")), mb(s.get("bytes_written")),
         f"{s.get('large_kept', '-')}/{s.get('large_files', '-')}" if c in ("ours", "lakekeeper") else "-"]
        for c, s in summary.items()
    ]  # fmt: skip
    headers = ["contender", "runs", "wall median s", "range", "cpu s", "exit 0", "content ok", "MB replaced (read)",
               "MB written", "large files kept"]  # fmt: skip
    harness.log(harness.table(rows, headers))
    for name, value in ratios.items():
        harness.log(f"{name}: {value}")


if __name__ == "__main__":
    main()
