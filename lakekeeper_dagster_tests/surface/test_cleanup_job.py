"""cleanup is irreversible: the job opens as a dry run and a real run needs an age or an explicit confirmation; the
CLI lists what it will delete and asks on a terminal. Real instance, Spark, metastore, files and terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys

import dagster as dg
import pytest

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine.hive.backup import find_backups
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster_tests.surface.test_failures import assert_failed_with
from lakekeeper_dagster_tests.tables import OPTIONS, REPO, hidden_dirs, make_table, rows_of


@pytest.fixture
def compacted(spark, metastore, database, data_dir) -> tuple[dg.Definitions, str]:
    """A managed table compacted once (so it has a backup made seconds ago), and the code location."""
    table = make_table(spark, database, "t", data_dir / "t", files=3)
    compact_table(spark, database, "t", OPTIONS)
    config = parse_config({"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}}, "t")
    return build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False)), table


def test_cleanup_job_as_it_opens_only_lists(spark, compacted, database, data_dir):
    location, table = compacted
    (backup,) = find_backups(spark, database, table)
    with dg.instance_for_test() as instance:
        result = location.get_job_def("cleanup_job").execute_in_process(instance=instance)
        logged = "\n".join(e.user_message for e in instance.all_logs(result.run_id))
    assert result.success
    assert f"would drop {backup.qualified_name} (backup of {table})" in logged
    assert find_backups(spark, database, table) == [backup] and hidden_dirs(data_dir)


def test_a_real_cleanup_without_age_or_confirmation_fails_before_deleting(spark, compacted, database, data_dir):
    location, table = compacted
    backups_before, before = find_backups(spark, database, table), rows_of(spark, table)
    with dg.instance_for_test() as instance:
        result = location.get_job_def("cleanup_job").execute_in_process(
            instance=instance, run_config={"ops": {"cleanup": {"config": {"dry_run": False}}}}, raise_on_error=False
        )
    assert_failed_with(
        result,
        "cleanup",
        "cleanup with dry_run: false deletes backups irreversibly: set older_than (e.g. 7d) to delete only old "
        "backups, or delete_all_backups: true to delete every matching backup. Nothing was deleted.",
    )
    assert find_backups(spark, database, table) == backups_before and hidden_dirs(data_dir)
    assert rows_of(spark, table) == before
    (schedule,) = [s for s in location.schedules if s.name == "cleanup_old_backups"]
    (request,) = schedule.evaluate_tick(dg.build_schedule_context()).run_requests
    scheduled = request.run_config["ops"]["cleanup"]["config"]
    assert (scheduled["older_than"], scheduled["dry_run"]) == ("7d", False)

    with dg.instance_for_test() as instance:
        confirmed = {"dry_run": False, "delete_all_backups": True, "skip_trash": True}
        result = location.get_job_def("cleanup_job").execute_in_process(
            instance=instance, run_config={"ops": {"cleanup": {"config": confirmed}}}
        )
    assert result.success and find_backups(spark, database, table) == [] and not hidden_dirs(data_dir)
    assert rows_of(spark, table) == before


@pytest.mark.slow
def test_the_cli_lists_and_asks_on_a_terminal(spark, metastore, database, data_dir, tmp_path):
    """On a terminal, cleanup lists the backups and deletes nothing unless the answer is yes (exit 1 otherwise)."""
    table = make_table(spark, database, "t", data_dir / "t", files=3)
    compact_table(spark, database, "t", OPTIONS)
    (backup,) = find_backups(spark, database, table)
    (tmp_path / "lakekeeper.yaml").write_text("spark_submit:\n  master: local[1]\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "LAKEKEEPER_METASTORE_URI": metastore.uri}
    env.pop("LAKEKEEPER_CONFIG", None)
    leader, follower = pty.openpty()
    command = [sys.executable, "-m", "lakekeeper_dagster.cli", "cleanup", "--table", table, "--skip-trash"]
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    output = b""
    while b"type yes to confirm" not in output:
        ready, _, _ = select.select([leader], [], [], 300)
        assert ready, output.decode(errors="replace")[-2000:]
        output += os.read(leader, 65536)
    os.write(leader, b"no\n")
    assert process.wait(timeout=300) == 1
    try:
        while select.select([leader], [], [], 1)[0]:
            output += os.read(leader, 65536)
    except OSError:  # the terminal closes with the process
        pass
    os.close(leader)
    text = output.decode(errors="replace")
    assert f"would drop {backup.qualified_name} (backup of {table})" in text and "nothing was deleted" in text
    assert find_backups(spark, database, table) == [backup] and hidden_dirs(data_dir)
