"""Benchmark 7 — medium files: partitions of files whose row groups are already large (64 MB), compacted by a
byte-level merge (row groups copied, never decoded) against a rewrite (decode + encode), interleaved in one run:
wall time, CPU seconds of the whole process tree (Python and JVM), and a full-scan query on each output.

    nice -n 15 .venv/bin/python -m benchmarks.medium_files                        # 6 partitions x 8 files, ~3 GB
    nice -n 15 .venv/bin/python -m benchmarks.medium_files --partitions 50        # the issue's scale, ~25 GB a copy
    nice -n 15 .venv/bin/python -m benchmarks.medium_files --partitions 2 --files 4 --row-group-mb 16 \\
        --merge-threshold-mb 8                                                    # quick
    ... --baseline REVISION                   # and ours-merge on that revision's code, side by side

Every file is one row group of `--row-group-mb` (10^6 bytes, compressed). With the 128 MB block and ratio 1.5
every partition is a candidate (its files are below 0.75 x block and block / ratio) and is written as
ceil(partition / block) files. Contenders: `ours-merge` (the engine with `byte_merge_min_row_group_mb` at
`--merge-threshold-mb`, below the row groups), `ours-rewrite` (the same at `--rewrite-threshold-mb`, above them:
everything goes through the Spark rewrite), `bare-onejob` (a bare one-job Spark rewrite). An engine that does not
know the setting runs both `ours` variants the same way (the result says so under `settings_unknown`).
"""

from __future__ import annotations

import argparse
import statistics

from benchmarks import harness
from benchmarks.accounting import AccountingBench, mb
from benchmarks.datagen import DataSpec

BYTES_PER_ROW = 37.1  # compressed, measured on datagen's rows in row groups of 1.6M rows
SETTING = "byte_merge_min_row_group_mb"
CONTENDERS = ["ours-merge", "ours-rewrite", "bare-onejob"]
CHOICES = [*CONTENDERS, "bare-each"]


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--files", type=int, default=8, help="files per partition, one row group each")
    parser.add_argument("--row-group-mb", type=float, default=64.0, help="compressed size of each row group")
    parser.add_argument("--block-size-mb", type=int, default=128)
    parser.add_argument("--ratio", type=float, default=1.5)
    parser.add_argument("--merge-threshold-mb", type=float, default=32.0, help=f"{SETTING} of ours-merge")
    parser.add_argument("--rewrite-threshold-mb", type=float, default=1024.0, help=f"{SETTING} of ours-rewrite")
    parser.add_argument("--runs", type=int, default=1, help="repetitions per contender (median reported)")
    parser.add_argument("--scan-runs", type=int, default=2, help="full-scan queries per output (best reported)")
    parser.add_argument("--contender", action="append", dest="contenders", choices=CHOICES,
                        help=f"repeatable (default: {' '.join(CONTENDERS)})")  # fmt: skip
    parser.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                        help="one more engine setting for both ours variants, repeatable")  # fmt: skip
    parser.add_argument("--baseline", metavar="REVISION",
                        help="also run ours-merge on this git revision's code, as ours-merge@REVISION")  # fmt: skip
    harness.location_arguments(parser)
    return parser.parse_args(argv)


def _threshold(value: float) -> str:
    return f"{SETTING}={int(value) if value == int(value) else value}"


def main(argv: list[str] | None = None) -> None:
    args = arguments(argv)
    contenders = args.contenders or CONTENDERS
    row_group_rows = round(args.row_group_mb * 1e6 / BYTES_PER_ROW)
    spec = DataSpec(args.partitions, args.files, args.partitions * args.files * row_group_rows,
                    row_group_rows=row_group_rows)  # fmt: skip
    extra = [x for s in args.setting for x in ("--setting", s)]
    variants = {
        "ours-merge": ("ours", ["--setting", _threshold(args.merge_threshold_mb), *extra]),
        "ours-rewrite": ("ours", ["--setting", _threshold(args.rewrite_threshold_mb), *extra]),
    }
    payload = harness.base_payload(args)
    harness.header(payload)
    with AccountingBench(
        harness.work_dir(args.work_dir), args.block_size_mb, args.ratio, variants=variants, scan_runs=args.scan_runs
    ) as bench:
        if args.baseline:
            label = f"ours-merge@{args.baseline}"
            bench.variants[label], bench.sources[label] = variants["ours-merge"], bench.baseline(args.baseline)
            contenders = [label, *contenders]
        data = bench.prepare(spec, args.data_dir)
        runs = harness.interleaved(contenders, args.runs, lambda c: bench.run(c, spec, args.data_dir))
    summary = {c: harness.summarize(r) | figures(r) for c, r in runs.items()}
    ratios = {}
    if {"ours-merge", "ours-rewrite"} <= set(summary):
        merge, rewrite = summary["ours-merge"], summary["ours-rewrite"]
        ratios = {
            f"rewrite / merge, {key}": round(rewrite[key] / merge[key], 3) if merge[key] else None
            for key in ("wall_median_s", "cpu_median_s", "scan_median_s")
        }
    unknown = sorted({k for r in runs.get("ours-merge", []) for k in r.get("settings_unknown", {})})
    if unknown:
        harness.log(f"\nNOTE: this engine does not know {unknown}: ours-merge and ours-rewrite ran the same code")
    payload.update(data=data, summary=summary, ratios=ratios, settings_unknown=unknown, runs=runs)
    print_summary(data, summary, ratios)
    path = harness.write_result("medium_files", payload, args.out)
    harness.log(f"\nresults: {path}")


def figures(runs: list[dict]) -> dict:
    """Medians of CPU seconds (whole tree, Python, JVM) and of the full-scan query; what the last run wrote."""

    def median(key: str, source=lambda r: r) -> float | None:
        values = [source(r)[key] for r in runs if key in source(r)]
        return round(statistics.median(values), 3) if values else None

    check = runs[-1]["check"]
    return {
        "cpu_median_s": median("cpu_s"),
        "cpu_python_median_s": median("cpu_python_s"),
        "cpu_jvm_median_s": median("cpu_jvm_s"),
        "scan_median_s": median("scan_s", lambda r: r["check"]),
        "files_after": check.get("files_after"),
        "bytes_input": check.get("bytes_input"),
        "bytes_written": check.get("bytes_written"),
    }


def print_summary(data: dict, summary: dict, ratios: dict) -> None:
    harness.log(
        f"\n{data['partitions']} partitions x {data['files']} files, row groups of "
        f"{data['row_group_compressed_bytes_min'] / 1e6:.1f}-{data['row_group_compressed_bytes_max'] / 1e6:.1f} MB, "
        f"{data['rows_total']:,} rows, {data['bytes'] / 1e6:.0f} MB"
    )
    rows = [
        [c, s["runs"], s["wall_median_s"], s["cpu_median_s"], s["cpu_python_median_s"], s["cpu_jvm_median_s"],
         s["scan_median_s"], s["files_after"], mb(s["bytes_written"]), s["all_exit_0"], s["all_content_preserved"]]
        for c, s in summary.items()
    ]  # fmt: skip
    headers = ["contender", "runs", "wall s", "cpu s", "cpu python s", "cpu jvm s", "full scan s", "files after",
               "MB written", "exit 0", "content ok"]  # fmt: skip
    harness.log(harness.table(rows, headers))
    for name, value in ratios.items():
        harness.log(f"{name}: {value}")


if __name__ == "__main__":
    main()
