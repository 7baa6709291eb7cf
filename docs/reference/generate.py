"""The reference pages (cli.md, config.md, dagster.md, layout.md), generated from the code: the command line's
parser, the config's models, the code location's definitions and the modules' docstrings. `python
docs/reference/generate.py` writes them; with `--check` it writes nothing and exits 1 naming the pages that differ
from what the code generates."""

from __future__ import annotations

import argparse
import inspect
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
for folder in (HERE.parents[1], HERE):  # this checkout's packages (whichever the venv's install points at), render.py
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import dagster as dg
from layout import layout_page
from pydantic import BaseModel
from render import REGENERATE, code, default_text, description, field_rows, field_type, header, table, text

from lakekeeper_dagster.cli.app import build_parser
from lakekeeper_dagster.config import (
    CONFIG_ENV,
    DEFAULT_CONFIG_PATH,
    ENTRY,
    ENV_OVERRIDES,
    LakekeeperConfig,
    config_keys,
)
from lakekeeper_dagster.engine.hive.model import Column, TableInfo
from lakekeeper_dagster.surface.build import definitions_from_state
from lakekeeper_dagster.surface.state import LocationState
from lakekeeper_dagster.surface.tables import ManagedTables

# --- cli.md: the parser's actions, walked (not format_help, which wraps at the terminal's width) ---


def _takes(action: argparse.Action) -> str:
    """What the option takes: nothing (a flag, and what it sets), one of its choices, or a value."""
    if action.nargs == 0:  # a store_const flag says what it stores (--dry-run / --no-dry-run)
        const = f": sets `{action.dest}` to `{action.const!r}`" if type(action) is argparse._StoreConstAction else ""
        return f"flag{const}"
    value = action.metavar or (action.dest if not action.option_strings else action.dest.upper())
    if action.choices:
        value = "{" + ",".join(map(str, action.choices)) + "}"
    kind = f" ({action.type.__name__})" if isinstance(action.type, type) else ""
    return code(f"{value}{'' if action.nargs is None else ' ' + str(action.nargs)}") + kind


def _default(action: argparse.Action) -> str:
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS):
        return ""
    return code(repr(action.default))


def _actions(parser: argparse.ArgumentParser, top: bool) -> list[str]:
    """The parser's positional arguments and options (a subcommand's -h/--help left out: every command has it)."""
    shown = [a for a in parser._actions if not isinstance(a, argparse._SubParsersAction)]
    shown = [a for a in shown if top or not isinstance(a, argparse._HelpAction)]
    positional = [a for a in shown if not a.option_strings]
    options = [a for a in shown if a.option_strings]
    lines = []
    if positional:
        rows = [[code(a.dest), _takes(a), text(a.help)] for a in positional]
        lines += ["Positional arguments:", "", *table(["Argument", "Takes", "Help"], rows)]
    if options:
        rows = [
            [", ".join(map(code, a.option_strings)) + (" (required)" if a.required else ""), _takes(a), _default(a)]
            + [text(a.help)]
            for a in options
        ]
        lines += ["Options:", "", *table(["Option", "Takes", "Default", "Help"], rows)]
    for group in parser._mutually_exclusive_groups:
        names = ", ".join(code(a.option_strings[0]) for a in group._group_actions)
        lines += [
            f"Mutually exclusive: {names} ({'exactly one is required' if group.required else 'at most one'}).",
            "",
        ]
    return lines


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str | None, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand, in the parser's order."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            found += [(name, helps.get(name), sub) for name, sub in action.choices.items()]
    return found


def cli_page(parser: argparse.ArgumentParser | None = None) -> str:
    parser = parser or build_parser()
    commands = _subcommands(parser)
    lines = header("Command line reference", "the parser of `lakekeeper_dagster.cli.app`")
    lines += [text(parser.description), "", "Every command also takes `-h`, `--help`.", ""]
    lines += ["## Global options", "", "Given before the command.", "", *_actions(parser, top=True)]
    lines += ["## Commands", "", *table(["Command", "What it does"], ([code(n), text(h)] for n, h, _ in commands))]
    for name, help_text, sub in commands:
        lines += [f"### {name}", "", f"`{parser.prog} {name}`: {text(help_text)}", ""]
        lines += [text(sub.description), ""] if sub.description else []
        lines += _actions(sub, top=False) or ["No arguments.", ""]
    return "\n".join(lines).rstrip() + "\n"


# --- config.md: the walk of config.config_keys (the one `generate-config`'s template is made of) ---


