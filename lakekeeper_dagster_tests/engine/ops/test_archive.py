"""Cold archive on real Spark, metastore and files: old partitions recompressed snappy -> gzip with the same rows and
content, already-gzip ones (empty files included) skipped, a later compaction leaving them in gzip, refusals naming
the key, the dry run changing nothing, and a kill at a journal step followed by `recover`."""

from __future__ import annotations

import signal
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from lakekeeper_dagster.cli.compaction import dry_run_notes
from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine.errors import ConfigError
from lakekeeper_dagster.engine.hive.backup import find_backups
from lakekeeper_dagster.engine.ops.analyze import analyze_tables
from lakekeeper_dagster.engine.ops.archive import archive_table, plan_archive
from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.plan.partition_time import utc_now
from lakekeeper_dagster.engine.plan.thresholds import Thresholds
from lakekeeper_dagster.engine.policies import TablePolicies
from lakekeeper_dagster.engine.protocol.recovery import recover
from lakekeeper_dagster.engine.rewrite.footers import read_footers
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster_tests.tables import (
    DATES,
    OPTIONS,
    cli_spark_submit,
    data_files,
    hidden_dirs,
    make_table,
    rows_of,
    run_cli,
    run_cli_in_process,
    write_files,
)

TODAY = {"date": utc_now().strftime("%Y-%m-%d")}  # never archive-aged
POLICY = {"partition_time": {"date": "%Y-%m-%d"}, "archive": {"older_than": "30d"}}


def _codecs(spark, directory: Path) -> set[str]:
    footers = read_footers(spark, "parquet", [f"file://{p}" for p in data_files(directory)], str(directory))
    return {"+".join(f.codecs) for f in footers if f.rows}


