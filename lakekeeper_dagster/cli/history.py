"""`lakekeeper-dagster history [--table D.T] [--since 7d] [--run RUN] [--json]`: the records every operation appended
to the history table (`history.table`), oldest first, then their totals per table and operation; records a failed
write left pending are written first.
`lakekeeper-dagster diff --table D.T [--run RUN] [--verify] [--json]`: what that run changed per partition."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from lakekeeper_dagster.cli.common import open_spark
from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.fs.storage import Storage
from lakekeeper_dagster.engine.hive.history_table import read_rows
from lakekeeper_dagster.engine.hive.model import split_table_name
from lakekeeper_dagster.engine.ops.cleanup import parse_duration
from lakekeeper_dagster.engine.ops.diff import diff_run, render_diff
from lakekeeper_dagster.engine.plan.thresholds import human_bytes
from lakekeeper_dagster.engine.protocol.history import flush, iso_utc
from lakekeeper_dagster.engine.statuses import Operation, UnitState


def _pair(before: Any, after: Any, show: Callable[[Any], str] = str) -> str:
    if before is None and after is None:
        return "-"
    return " -> ".join(show(v) if v is not None else "?" for v in (before, after))


def render_history(rows: list[dict]) -> str:
    """One line per record: when, run, operation, table and partition, status, figures before -> after, backup,
    reason."""
    lines = []
    for r in rows:
        checksum = "-"
        if r["checksum_before"] is not None:
            checksum = "equal" if r["checksum_before"] == r["checksum_after"] else "changed"
        files, rows = _pair(r["files_before"], r["files_after"]), _pair(r["rows_before"], r["rows_after"])
        lines.append(
            f"{r['started_at']} {r['run_id']} {r['operation']} {r['table_name']} "
            f"{r['partition_name'] or '(whole table)'}: {r['status']}, files {files}"
            f", {_pair(r['bytes_before'], r['bytes_after'], human_bytes)}, rows {rows}"
            f", checksum {checksum}, {r['seconds']:.1f}s"
            + (f", backup {r['backup_table']}" if r["backup_table"] else "")
            + f", by {r['dagster_run_id'] and 'dagster run ' + r['dagster_run_id'] or r['os_user']}@{r['host']}"
            + (f": {r['reason']}" if r["reason"] else "")
        )
    return "\n".join(lines)


# The operations whose records change the files a scan of their units opens, and the state of a unit they changed.
TOTALED = {Operation.COMPACT: UnitState.COMMITTED, Operation.ARCHIVE: UnitState.COMMITTED,
           Operation.ROLLBACK: UnitState.COMMITTED, Operation.MERGE: UnitState.MERGED}  # fmt: skip


def render_totals(rows: list[dict]) -> str:
    """What the records shown did, per table and operation (compact, archive, rollback, merge): the units changed,
    each counted once (its files and bytes before its first record shown, after its last), and the files a full
    scan of them opens and their bytes before -> after."""
    units: dict[tuple[str, str], dict[str | None, list]] = {}
    for r in rows:  # oldest first
        if TOTALED.get(r["operation"]) != r["status"] or r["files_before"] is None or r["files_after"] is None:
            continue
        first_and_last = units.setdefault((r["table_name"], r["operation"]), {}).setdefault(r["partition_name"], [r, r])
        first_and_last[1] = r
    lines = []
    for (table, operation), changed in sorted(units.items()):
        before = sum(first["files_before"] for first, _ in changed.values())
        after = sum(last["files_after"] for _, last in changed.values())
        bytes_before = sum(first["bytes_before"] or 0 for first, _ in changed.values())
        bytes_after = sum(last["bytes_after"] or 0 for _, last in changed.values())
        fewer = f" ({before / after:.1f}x fewer)" if 0 < after < before else ""
        lines.append(
            f"{table} {operation}: {len(changed)} unit(s), files {before:,} -> {after:,}{fewer}, "
            f"{human_bytes(bytes_before)} -> {human_bytes(bytes_after)}"
        )
    return "\n".join(["", "", "In all:", *lines]) if lines else ""  # after the records' lines, a blank line


def cmd_history(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    since = iso_utc(time.time() - parse_duration(args.since, "--since")) if args.since is not None else None
    if args.table is not None:
        split_table_name(args.table, "--table")
    spark = open_spark(config)
    sink = config.history_sink()
    flush(spark, Storage(spark), sink)
    database, table = split_table_name(sink.table, "history.table")
    rows = read_rows(spark, database, table, source=args.table, since=since, run_id=args.run)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print((render_history(rows) + render_totals(rows)) or f"no history records in {sink.table} for this selection")
    return 0


def cmd_diff(args: argparse.Namespace, config: LakekeeperConfig) -> int:
    database, table = split_table_name(args.table, "--table")
    spark = open_spark(config)
    sink = config.history_sink()
    flush(spark, Storage(spark), sink)
    diff = diff_run(spark, sink.table, database, table, args.run, verify=args.verify)
    print(json.dumps(diff.to_dict(), indent=2) if args.json else render_diff(diff))
    return 1 if args.verify and any(u.verified is False for u in diff.units) else 0


def add_history_parsers(sub: argparse._SubParsersAction) -> None:
    """The `history` and `diff` subcommands."""
    parser = sub.add_parser("history", help="what every operation did, per partition (the history table)")
    parser.add_argument("--table", help="only the records of DB.TABLE")
    parser.add_argument("--since", help="only runs started this recently: 7d, 12h, 30m")
    parser.add_argument("--run", help="only the records of this run id")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=cmd_history)
    diff = sub.add_parser("diff", help="what a compaction or archive run changed, per partition")
    diff.add_argument("--table", required=True, help="DB.TABLE")
    diff.add_argument("--run", help="this run id (default: the table's most recent compaction or archive)")
    diff.add_argument("--verify", action="store_true", help="re-count rows and checksums of both sides (reads data)")
    diff.add_argument("--json", action="store_true", help="machine-readable output")
    diff.set_defaults(func=cmd_diff)