def config_page(model: type[BaseModel] = LakekeeperConfig) -> str:
    keys = list(config_keys(model))
    lines = header("Configuration reference", "the models of `lakekeeper_dagster.config`")
    lines += [
        f"The YAML file: `--config-file`, else `${CONFIG_ENV}`, else `./{DEFAULT_CONFIG_PATH}`. Every key is optional "
        "(the defaults below); an unknown key is an error. `lakekeeper-dagster generate-config` writes a commented "
        "template of the same keys. `<DB.TABLE>` stands for a table's name, e.g. `mydb.events`.",
        "",
        "## Environment variables",
        "",
        *table(
            ["Variable", "Sets"],
            [[code(CONFIG_ENV), "the config file's path, when `--config-file` is not given"]]
            + [[code(variable), f"`{key}`, replacing the file's value"] for key, variable in ENV_OVERRIDES.items()],
        ),
    ]
    blocks = [()] + [k.path if k.block else (*k.path, ENTRY) for k in keys if k.block or k.entry]
    described = {k.path: k.field.description for k in keys}
    for block in blocks:
        inside = [k for k in keys if k.path[:-1] == block]
        title = code(".".join(block)) if block else "Top-level keys"
        intro = described.get(block) or described.get(block[:-1])
        lines += [f"## {title}", "", *([text(intro), ""] if intro else [])]
        rows = []
        for key in inside:
            env = ENV_OVERRIDES.get(".".join(key.path))
            about = description(key.field) + (f" Environment: `{env}` replaces it." if env else "")
            default = "(block below)" if key.block else default_text(key.field, key.default)
            if key.entry:
                default += ", entries: (block below)"
            rows.append([code(".".join(key.path)), field_type(key.field), default, about])
        lines += table(["Key", "Type", "Default", "Description"], rows)
    return "\n".join(lines).rstrip() + "\n"


# --- dagster.md: the definitions of a location over one representative table, per-table names as patterns ---

DATABASE, TABLE = "dbname", "tblname"  # the representative table's names, shown as <database> and <table>
MERGE_POLICY = {
    "partition_time": {"dt": "%Y%m%d"},
    "merge": {"into": "%Y%m", "older_than": "60d", "view": f"{TABLE}_all"},
}


def _location(overrides: dict[str, Any]) -> dg.Definitions:
    """The code location over one Parquet table partitioned by `dt`, with these `table_overrides`."""
    columns = (Column("id", "bigint"), Column("dt", "string"))
    info = TableInfo(DATABASE, TABLE, "EXTERNAL", "parquet", None, None, None, "file:/w/t", columns, ("dt",))
    config = LakekeeperConfig.model_validate({"table_overrides": overrides})
    return definitions_from_state(config, LocationState(ManagedTables(tables=[info]), read_at=None))


def _pattern(value: str) -> str:
    return value.replace(DATABASE, "<database>").replace(TABLE, "<table>")


def _names(location: dg.Definitions) -> set[str]:
    """Every definition's name (jobs, schedules, sensors, assets, checks), to tell which need the policy."""
    checks = {_check_name(spec) for spec, _ in _check_specs(location)}
    assets = {key.to_user_string() for key in location.resolve_asset_graph().get_all_asset_keys()}
    timed = [s.name for s in [*location.schedules, *location.sensors]]
    return {*(j.name for j in location.resolve_all_job_defs()), *timed, *assets, *checks}


def _check_specs(location: dg.Definitions) -> list[tuple[dg.AssetCheckSpec, str]]:
    """Every asset check, with the op that evaluates it: its asset's, or a check definition's of its own."""
    holders = [a for a in [*location.assets, *location.asset_checks] if isinstance(a, dg.AssetsDefinition)]
    return [(spec, holder.node_def.name) for holder in holders for spec in holder.check_specs]


def _check_name(spec: dg.AssetCheckSpec) -> str:
    return f"{spec.asset_key.to_user_string()}:{spec.name}"


def _op_config(op: dg.OpDefinition) -> type[BaseModel] | None:
    """The dg.Config class of an op's `config` parameter, if it takes one (read from the decorated function: Dagster
    keeps only the config schema it derived from the class)."""
    parameter = inspect.signature(op.compute_fn.decorated_fn, eval_str=True).parameters.get("config")
    return parameter.annotation if parameter else None


