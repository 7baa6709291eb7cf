"""The architecture, checked from the source (no Spark): the engine and the command line load no Dagster (the CLI's
`demo run` aside), the import graph of `lakekeeper_dagster` and `spark_resources` has no cycle, the layers import only
downwards (resources -> engine -> config -> the CLI and the Dagster surface, neither importing the other; the demo
above both), no private Dagster API is used, and no module grows past MAX_LINES."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("lakekeeper_dagster", "spark_resources")
MAX_LINES = 400


def _module_files() -> dict[str, Path]:
    """Every module of the two packages by dotted name (a package by its own name, for its __init__.py)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


MODULES = _module_files()


def _imported_names(module: str, source: str, is_package: bool = False) -> list[str]:
    """Every module name an `import` or `from ... import` anywhere in the source names (in functions, under
    TYPE_CHECKING too), relative imports resolved; `from m import x` yields `m.x` (a submodule or not) and `m`."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            names.append(source)
            names += [f"{source}.{alias.name}" for alias in node.names]
    return names


def _resolve(name: str) -> str | None:
    """The module of the two packages that `name` is or lies in (the longest known prefix), else None."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def _graph() -> dict[str, set[str]]:
    """module -> the modules of the two packages it imports (itself and the packages it lies in excluded)."""
    graph = {}
    for module, path in MODULES.items():
        names = _imported_names(module, path.read_text(), is_package=path.name == "__init__.py")
        targets = {_resolve(name) for name in names}
        graph[module] = {t for t in targets if t and t != module and not module.startswith(t + ".")}
    return graph


