"""The command line, run as a real subprocess against the test metastore, and the demo tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.demo.tables import create_demo_tables
from lakekeeper_dagster.engine.ops.analyze import analyze_tables
from lakekeeper_dagster_tests.tables import REPO


def run_cli(args: list[str], cwd: Path, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env_extra or {})}
    env.pop("LAKEKEEPER_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "lakekeeper_dagster.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_generate_config_refuses_to_overwrite(tmp_path):
    first = run_cli(["generate-config", "--output", "lk.yaml"], tmp_path)
    assert first.returncode == 0, first.stderr
    text = (tmp_path / "lk.yaml").read_text()
    assert "block_size_mb: 128" in text
    (tmp_path / "lk.yaml").write_text("block_size_mb: 64\n")
    second = run_cli(["generate-config", "--output", "lk.yaml"], tmp_path)
    assert second.returncode == 2 and "--force" in second.stderr
    assert (tmp_path / "lk.yaml").read_text() == "block_size_mb: 64\n"
    assert run_cli(["generate-config", "--output", "lk.yaml", "--force"], tmp_path).returncode == 0
    assert (tmp_path / "lk.yaml").read_text() == text


def test_bad_config_is_reported_with_key_and_file(tmp_path):
    (tmp_path / "lakekeeper.yaml").write_text("compaction_ratio_threshold: 0\n")
    result = run_cli(["analyze", "--table", "a.b"], tmp_path)
    assert result.returncode == 2
    assert "compaction_ratio_threshold" in result.stderr and "lakekeeper.yaml" in result.stderr


def test_unreachable_metastore_is_a_clear_error(tmp_path):
    from spark_resources.metastore import free_port

    result = run_cli(
        ["analyze", "--table", "a.b"], tmp_path, {"LAKEKEEPER_METASTORE_URI": f"thrift://127.0.0.1:{free_port()}"}
    )
    assert result.returncode == 2
    assert "is not reachable" in result.stderr and "metastore start" in result.stderr


def test_analyze_json_through_the_cli(spark, metastore, database, data_dir, tmp_path):
    spark.range(0, 600, numPartitions=6).selectExpr("id", "id % 2 AS k").write.mode("overwrite").partitionBy("k").orc(
        data_dir.as_uri()
    )
    spark.sql(
        f"CREATE EXTERNAL TABLE {database}.o (id BIGINT) PARTITIONED BY (k BIGINT) STORED AS ORC "
        f"LOCATION '{data_dir.as_uri()}'"
    )
    spark.sql(f"MSCK REPAIR TABLE {database}.o")
    (tmp_path / "lakekeeper.yaml").write_text(yaml.safe_dump({"metastore": {"uri": metastore.uri}, "block_size_mb": 1}))
    result = run_cli(["analyze", "--database", database, "--json"], tmp_path, {"LAKEKEEPER_METASTORE_URI": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    (plan,) = json.loads(result.stdout)
    assert plan["status"] == "NEEDS COMPACTION"
    assert [(p["partition"], p["file_count"], p["target_files"]) for p in plan["partitions"]] == [
        ("k=0", 6, 1),
        ("k=1", 6, 1),
    ]
    assert plan["partitions"][0]["threshold_bytes"] == 1024 * 1024 / 10


def test_demo_tables_match_the_runbook(spark, database):
    names = create_demo_tables(spark, database)
    plans = analyze_tables(spark, [tuple(n.split(".")) for n in names], parse_config({}, "t").thresholds(), 3)
    assert [(p.table, p.status, p.file_count) for p in plans] == [
        ("lakekeeper_flat", "NEEDS COMPACTION", 500),
        ("lakekeeper_events", "NEEDS COMPACTION", 600),
        ("lakekeeper_events_2p", "NEEDS COMPACTION", 900),
    ]
    counts = [spark.table(n).count() for n in names]
    assert counts == [300_000, 300_000, 450_000]
    # Every column of the files matches the table's declared type (a count alone reads no column).
    amounts = spark.table(names[0]).selectExpr("sum(amount)", "count(distinct event_type)", "max(ts)").first()
    assert amounts[1] == 4 and amounts[0] > 0 and amounts[2] is not None
    assert [p.partition for p in plans[2].partitions][:2] == ["date=2024-01-01/ref=DE", "date=2024-01-01/ref=FR"]
    distinct_ids = spark.table(names[1]).selectExpr("count(distinct id)", "min(id)", "max(id)").first()
    assert tuple(distinct_ids) == (300_000, 0, 299_999)
    # Idempotent: a second run over them recreates them cleanly (smaller, which also shows the old files are gone).
    create_demo_tables(spark, database, scale=0.01)
    assert [spark.table(n).count() for n in names] == [3_000, 3_000, 4_500]


def test_compact_rollback_cleanup_through_the_cli(spark, database, data_dir, tmp_path):
    from lakekeeper_dagster_tests.tables import data_files, make_table, rows_of, run_cli_in_process

    def run(args: list[str]):  # in this process, on the test session: what the commands do and print is tested
        return run_cli_in_process(spark, args, tmp_path)

    table = make_table(spark, database, "ev", data_dir, partitions=[{"date": "2024-01-01"}], files=4)
    before = rows_of(spark, table)
    partition_dir = data_dir / "date=2024-01-01"

    dry = run(["compact", "--table", table, "--dry-run", "--codec", "zstd"])
    assert dry.returncode == 0 and "NEEDS COMPACTION" in dry.stdout and "nothing was changed" in dry.stdout
    assert "a run also recompresses the partitions marked OK" in dry.stdout  # what the report cannot see
    assert len(data_files(partition_dir)) == 4

    done = run(["compact", "--table", table, "--analyze-stats", "--codec", "zstd"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{table} date=2024-01-01: COMPACTED files 4 -> 1" in done.stdout
    assert [p.name.endswith(".zstd.parquet") for p in data_files(partition_dir)] == [True]
    assert "rows 200 -> 200, checksum ok" in done.stdout and "backup __bkp_ev_" in done.stdout
    assert rows_of(spark, table) == before

    refused = run(["compact", "--table", f"{database}.missing"])
    assert refused.returncode == 2 and "does not exist" in refused.stderr

    assert run(["recover", "--table", table]).stdout.strip() == "nothing to recover"
    back = run(["rollback", "--table", table])
    assert back.returncode == 0 and "restored from __bkp_ev_" in back.stdout
    assert len(data_files(partition_dir)) == 4 and rows_of(spark, table) == before

    run(["compact", "--table", table])
    listing = run(["cleanup", "--table", table, "--dry-run"])
    assert listing.returncode == 0 and "would drop" in listing.stdout
    gone = run(["cleanup", "--table", table, "--skip-trash"])
    assert gone.returncode == 0 and "irreversible" in gone.stdout and "deleted" in gone.stdout
    assert rows_of(spark, table) == before
