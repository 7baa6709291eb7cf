"""Time spent in each protocol step of the engine, measured from outside it.

The engine records no timings, so this wraps its step functions (by module attribute, for the length of one
process) and charges each call's *own* time (minus the wrapped steps called inside it) to its step. A wrapped
name that disappears from the engine, or that its module no longer calls (a wrapper there would time nothing),
makes `install` fail loudly instead of silently measuring nothing.

It also counts the py4j round trips (commands sent to the JVM, from any thread) charged to the innermost step the
main thread is in: the driver's fixed cost is mostly those.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

# (module, attribute path, step): a function is patched in the module that CALLS it (the name its caller looks up),
# a method on its class. Order does not matter: nesting is resolved at run time.
STEPS = [
    ("lakekeeper_dagster.engine.ops.compaction", "load_compactable", "metadata"),
    ("lakekeeper_dagster.engine.ops.compaction", "_targets", "metadata"),
    ("lakekeeper_dagster.engine.protocol.lease", "TableLease.__enter__", "lease"),
    ("lakekeeper_dagster.engine.protocol.lease", "TableLease.__exit__", "lease"),
    ("lakekeeper_dagster.engine.protocol.recovery", "recover_table", "recovery check"),  # called by `exclusive`
    ("lakekeeper_dagster.engine.ops.compaction", "refuse_leftovers", "recovery check"),
    # Only at top level (the snapshot before planning, the staged output): inside another step it is that step's.
    ("lakekeeper_dagster.engine.fs.storage", "Storage.list_data_files", "listing"),
    ("lakekeeper_dagster.engine.ops.batch", "stage", "write"),
    ("lakekeeper_dagster.engine.ops.batch", "path_fingerprints", "verify"),
    ("lakekeeper_dagster.engine.ops.run", "CompactionRun.ensure_backup", "backup"),
    ("lakekeeper_dagster.engine.hive.backup", "add_partitions", "backup"),  # called as `backups.add_partitions`
    ("lakekeeper_dagster.engine.ops.batch", "guard_swap", "re-list"),
    ("lakekeeper_dagster.engine.protocol.commit", "finish_swap", "swap"),  # called by `swap_unit`
    ("lakekeeper_dagster.engine.ops.batch", "commit_swapped", "commit (backup location, cache refresh, stats)"),
    ("lakekeeper_dagster.engine.ops.compaction", "finish_run", "finish run"),
    ("lakekeeper_dagster.engine.protocol.journal", "Journal.start", "journal"),
    ("lakekeeper_dagster.engine.protocol.journal", "Journal.record", "journal"),
    ("lakekeeper_dagster.engine.protocol.journal", "Journal.record_units", "journal"),
]


TOP_ONLY = {"listing"}
SITES_VARIABLE = "LK_BENCH_PY4J_SITES"  # set: round trips are also counted per engine call site (slower)


def _engine_site() -> str:
    """The innermost frame of the engine (or spark_resources) on the stack: `module:function:line`."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith(("lakekeeper_dagster", "spark_resources")):
            return f"{name.rsplit('.', 1)[-1]}:{frame.f_code.co_name}:{frame.f_lineno}"
        frame = frame.f_back
    return "elsewhere"


class StepClock:
    """Own time per step; `other` is the rest of the measured span (Python glue, unwrapped calls)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._stack: list[list[float]] = []  # per active call: [time spent in nested wrapped calls]
        self.round_trips: dict[str, int] = defaultdict(int)
        self._steps: list[str] = []  # the main thread's active steps, innermost last
        self.sites: dict[str, int] | None = defaultdict(int) if os.environ.get(SITES_VARIABLE) else None

    def wrap(self, function, step: str, top_only: bool = False):
        clock = self

        @functools.wraps(function)
        def timed(*args, **kwargs):
            if threading.current_thread() is not threading.main_thread():
                return function(*args, **kwargs)  # a worker's call: charged to the main thread's enclosing step
            if top_only and clock._stack:
                return function(*args, **kwargs)
            clock._stack.append([0.0])
            clock._steps.append(step)
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                clock._steps.pop()
                elapsed = time.perf_counter() - started
                nested = clock._stack.pop()[0]
                clock.seconds[step] += elapsed - nested
                clock.calls[step] += 1
                if clock._stack:
                    clock._stack[-1][0] += elapsed

        return timed

    def _count_round_trips(self) -> None:
        from py4j.clientserver import ClientServerConnection
        from py4j.java_gateway import GatewayConnection

        clock = self
        for connection in (ClientServerConnection, GatewayConnection):
            send = connection.send_command

            def counted(self, command, *args, _send=send, **kwargs):
                clock.round_trips[clock._steps[-1] if clock._steps else "other"] += 1
                if clock.sites is not None:
                    clock.sites[_engine_site()] += 1
                return _send(self, command, *args, **kwargs)

            connection.send_command = counted

    def install(self) -> None:
        self._count_round_trips()
        for module_name, path, step in STEPS:
            owner = importlib.import_module(module_name)
            *parents, attribute = path.split(".")
            for parent in parents:
                owner = getattr(owner, parent)
            if not hasattr(owner, attribute):
                raise AttributeError(f"{module_name}.{path} no longer exists: update benchmarks/steps.py")
            if not parents and not _called_through(importlib.import_module(module_name), attribute):
                raise AttributeError(
                    f"{module_name} neither calls {attribute} nor is it called as an attribute of that module: "
                    "update benchmarks/steps.py to patch the module that calls it"
                )
            setattr(owner, attribute, self.wrap(getattr(owner, attribute), step, top_only=step in TOP_ONLY))

    def report(self, total: float) -> dict[str, float]:
        steps = {k: round(v, 3) for k, v in sorted(self.seconds.items(), key=lambda kv: -kv[1])}
        steps["other"] = round(total - sum(self.seconds.values()), 3)
        return steps


def _calls(tree: ast.AST, name: str, bare: bool) -> bool:
    """Whether the source calls `name(...)` (bare) or `<something>.name(...)` (not bare)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if bare and isinstance(func, ast.Name) and func.id == name:
                return True
            if not bare and isinstance(func, ast.Attribute) and func.attr == name:
                return True
    return False


def _called_through(module, name: str) -> bool:
    """Patching `module.name` reaches the calls: the module calls the name itself, or defines it and the engine
    calls it as an attribute of the module (`backups.add_partitions(...)`)."""
    if _calls(ast.parse(inspect.getsource(module)), name, bare=True):
        return True
    if getattr(getattr(module, name), "__module__", None) != module.__name__:
        return False
    engine = Path(importlib.import_module("lakekeeper_dagster.engine").__file__).parent
    return any(_calls(ast.parse(path.read_text()), name, bare=False) for path in sorted(engine.rglob("*.py")))
