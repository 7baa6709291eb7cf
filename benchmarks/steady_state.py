"""Benchmark 6 — steady state: every partition holds one large, already compacted file plus a few new small ones
(what the second and every later compaction of a partition sees). Ours, Lakekeeper 0.0.6 and a bare rewrite of the
whole partition, interleaved in one run, each on its own copy; what each rewrote is counted from the files.

    nice -n 15 .venv/bin/python -m benchmarks.steady_state                 # 100 partitions x (1 large + 10 small)
    nice -n 15 .venv/bin/python -m benchmarks.steady_state --partitions 10 --runs 1      # quick
    nice -n 15 .venv/bin/python -m benchmarks.steady_state --filesystem local --filesystem hdfs   # local FS vs HDFS

The large file (~3.4 MB, `--large-rows`) counts as large for the 4 MB block size (>= 0.75 x block, the default
`min_file_size_ratio`); a partition (large + small, ~3.9 MB) still fits one block, so a rewrite of the whole
partition writes one file, and leaving the large file alone writes one file of the small ones. The ratio (5) makes
every partition a candidate for Lakekeeper's rule (average file < block / ratio) and for ours.

`--filesystem hdfs` puts the table copies (and the bare job's output) on a local HDFS started for the benchmark
(benchmarks/hdfs_tables.py), stopped at the end; with `--filesystem local` too, each contender runs on both,
interleaved, the HDFS runs labelled `<contender>@hdfs`. Lakekeeper runs there too: it takes the location from the
metastore and reaches the files through the Hadoop FileSystem API, with the same HDFS client settings as ours.
"""

from __future__ import annotations

import argparse

from benchmarks import harness, hdfs_tables
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
    hdfs_tables.filesystem_arguments(parser)
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
    filesystems = hdfs_tables.filesystems_of(args)
    payload = harness.base_payload(args)
    payload.update(lakekeeper_version=harness.LAKEKEEPER_VERSION, filesystems=filesystems)
    harness.header(payload)
    settings = [x for s in args.setting for x in ("--setting", s)]
    labels = [c + hdfs_tables.suffix_of(f) for c in contenders for f in filesystems]  # each pair run back to back
    with AccountingBench(harness.work_dir(args.work_dir), args.block_size_mb, args.ratio) as bench:
        for label in labels:
            contender = label.split("@")[0]
            bench.variants[label] = (contender, settings if contender == "ours" else [])
        bench.on_hdfs.update(label for label in labels if label.endswith("@hdfs"))
        if bench.on_hdfs:
            bench.start_hdfs()
        data = bench.prepare(spec, args.data_dir)
        large_enough = data.get("large_file_bytes_min", 0) >= 0.75 * args.block_size_mb * 2**20
        if not large_enough:
            harness.log(f"WARNING: the large files ({data.get('large_file_bytes_min')} bytes) are below 0.75 x block")
        runs = harness.interleaved(labels, args.runs, lambda c: bench.run(c, spec, args.data_dir))
    summary = {c: harness.summarize(r) for c, r in runs.items()}
    for contender, s in summary.items():
        s.update(accounting(runs[contender]))
    ratios = ratios_of(summary, contenders, list(map(hdfs_tables.suffix_of, filesystems)))
    payload.update(data=data, large_file_is_large=large_enough, summary=summary, ratios=ratios, runs=runs)
    print_summary(data, summary, ratios)
    path = harness.write_result("steady_state", payload, args.out)
    harness.log(f"\nresults: {path}")


def ratios_of(summary: dict, contenders: list[str], filesystems: list[str]) -> dict:
    """Each contender's wall time over ours on the same filesystem (label suffixes `filesystems`), and each one's
    on HDFS over its own on the local filesystem."""
    wall = {c: s["wall_median_s"] for c, s in summary.items()}
    pairs = [(c + f, "ours" + f) for f in filesystems for c in contenders if c != "ours"]
    pairs += [(c + f, c) for f in filesystems if f for c in contenders]
    return {f"{a} / {b}": round(wall[a] / wall[b], 3) for a, b in pairs if a in wall and b in wall}


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
         f"{s['large_kept']}/{s['large_files']}" if "large_kept" in s else "-"]  # in place only
        for c, s in summary.items()
    ]  # fmt: skip
    headers = ["contender", "runs", "wall median s", "range", "cpu s", "exit 0", "content ok", "MB replaced (read)",
               "MB written", "large files kept"]  # fmt: skip
    harness.log(harness.table(rows, headers))
    for name, value in ratios.items():
        harness.log(f"{name}: {value}")


if __name__ == "__main__":
    main()