GRAPH = _graph()


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _dagster_loaded_by(script: str) -> dict:
    """Run `script` (which sets `imported`) in a fresh interpreter: the modules it imported, those that failed, and
    every `dagster`/`dagster_*` module then loaded."""
    report = textwrap.dedent(
        """
        import json, sys
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "dagster" or m.startswith("dagster_"))
        print(json.dumps({"imported": imported, "failed": failed, "dagster": loaded}))
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script) + report],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_engine_loads_no_dagster():
    """Every module of the engine imported in a fresh interpreter: no `dagster` or `dagster_*` module is loaded."""
    report = _dagster_loaded_by(
        """
        import importlib, pkgutil
        import lakekeeper_dagster.engine as engine
        failed = []
        modules = pkgutil.walk_packages(engine.__path__, engine.__name__ + ".", onerror=failed.append)
        imported = [m.name for m in modules]
        for name in imported:
            importlib.import_module(name)
        """
    )
    assert not report["failed"], report["failed"]
    expected = {m for m in MODULES if m.startswith("lakekeeper_dagster.engine.")}
    assert expected <= set(report["imported"]), expected - set(report["imported"])
    assert report["dagster"] == [], f"importing the engine loaded Dagster: {report['dagster'][:10]}"


def test_the_command_line_loads_no_dagster():
    """Every module of the CLI imported and its whole parser built (`--help` of every command) in a fresh
    interpreter: no Dagster module is loaded; only `demo run` imports the demo's Dagster run, when it runs."""
    report = _dagster_loaded_by(
        """
        import contextlib, importlib, io, pkgutil
        import lakekeeper_dagster.cli as cli
        failed = []
        modules = pkgutil.walk_packages(cli.__path__, cli.__name__ + ".", onerror=failed.append)
        imported = [m.name for m in modules]
        for name in imported:
            importlib.import_module(name)
        from lakekeeper_dagster.cli.app import build_parser
        parser = build_parser()
        commands = parser._subparsers._group_actions[0].choices
        for command in commands:
            with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
                parser.parse_args([command, "--help"])
        imported.extend(commands)
        """
    )
    assert not report["failed"], report["failed"]
    expected = {m for m in MODULES if m.startswith("lakekeeper_dagster.cli.")}
    assert expected <= set(report["imported"]), expected - set(report["imported"])
    assert {"compact", "history", "diff", "cluster", "merge"} <= set(report["imported"])
    assert report["dagster"] == [], f"the command line loaded Dagster: {report['dagster'][:10]}"


def test_the_import_graph_has_no_cycle():
    try:
        list(TopologicalSorter(GRAPH).static_order())
    except CycleError as error:
        cycle = error.args[1]
        pytest.fail(f"import cycle: {' -> '.join(reversed(cycle))}")


def test_the_graph_sees_imports_in_functions_and_relative_ones():
    """The checks are only as good as the graph: imports in functions, relative imports and names imported from
    a package that are its submodules all become edges."""
    source = textwrap.dedent(
        """
        from typing import TYPE_CHECKING
        from ..fs import storage
        if TYPE_CHECKING:
            from lakekeeper_dagster.engine.hive.model import TableInfo
        def f():
            from .guards import guard_swap
            import spark_resources.py4j
        """
    )
    names = _imported_names("lakekeeper_dagster.engine.protocol.swap", source)
    assert {_resolve(n) for n in names} - {None} == {
        "lakekeeper_dagster.engine.fs",
        "lakekeeper_dagster.engine.fs.storage",
        "lakekeeper_dagster.engine.hive.model",
        "lakekeeper_dagster.engine.protocol.guards",
        "spark_resources.py4j",
    }
    assert _resolve("pyspark.sql") is None
    assert "lakekeeper_dagster.engine.hive.backup" in GRAPH["lakekeeper_dagster.engine.ops.batch"]


def _violations(source_package: str, allowed) -> list[str]:
    return [
        f"{module} imports {target}"
        for module, targets in sorted(GRAPH.items())
        if _within(module, source_package)
        for target in sorted(targets)
        if not allowed(target)
    ]


def test_spark_resources_imports_nothing_of_lakekeeper_dagster():
    assert _violations("spark_resources", lambda t: not _within(t, "lakekeeper_dagster")) == []


CLI, SURFACE, DEMO = "lakekeeper_dagster.cli", "lakekeeper_dagster.surface", "lakekeeper_dagster.demo"
# The modules the Dagster code location loads (the definitions and the defs folder): the surface's entry points.
LOCATION = ("lakekeeper_dagster.definitions", "lakekeeper_dagster.defs")


def test_the_command_line_never_imports_the_dagster_surface():
    assert _violations(CLI, lambda t: not any(_within(t, p) for p in (SURFACE, *LOCATION))) == []


def test_the_dagster_surface_never_imports_the_command_line_or_the_demo():
    for package in (SURFACE, *LOCATION):
        assert _violations(package, lambda t: not any(_within(t, p) for p in (CLI, DEMO))) == []


def test_only_the_demo_run_bridges_the_command_line_and_the_dagster_surface():
    """The demo's tables and config (the CLI's `demo create`) import no surface; its run does, and only `demo run`
    imports it."""
    bridges = sorted(m for m, targets in GRAPH.items() if any(_within(t, SURFACE) for t in targets))
    assert [m for m in bridges if _within(m, DEMO)] == [f"{DEMO}.run"]
    assert sorted(m for m, targets in GRAPH.items() if f"{DEMO}.run" in targets) == [f"{CLI}.setup"]


def test_the_engine_imports_nothing_of_the_surface():
    engine = "lakekeeper_dagster.engine"
    assert _violations(engine, lambda t: _within(t, engine) or not _within(t, "lakekeeper_dagster")) == []


# The engine's layers as its docstring lists them (lakekeeper_dagster/engine/__init__.py): each imports only those
# before it and itself. The base modules import none of each other.
ENGINE_LAYERS = ("fs", "hive", "plan", "protocol", "rewrite", "ops", "settings")
ENGINE_BASE = ("errors", "statuses", "faults")


def _engine_layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["lakekeeper_dagster", "engine"] or len(parts) < 3:
        return None
    if parts[2] in ENGINE_BASE:
        return 0
    return ENGINE_LAYERS.index(parts[2]) + 1 if parts[2] in ENGINE_LAYERS else None


def test_the_engine_layers_import_only_downwards():
    upward = []
    for module, targets in sorted(GRAPH.items()):
        rank = _engine_layer(module)
        for target in sorted(targets):
            other = _engine_layer(target)
            if rank is None or other is None:
                continue
            if other > rank or (rank == other == 0 and module != target):
                upward.append(f"{module} imports {target}")
    assert upward == []


def test_no_private_dagster_api():
    private = []
    for module, path in MODULES.items():
        if not _within(module, "lakekeeper_dagster"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                underscored = [a.name for a in node.names if a.name.startswith("_")]  # `from dagster import _x`
                names = [node.module] + [f"{node.module}.{name}" for name in underscored]
            else:
                continue
            for name in names:
                parts = name.split(".")
                if parts[0].startswith("dagster") and any(p.startswith("_") for p in parts[1:]):
                    private.append(f"{module}:{node.lineno} imports {name}")
                    break  # one line per import statement
    assert private == [], "private Dagster API (use the public `dagster` names):\n" + "\n".join(private)


def test_no_module_is_over_the_size_limit():
    sizes = {m: len(p.read_text().splitlines()) for m, p in MODULES.items()}
    assert {m: n for m, n in sizes.items() if n > MAX_LINES} == {}, f"modules over {MAX_LINES} lines"