def _job_sections(location: dg.Definitions, only: Callable[[str], str]) -> list[str]:
    lines = []
    for job in sorted(location.resolve_all_job_defs(), key=lambda j: j.name):
        if job.name.startswith("__"):  # Dagster's hidden asset job
            continue
        lines += [f"### {code(_pattern(job.name))}", "", only(job.name) + text(_pattern(job.description or "")), ""]
        for op in sorted(job.graph.node_defs, key=lambda o: o.name):
            pool = f", pool {code(_pattern(op.pool))}" if getattr(op, "pool", None) else ""
            model = _op_config(op)
            lines += [f"Op {code(_pattern(op.name))}{pool}{'' if model else ': no run config'}.", ""]
            if model:
                rows = [[_pattern(cell) for cell in row] for row in field_rows(model)]
                lines += table(["Config field", "Type", "Default", "Description"], rows)
    return lines


def dagster_page() -> str:
    location, plain = _location({f"{DATABASE}.{TABLE}": MERGE_POLICY}), _names(_location({}))

    def only(name: str) -> str:
        return "" if name in plain else "*Only for a table whose merge policy sets `view` and `into`.* "

    lines = header("Dagster definitions reference", "the code location's definitions (`lakekeeper_dagster.surface`)")
    lines += [
        "The definitions of the code location, built over one managed table `<database>.<table>` partitioned by "
        f"`dt`, with `table_overrides.<database>.<table>: {_pattern(json.dumps(MERGE_POLICY))}`. A name with "
        "`<database>` and `<table>` is one definition per managed table (any character but a letter, digit or `_` "
        "replaced by `_`; tables whose names flatten alike get a hash in theirs).",
        "",
        "## Jobs",
        "",
        *_job_sections(location, only),
        "## Schedules",
        "",
    ]
    rows = [
        [code(s.name), code(s.job_name), code(s.cron_schedule), s.default_status.value]
        for s in sorted(location.schedules, key=lambda s: s.name)
    ]
    lines += table(["Schedule", "Job", "Cron", "Default status"], rows)
    rows = [
        [code(s.name), ", ".join(code(_pattern(j.name)) for j in (s.jobs if s.has_jobs else [])) or "-"]
        + [f"{s.minimum_interval_seconds} s", s.default_status.value, text(s.description)]
        for s in sorted(location.sensors, key=lambda s: s.name)
    ]
    lines += ["## Sensors", "", *table(["Sensor", "Jobs", "Minimum interval", "Default status", "Description"], rows)]
    checks = sorted(_check_specs(location), key=lambda c: (c[0].asset_key.to_user_string(), c[0].name))
    rows = [
        [code(spec.name), code(_pattern(spec.asset_key.to_user_string())), code(_pattern(op))]
        + ["yes" if spec.blocking else "no", only(_check_name(spec)) + text(_pattern(spec.description or ""))]
        for spec, op in checks
    ]
    lines += [
        "## Asset checks",
        "",
        "Op: the compaction op of the check's asset, which evaluates it on each run, or a check definition's own op, "
        "which runs it alone (a job's op may also log evaluations of it).",
        "",
        *table(["Check", "Asset", "Op", "Blocking", "Description"], rows),
    ]
    graph = location.resolve_asset_graph()
    nodes = sorted((graph.get(key) for key in graph.get_all_asset_keys()), key=lambda n: n.key.to_user_string())
    rows = [
        [code(_pattern(node.key.to_user_string()))]
        + [code(_pattern(node.partitions_def.name)) if node.partitions_def else "-"]
        + [only(node.key.to_user_string()) + text(_pattern(node.description or ""))]
        for node in nodes
    ]
    lines += ["## Assets", "", *table(["Asset", "Partitions", "Description"], rows)]
    return "\n".join(lines).rstrip() + "\n"


# --- the pages, written or checked ---


def pages() -> dict[str, Callable[[], str]]:
    return {"cli.md": cli_page, "config.md": config_page, "dagster.md": dagster_page, "layout.md": layout_page}


def stale(generated: dict[str, str], folder: Path = HERE) -> list[str]:
    """The pages whose committed text differs from `generated` (name -> text)."""
    return [name for name, body in generated.items() if _committed(folder / name) != body]


def _committed(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.exists() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the stale pages")
    args = parser.parse_args(argv)
    generated = {name: make() for name, make in pages().items()}
    if args.check:
        names = stale(generated)
        for name in names:
            print(f"docs/reference/{name} is stale: `{REGENERATE}` regenerates it", file=sys.stderr)
        return 1 if names else 0
    for name, body in generated.items():
        (HERE / name).write_text(body, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
