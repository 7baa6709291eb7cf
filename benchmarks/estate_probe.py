"""Run by benchmark 8 in its own process, as a daemon would: load the code location's definitions on the instance
(DAGSTER_HOME, LAKEKEEPER_CONFIG from the environment) and evaluate file_count_sensor `--ticks` times with
`dg.build_sensor_context`. Prints one JSON line: the load time and each tick's time and requests."""

from __future__ import annotations

import argparse
import json
import time

import dagster as dg


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--module", default="lakekeeper_dagster.definitions")
    parser.add_argument("--ticks", type=int, default=3)
    args = parser.parse_args(argv)

    started = time.monotonic()
    module = __import__(args.module, fromlist=["defs"])
    from lakekeeper_dagster.surface.sensors.file_count import SENSOR_NAME

    with dg.DagsterInstance.get() as instance:  # entering it makes its state storage the one definitions read
        definitions = module.defs()
        load_s = time.monotonic() - started
        sensor = definitions.get_sensor_def(SENSOR_NAME)
        ticks, cursor = [], None
        for _ in range(args.ticks):
            mark = time.monotonic()
            context = dg.build_sensor_context(instance=instance, definitions=definitions, cursor=cursor)
            result = sensor(context)
            seconds = time.monotonic() - mark
            skip = getattr(result, "skip_reason", None)
            requests = getattr(result, "run_requests", None) or []
            skip = getattr(skip, "skip_message", skip)
            ticks.append({"seconds": round(seconds, 3), "run_requests": len(requests), "skip": skip})
            cursor = getattr(result, "cursor", None) or cursor  # the next tick reads on, as the daemon's would
    print(json.dumps({"probe_load_s": round(load_s, 2), "ticks": ticks}, default=str), flush=True)


if __name__ == "__main__":
    main()
