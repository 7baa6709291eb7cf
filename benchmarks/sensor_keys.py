"""10. What a sensor tick reads of every table's kept figures: the backlog counts against the whole observed snapshots.

Each tick of file_count_sensor first asks which tables' last kept figures have no unit needing compaction (those are
not read further). It reads each table's backlog count (`observations.without_backlog`); before 4c9e207 it read and
parsed each table's whole observed snapshot, one entry a partition (reproduced here as `snapshots_parsed`). Both on
the same instance, written by the observation job's own `keep_observed_snapshot` for N tables x P partitions with no
backlog (the state after a first run), SQLite and Postgres side by side; the median of `--reads` reads of each.

    PYTHONPATH=. nice -n 15 .venv/bin/python -m benchmarks.sensor_keys --tables 20 --partitions 17520
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import dagster as dg

from benchmarks import harness
from benchmarks.estate import BACKENDS, instance_yaml
from lakekeeper_dagster.surface.metadata import OBSERVED_SNAPSHOT_KEY
from lakekeeper_dagster.surface.observations import NEEDS, keep_observed_snapshot, without_backlog
from lakekeeper_dagster_tests.postgres import PostgresServer


def snapshots_parsed(instance: dg.DagsterInstance, keys: list[dg.AssetKey]) -> set[dg.AssetKey]:
    """The read before 4c9e207: every table's whole observed snapshot, parsed, searched for a unit needing
    compaction."""
    names = {OBSERVED_SNAPSHOT_KEY + key.to_user_string(): key for key in keys}
    kept = instance.run_storage.get_cursor_values(set(names))
    return {names[name] for name, text in kept.items() if not any(f[NEEDS] for f in json.loads(text).values())}


def _median_seconds(read, instance: dg.DagsterInstance, keys: list[dg.AssetKey], reads: int) -> float:
    times = []
    for _ in range(reads):
        started = time.monotonic()
        assert read(instance, keys) == set(keys)  # no table has a backlog: every one is left unread
        times.append(time.monotonic() - started)
    return statistics.median(times)


def measure(backend: str, tables: int, partitions: int, reads: int) -> dict:
    """A new instance of `backend`: every table's figures kept, then both reads timed on it."""
    keys = [dg.AssetKey(["estate", f"t{number:04d}"]) for number in range(tables)]
    figures = {f"hour={number:06d}": [1, 4096 + number, 1, False] for number in range(partitions)}
    postgres = PostgresServer().start() if backend == "postgres" else None
    try:
        with tempfile.TemporaryDirectory(prefix="lk-keys-") as home:
            (Path(home) / "dagster.yaml").write_text(instance_yaml(postgres.url if postgres else None))
            with dg.DagsterInstance.from_config(home) as instance:
                started = time.monotonic()
                for key in keys:
                    keep_observed_snapshot(instance, key, figures)
                kept_s = time.monotonic() - started
                backlog_s = _median_seconds(without_backlog, instance, keys, reads)
                parsed_s = _median_seconds(snapshots_parsed, instance, keys, reads)
    finally:
        if postgres:
            postgres.stop()
    return {
        "backend": backend,
        "tables": tables,
        "partitions": partitions,
        "keep_all_s": round(kept_s, 2),
        "backlog_counts_s": round(backlog_s, 4),
        "fingerprints_parsed_s": round(parsed_s, 3),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=17520, help="per table")
    parser.add_argument("--reads", type=int, default=5, help="reads of each kind, the median reported")
    parser.add_argument("--backend", action="append", choices=BACKENDS, help="repeatable (default: both)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    payload = {**harness.base_payload(args), "runs": []}
    for backend in args.backend or list(BACKENDS):
        payload["runs"].append(measure(backend, args.tables, args.partitions, args.reads))
        harness.log(json.dumps(payload["runs"][-1]))
    headers = ["backend", "tables", "partitions", "keep all (s)", "backlog counts (s)", "fingerprints parsed (s)"]
    print(harness.table([list(run.values()) for run in payload["runs"]], headers))
    print(f"written to {harness.write_result('sensor_keys', payload, args.out)}")


if __name__ == "__main__":
    main()
