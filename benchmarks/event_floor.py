"""9. The event floor: what Dagster itself takes to store one asset observation, SQLite and Postgres side by side.

An op of a bare job (no Spark, no listing, no lakekeeper code) yields N partition observations with as many metadata
entries as the observation job's; the seconds per event are the least a run that records N observations can take
on that instance (the observation job's first run at an estate records one per partition).

    PYTHONPATH=. nice -n 15 .venv/bin/python -m benchmarks.event_floor --events 2000
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import dagster as dg

from benchmarks import harness
from benchmarks.estate import BACKENDS, instance_yaml
from lakekeeper_dagster_tests.postgres import PostgresServer

PARTITIONS = "floor"
METADATA_ENTRIES = 12  # as many as observations.observation_metadata writes


def floor_job(events: int) -> tuple[dg.Definitions, list[str]]:
    partitions = [f"p{number:07d}" for number in range(events)]

    @dg.asset(partitions_def=dg.DynamicPartitionsDefinition(name=PARTITIONS))
    def observed() -> None: ...

    @dg.op(out={})
    def observe():
        for number, partition in enumerate(partitions):
            metadata = {f"figure_{entry}": number + entry for entry in range(METADATA_ENTRIES)}
            yield dg.AssetObservation(asset_key=observed.key, partition=partition, metadata=metadata)

    @dg.job
    def floor() -> None:
        observe()

    return dg.Definitions(assets=[observed], jobs=[floor]), partitions


def measure(backend: str, events: int) -> dict:
    """A new instance of `backend`, the job run once in process: the whole run's seconds, the op's from its start to
    its last observation stored, and milliseconds per event of the latter."""
    postgres = PostgresServer().start() if backend == "postgres" else None
    try:
        with tempfile.TemporaryDirectory(prefix="lk-floor-") as home:
            (Path(home) / "dagster.yaml").write_text(instance_yaml(postgres.url if postgres else None))
            defs, partitions = floor_job(events)
            with dg.DagsterInstance.from_config(home) as instance:
                instance.add_dynamic_partitions(PARTITIONS, partitions)
                started = time.monotonic()
                result = defs.resolve_job_def("floor").execute_in_process(
                    instance=instance, run_config={"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
                )
                seconds = time.monotonic() - started
                entries = instance.all_logs(result.run_id)
            kinds = dg.DagsterEventType
            observed_at = [e.timestamp for e in entries if e.dagster_event_type == kinds.ASSET_OBSERVATION]
            (step_start,) = [e.timestamp for e in entries if e.dagster_event_type == kinds.STEP_START]
            assert result.success and len(observed_at) == events, f"{len(observed_at)} of {events} observations stored"
    finally:
        if postgres:
            postgres.stop()
    observing = max(observed_at) - step_start  # the op's yields alone, without the run's start and end
    return {
        "backend": backend,
        "events": events,
        "run_s": round(seconds, 1),
        "observing_s": round(observing, 1),
        "ms_per_event": round(observing / events * 1000, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000, help="observations the op yields")
    parser.add_argument("--runs", type=int, default=1, help="runs per backend, interleaved")
    parser.add_argument("--backend", action="append", choices=BACKENDS, help="repeatable (default: both)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    payload = {**harness.base_payload(args), "runs": []}
    for _ in range(args.runs):
        for backend in args.backend or list(BACKENDS):
            payload["runs"].append(measure(backend, args.events))
            harness.log(json.dumps(payload["runs"][-1]))
    rows = [[r["backend"], r["events"], r["run_s"], r["observing_s"], r["ms_per_event"]] for r in payload["runs"]]
    print(harness.table(rows, ["backend", "events", "run (s)", "observing (s)", "ms per event"]))
    print(f"written to {harness.write_result('event_floor', payload, args.out)}")


if __name__ == "__main__":
    main()