def _state(root: Path) -> list[tuple[str, int, int]]:
    """Every file under the table's parent (data, hidden, journals) with its size and mtime."""
    return sorted(
        (str(p.relative_to(root.parent)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.parent.rglob("*")
    )


def _table(spark, database: str, root: Path) -> str:
    return make_table(spark, database, "ar", root, partitions=[*DATES, TODAY], files=5, codec="snappy")


def test_archive_recompresses_old_partitions_keeping_content_and_skips_them_after(spark, database, data_dir):
    root = data_dir / "ar"
    table = _table(spark, database, root)
    before = rows_of(spark, table)
    rule = TablePolicies.model_validate(POLICY).archive_rule(table)

    state = _state(root)
    plan = plan_archive(spark, database, "ar", rule)
    assert [c.partition for c in plan.candidates] == ["date=2024-01-01", "date=2024-01-02"]
    assert all(c.recompress and c.codecs == ("SNAPPY",) and c.files == 5 for c in plan.candidates)
    assert plan.newer == 1 and "date=2024-01-01 (ended 2024-01-02 00:00): 5 file(s)" in plan.lines()[0]
    assert plan.lines()[0].endswith("SNAPPY -> recompress to GZIP")
    assert _state(root) == state and find_backups(spark, database, table) == []  # the dry run changed nothing

    resolved, results = archive_table(spark, database, "ar", OPTIONS, rule)
    assert resolved.codec == "gzip"  # archive.codec unset: gzip for a Parquet table
    old = ["date=2024-01-01", "date=2024-01-02"]
    assert [(r.partition, r.status) for r in results] == [(name, UnitStatus.COMPACTED) for name in old]
    for r in results:
        assert (r.files_before, r.files_after, r.rows_before, r.rows_after) == (5, 1, 200, 200)
        assert r.checksum_matches and r.bytes_before > 0 and r.bytes_after > 0 and r.backup_table
    assert rows_of(spark, table) == before
    assert [_codecs(spark, root / f"date={d['date']}") for d in DATES] == [{"GZIP"}, {"GZIP"}]
    newest = root / f"date={TODAY['date']}"
    assert len(data_files(newest)) == 5 and _codecs(spark, newest) == {"SNAPPY"}  # newer: left alone

    _, again = archive_table(spark, database, "ar", OPTIONS, rule)  # already gzip: no endless rewrites
    assert [r.status for r in again] == [UnitStatus.SKIPPED, UnitStatus.SKIPPED]
    assert all("already gzip" in r.reason for r in again)

    # an ordinary compaction with a global codec leaves the archived partitions in gzip (the standing archive rule)
    # while it recompresses the newer one; a small file added to an archived partition is compacted into gzip
    write_files(spark, f"file://{root}/date=2024-01-02", 1000, 10, 2, "parquet", "snappy")
    added = rows_of(spark, table)
    config = parse_config({"codec": "snappy", "table_overrides": {table: POLICY}}, "test")
    options = replace(config.compaction_options(database, "ar", owner="test"), thresholds=OPTIONS.thresholds)
    compacted = {r.partition: r for r in compact_table(spark, database, "ar", options)}
    assert compacted["date=2024-01-01"].status == UnitStatus.SKIPPED
    assert compacted["date=2024-01-02"].status == UnitStatus.COMPACTED
    assert compacted[f"date={TODAY['date']}"].status == UnitStatus.COMPACTED
    assert [_codecs(spark, root / f"date={d['date']}") for d in DATES] == [{"GZIP"}, {"GZIP"}]
    assert _codecs(spark, newest) == {"SNAPPY"} and rows_of(spark, table) == added


def test_empty_files_do_not_make_an_archived_partition_look_uncompressed(spark, database, data_dir):
    root = data_dir / "ar"
    table = _table(spark, database, root)
    rule = TablePolicies.model_validate(POLICY).archive_rule(table)
    archive_table(spark, database, "ar", OPTIONS, rule)
    old = root / "date=2024-01-01"
    empty = spark.table(table).drop("date").limit(0)
    empty.coalesce(1).write.mode("append").option("compression", "snappy").parquet(f"file://{old}")  # a 0-row file
    assert len(data_files(old)) == 2
    before, state = rows_of(spark, table), _state(root)

    assert not any(c.recompress for c in plan_archive(spark, database, "ar", rule).candidates)
    _, again = archive_table(spark, database, "ar", OPTIONS, rule)
    assert [r.status for r in again] == [UnitStatus.SKIPPED, UnitStatus.SKIPPED]
    assert rows_of(spark, table) == before and [s for s in _state(root) if ".lakekeeper" not in s[0]] == [
        s for s in state if ".lakekeeper" not in s[0]
    ]


def test_archive_refuses_bad_policies_naming_the_key(spark, database, data_dir):
    table = _table(spark, database, data_dir / "ar")
    with pytest.raises(ConfigError, match=rf"table_overrides\.{table}\.partition_time"):
        TablePolicies.model_validate({"archive": {"older_than": "30d"}}).archive_rule(table)
    with pytest.raises(ConfigError, match=rf"table_overrides\.{table}\.archive\.older_than"):
        TablePolicies.model_validate({"partition_time": {"date": "%Y-%m-%d"}}).archive_rule(table)
    orc = make_table(spark, database, "arc", data_dir / "arc", fmt="orc", partitions=DATES, files=2)
    before, state = rows_of(spark, orc), _state(data_dir / "arc")
    gzip = TablePolicies.model_validate({**POLICY, "archive": {"older_than": "30d", "codec": "gzip"}})
    with pytest.raises(ConfigError, match=rf"table_overrides\.{orc}\.archive\.codec: unknown codec 'gzip' for orc"):
        archive_table(spark, database, "arc", OPTIONS, gzip.archive_rule(orc))
    with pytest.raises(ConfigError, match=r"--codec: unknown codec 'gzipp'"):
        TablePolicies.model_validate(POLICY).archive_rule(orc, codec="gzipp")
    assert rows_of(spark, orc) == before and _state(data_dir / "arc") == state
    assert not hidden_dirs(data_dir)


def test_flags_differing_from_the_standing_policy_or_a_global_codec_are_refused(spark, database, data_dir):
    root = data_dir / "ar"
    table = _table(spark, database, root)
    state, policies = _state(root), TablePolicies.model_validate(POLICY)
    with pytest.raises(ConfigError, match=rf"--older-than 60d differs from table_overrides\.{table}\.archive\.older"):
        policies.archive_rule(table, older_than="60d")
    assert policies.archive_rule(table, older_than="720h").cutoff <= utc_now()  # the same age: allowed
    zstd = policies.archive_rule(table, codec="zstd")  # the format decides the policy's codec: refused on the table
    with pytest.raises(ConfigError, match=rf"--codec zstd differs from table_overrides\.{table}\.archive\.codec"):
        plan_archive(spark, database, "ar", zstd)
    with pytest.raises(ConfigError, match=r"config\.codec zstd differs"):
        parse_config({"table_overrides": {table: POLICY}}, "t").archive_rule(
            database, "ar", None, "zstd", ("config.older_than", "config.codec")
        ).codec_of("parquet")
    assert plan_archive(spark, database, "ar", policies.archive_rule(table, codec="GZIP")).rule.codec == "gzip"
    timed = {"partition_time": POLICY["partition_time"]}
    flags = ("--older-than", "--codec")
    with pytest.raises(ConfigError, match=rf"codec is set \(snappy\).*table_overrides\.{table}\.archive\.older_than"):
        parse_config({"codec": "snappy", "table_overrides": {table: timed}}, "t").archive_rule(
            database, "ar", "30d", None, flags
        )
    alone = parse_config({"table_overrides": {table: timed}}, "t").archive_rule(database, "ar", "30d", "zstd", flags)
    assert plan_archive(spark, database, "ar", alone).rule.codec == "zstd"  # flags only, no global codec: allowed
    assert _state(root) == state


def test_ordinary_compaction_never_starts_a_recompression_for_the_archive(spark, database, data_dir):
    root = data_dir / "ar"
    table = _table(spark, database, root)
    compact_table(spark, database, "ar", OPTIONS)  # one snappy file per partition: nothing left for the size rule
    before, state = rows_of(spark, table), _state(root)
    config = parse_config({"table_overrides": {table: POLICY}}, "test")
    options = replace(config.compaction_options(database, "ar", owner="test"), thresholds=OPTIONS.thresholds)
    results = compact_table(spark, database, "ar", options)
    assert [r.status for r in results] == [UnitStatus.SKIPPED] * 3  # not rewritten to gzip behind archive's back
    assert [_codecs(spark, root / f"date={d['date']}") for d in DATES] == [{"SNAPPY"}, {"SNAPPY"}]
    assert rows_of(spark, table) == before and [s for s in _state(root) if ".lakekeeper" not in s[0]] == [
        s for s in state if ".lakekeeper" not in s[0]
    ]
    plans = analyze_tables(spark, [(database, "ar")], OPTIONS.thresholds, 3)
    (note, done) = dry_run_notes(config, plans, None)
    assert note.startswith(f"{table}: archive: the partitions ended before ") and note.endswith(
        f"a run rewrites are written in gzip (table_overrides.{table}.archive)"
    )
    assert done == "dry run: nothing was changed"

    # a compaction the size rule decides writes an archive-aged partition in the archive codec
    write_files(spark, f"file://{root}/date=2024-01-01", 1000, 20, 4, "parquet", "snappy")
    added = rows_of(spark, table)
    compacted = {r.partition: r.status for r in compact_table(spark, database, "ar", options)}
    assert compacted["date=2024-01-01"] == UnitStatus.COMPACTED and compacted["date=2024-01-02"] == UnitStatus.SKIPPED
    assert _codecs(spark, root / "date=2024-01-01") == {"GZIP"} and rows_of(spark, table) == added


def test_archive_fails_a_partition_with_an_unreadable_footer(spark, database, data_dir):
    root = data_dir / "ar"
    table = _table(spark, database, root)
    damaged = data_files(root / "date=2024-01-01")[0]
    damaged.write_bytes(damaged.read_bytes()[:40])  # truncated: no footer

    def listing() -> list[tuple[str, int, int]]:
        return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in (root / "date=2024-01-01").iterdir())

    state = listing()
    others = sorted(tuple(r) for r in spark.table(table).where("`date` <> '2024-01-01'").collect())
    _, results = archive_table(spark, database, "ar", OPTIONS, TablePolicies.model_validate(POLICY).archive_rule(table))
    by_partition = {r.partition: r for r in results}
    failed = by_partition["date=2024-01-01"]
    assert failed.status == UnitStatus.FAILED and "cannot be read" in failed.reason and str(damaged) in failed.reason
    assert by_partition["date=2024-01-02"].status == UnitStatus.COMPACTED
    assert listing() == state  # the damaged partition untouched
    spark.catalog.refreshTable(table)
    assert sorted(tuple(r) for r in spark.table(table).where("`date` <> '2024-01-01'").collect()) == others
    assert _codecs(spark, root / "date=2024-01-02") == {"GZIP"}


def test_recompression_rewrites_only_the_files_not_in_the_codec_and_the_small_ones(spark, database, data_dir):
    root = data_dir / "ar"
    table = _table(spark, database, root)
    rule = TablePolicies.model_validate(POLICY).archive_rule(table)
    archive_table(spark, database, "ar", OPTIONS, rule)
    old = root / "date=2024-01-01"
    (archived,) = data_files(old)
    write_files(spark, f"file://{old}", 1000, 10, 1, "parquet", "snappy")  # one late file in another codec
    (late,) = [p for p in data_files(old) if p != archived]
    before, mtime = rows_of(spark, table), archived.stat().st_mtime_ns
    smallest, largest = (
        min(archived.stat().st_size, late.stat().st_size),
        max(p.stat().st_size for p in (archived, late)),
    )
    block = 4 * largest  # both files large (left alone by the size rule), the late one rewritten into one file
    thresholds = Thresholds(block, 10.0, min_file_ratio=(smallest - 1) / block)
    _, results = archive_table(spark, database, "ar", replace(OPTIONS, thresholds=thresholds), rule)
    by_partition = {r.partition: r for r in results}
    assert by_partition["date=2024-01-02"].status == UnitStatus.SKIPPED
    done = by_partition["date=2024-01-01"]
    assert (done.status, done.files_before, done.files_after) == (UnitStatus.COMPACTED, 2, 2)
    assert done.rows_before == done.rows_after and done.checksum_matches
    assert archived.exists() and archived.stat().st_mtime_ns == mtime and not late.exists()  # the large gzip file kept
    assert _codecs(spark, old) == {"GZIP"} and rows_of(spark, table) == before


def test_an_orc_table_with_only_an_age_compacts_and_archives_in_zlib(spark, database, data_dir):
    root = data_dir / "aro"
    table = make_table(spark, database, "aro", root, fmt="orc", partitions=[*DATES, TODAY], files=2, codec="snappy")
    before = rows_of(spark, table)
    config = parse_config({"table_overrides": {table: POLICY}}, "test")
    options = replace(config.compaction_options(database, "aro", owner="test"), thresholds=OPTIONS.thresholds)
    results = compact_table(spark, database, "aro", options)  # archive.codec unset: zlib for ORC, not refused
    assert [r.status for r in results] == [UnitStatus.COMPACTED] * 3 and rows_of(spark, table) == before

    def codecs(directory: Path) -> set[str]:
        footers = read_footers(spark, "orc", [f"file://{p}" for p in data_files(directory)], str(directory))
        return {"+".join(f.codecs) for f in footers if f.rows}

    assert [codecs(root / f"date={d['date']}") for d in DATES] == [{"ZLIB"}, {"ZLIB"}]
    assert codecs(root / f"date={TODAY['date']}") == {"SNAPPY"}
    rule, again = archive_table(
        spark, database, "aro", options, config.policies_for(database, "aro").archive_rule(table)
    )
    assert rule.codec == "zlib" and [r.status for r in again] == [UnitStatus.SKIPPED] * 2
    assert rows_of(spark, table) == before


def test_targets_are_read_under_the_lease_after_recovery(spark, database, data_dir):
    root = data_dir / "ar"
    table = _table(spark, database, root)
    before, calls = rows_of(spark, table), []

    def dropping(units):  # the partition is dropped after the first listing, before the run holds the lease
        if not calls:
            spark.sql(f"ALTER TABLE {database}.ar DROP PARTITION (`date`='2024-01-02')")
        calls.append([u.partition for u in units])
        return units

    results = compact_table(spark, database, "ar", OPTIONS, select=dropping)
    assert "date=2024-01-02" in calls[0] and "date=2024-01-02" not in calls[-1]
    assert sorted(r.partition for r in results) == ["date=2024-01-01", f"date={TODAY['date']}"]
    assert len(data_files(root / "date=2024-01-02")) == 5  # no longer the table's: never rewritten
    assert rows_of(spark, table) == [r for r in before if r[3] != "2024-01-02"]


def _cli_config(path: Path, table: str) -> Path:
    config = path / "archive.yaml"
    config.write_text(yaml.safe_dump({"spark_submit": cli_spark_submit(), "table_overrides": {table: POLICY}}))
    return config


@pytest.mark.crash
@pytest.mark.slow
def test_cli_dry_run_then_a_kill_mid_archive_recovered_then_archived(spark, metastore, database, data_dir, tmp_path):
    root = data_dir / "ar"
    table = _table(spark, database, root)
    before, state = rows_of(spark, table), _state(root)
    config = ["--config-file", str(_cli_config(tmp_path, table))]

    missing = run_cli_in_process(
        spark, [*config, "archive", "--table", f"{database}.nope", "--older-than", ""], tmp_path
    )
    assert missing.returncode == 2 and "--older-than" in missing.stderr

    dry = run_cli_in_process(spark, [*config, "archive", "--table", table, "--dry-run"], tmp_path)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert f"{table} date=2024-01-01 (ended 2024-01-02 00:00): 5 file(s)" in dry.stdout
    assert "SNAPPY -> recompress to GZIP" in dry.stdout and "dry run: nothing was changed" in dry.stdout
    assert _state(root) == state

    fault = {"LAKEKEEPER_FAULT": "kill@swapping"}
    crashed = run_cli([*config, "archive", "--table", table], tmp_path, metastore.uri, fault)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    recover(spark, [(database, "ar")])
    assert rows_of(spark, table) == before
    assert not [d for d in hidden_dirs(data_dir) if "staging" in d]

    done = run_cli_in_process(spark, [*config, "archive", "--table", table], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{table} date=2024-01-02: ARCHIVED to gzip, files 5 -> 1" in done.stdout, done.stdout
    assert "rows 200 -> 200, checksum ok" in done.stdout
    assert rows_of(spark, table) == before
    assert [_codecs(spark, root / f"date={d['date']}") for d in DATES] == [{"GZIP"}, {"GZIP"}]
