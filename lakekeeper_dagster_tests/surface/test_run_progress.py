"""Progress where a user looks: each partition's steps on a Dagster run's log while it works, and on the command
line a progress bar on a terminal, plain lines (no bar, no terminal codes) anywhere else."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys

import dagster as dg
import pytest

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.metadata import RANGE_END_TAG, RANGE_START_TAG
from lakekeeper_dagster_tests.surface.identity import asset_key, partitions_def_name
from lakekeeper_dagster_tests.tables import DATES, REPO, data_files, make_table, rows_of, run_cli_in_process

PARTITIONS = [f"date={d['date']}" for d in DATES]


def test_a_materialization_logs_each_partitions_progress(spark, metastore, database, data_dir):
    table = make_table(spark, database, "ev", data_dir / "ev", partitions=DATES, files=4)
    before = rows_of(spark, table)
    config = parse_config({"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}}, "t")
    location = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))

    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_def_name(database, "ev"), PARTITIONS)
        result = location.get_implicit_global_asset_job_def().execute_in_process(
            instance=instance,
            asset_selection=[asset_key(database, "ev")],
            tags={RANGE_START_TAG: PARTITIONS[0], RANGE_END_TAG: PARTITIONS[1]},  # both partitions, one batch
        )
        assert result.success
        logged = [e.user_message for e in instance.all_logs(result.run_id) if not e.is_dagster_event]  # context.log

    assert f"{table}: 2 partitions to compact, 8 files" in "\n".join(logged)
    assert any(line.startswith(f"{table}: batch 1/1 started: 2 partitions, ") for line in logged)
    for partition in PARTITIONS:
        assert len(data_files(data_dir / "ev" / partition)) == 1
        mine = [line for line in logged if line.startswith(f"{partition}: ")]
        steps = [line.split(": ")[1].split(" ")[0] for line in mine]
        assert steps == ["written", "verified", "swapped", "committed", "compacted"], mine
        assert mine[0].startswith(f"{partition}: written 4 -> 1 files, ") and mine[0].endswith(" s")
        assert mine[1] == f"{partition}: verified rows 200 -> 200, checksum match"
        assert mine[3].startswith(f"{partition}: committed files 4 -> 1, ") and mine[3].endswith("rows 200 -> 200")
    assert rows_of(spark, table) == before


def _cli_env(tmp_path, metastore) -> dict:
    (tmp_path / "lakekeeper.yaml").write_text("spark_submit:\n  master: local[1]\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "LAKEKEEPER_METASTORE_URI": metastore.uri}
    env.pop("LAKEKEEPER_CONFIG", None)
    return env


def test_the_cli_prints_plain_progress_lines_when_not_on_a_terminal(spark, database, data_dir, tmp_path):
    """The command run in this process, its output captured (not a terminal); the bar on a terminal is a
    subprocess on a pseudo-terminal below."""
    table = make_table(spark, database, "ev", data_dir, partitions=DATES, files=4)
    before = rows_of(spark, table)

    done = run_cli_in_process(spark, ["compact", "--table", table], tmp_path)

    assert done.returncode == 0, done.stderr[-3000:]
    for partition in PARTITIONS:  # the report on stdout, as documented
        assert f"{table} {partition}: COMPACTED files 4 -> 1, " in done.stdout
    progress = done.stderr.splitlines()
    assert f"{table}: 2 partitions to compact, 8 files" in done.stderr
    for partition in PARTITIONS:
        assert any(line.startswith(f"{partition}: written 4 -> 1 files, ") for line in progress)
        assert f"{partition}: verified rows 200 -> 200, checksum match" in progress
        assert any(line.startswith(f"{partition}: committed files 4 -> 1, ") for line in progress)
    assert "\x1b" not in done.stdout + done.stderr and "━" not in done.stderr  # no terminal codes, no bar
    assert rows_of(spark, table) == before


@pytest.mark.slow
def test_the_cli_shows_a_progress_bar_on_a_terminal(spark, metastore, database, data_dir, tmp_path):
    table = make_table(spark, database, "ev", data_dir, partitions=DATES, files=4)
    before = rows_of(spark, table)
    env = {**_cli_env(tmp_path, metastore), "TERM": "xterm-256color", "COLUMNS": "160"}
    leader, follower = pty.openpty()
    command = [sys.executable, "-m", "lakekeeper_dagster.cli", "compact", "--table", table]
    process = subprocess.Popen(
        command, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower
    )
    os.close(follower)
    output = b""
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 300)
            assert ready, output.decode(errors="replace")[-2000:]
            chunk = os.read(leader, 65536)
            if not chunk:
                break
            output += chunk
    except OSError:  # the terminal closes with the process
        pass
    os.close(leader)
    assert process.wait(timeout=300) == 0, output.decode(errors="replace")[-3000:]

    text = output.decode(errors="replace")
    assert "\x1b[" in text and "━" in text  # rich drew a bar, with terminal codes
    assert "2/2" in text  # partitions done of the partitions to compact
    for partition in PARTITIONS:
        assert f"{partition}: verified rows 200 -> 200, checksum match" in text
        assert f"{table} {partition}: COMPACTED files 4 -> 1, " in text  # the report, as documented
    assert rows_of(spark, table) == before
