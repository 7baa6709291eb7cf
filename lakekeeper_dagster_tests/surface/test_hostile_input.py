"""Hostile input, class by class (names, partition specs, table kinds, config values and files, URIs, flags, Dagster
run config): each case asserts the exit code (or the run's failure), the message, no traceback, and that nothing
changed on disk or in the metastore.

The command line runs in-process (`cli.main`) against the test session's metastore: validation happens before the
Spark session is even asked for, and a command that gets past it reuses the running session. Only the unprivileged
user's run is a subprocess (another uid needs another process)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import dagster as dg
import pytest
import yaml

from lakekeeper_dagster.cli import app as cli
from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine.hive.catalog import read_table
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.translator import HiveTableTranslator
from lakekeeper_dagster_tests.tables import DATES, REPO, make_table, rows_of
from spark_resources.metastore import free_port

DB = "hostile_db"  # the module's database; `DB` in a case's argv is replaced by it
NOBODY = 65534
TRACES = ("Traceback", "py4j", "at org.", "at java.", "Py4JJavaError")


@pytest.fixture(scope="module")
def tables(spark, metastore, tmp_path_factory) -> Path:
    """One database for the whole module: a partitioned table that needs compaction, a flat one, a view and a
    managed table. Every case must leave all of it exactly as it was."""
    root = tmp_path_factory.mktemp("hostile")
    spark.sql(f"DROP DATABASE IF EXISTS {DB} CASCADE")
    spark.sql(f"CREATE DATABASE {DB}")
    make_table(spark, DB, "ev", root / "ev", partitions=DATES, files=3, rows=30)
    make_table(spark, DB, "flat", root / "flat", files=3, rows=30)
    spark.sql(f"CREATE VIEW {DB}.vw AS SELECT 1 AS x")
    spark.sql(f"CREATE TABLE {DB}.mg (id BIGINT) STORED AS PARQUET")
    yield root
    spark.sql(f"DROP DATABASE IF EXISTS {DB} CASCADE")


def files_of(root: Path) -> list[tuple]:
    """Every file and directory under `root`: name, size, modification time."""
    return sorted((str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*"))


def state(spark, root: Path) -> tuple:
    """What a refused command must not change: every file and directory (name, size, mtime), the metastore's
    tables and partitions, and the rows of the data tables."""
    files = files_of(root)
    names = sorted(r.tableName for r in spark.sql(f"SHOW TABLES IN {DB}").collect())
    partitions = [r[0] for r in spark.sql(f"SHOW PARTITIONS {DB}.ev").collect()]
    return files, names, partitions, rows_of(spark, f"{DB}.ev"), rows_of(spark, f"{DB}.flat")


@pytest.fixture
def run(spark, tables, tmp_path, monkeypatch, capsys):
    """`run(argv, config=None, env=None)` -> (exit code, stdout + stderr): the CLI in-process, in a directory whose
    lakekeeper.yaml manages the module's database (so an empty selection would mean every table of it)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LAKEKEEPER_CONFIG", raising=False)
    touched = {k: spark.conf.get(k, None) for k in parse_config({}, "t").spark_conf()}

    def _run(argv: list[str], config: dict | None = None, env: dict | None = None) -> tuple[int, str]:
        settings = config if config is not None else {"tables": {"databases": [DB]}}
        (tmp_path / "lakekeeper.yaml").write_text(yaml.safe_dump(settings))
        for key, value in (env or {}).items():
            monkeypatch.setenv(key, value)
        capsys.readouterr()
        try:
            code = cli.main([a.replace("DB", DB) for a in argv])
        except SystemExit as stop:  # argparse's own usage errors
            code = stop.code
        out = capsys.readouterr()
        return code, out.out + out.err

    yield _run
    for key, value in touched.items():  # the CLI's session conf must not leak into the other tests
        if value is not None and spark.conf.isModifiable(key):
            spark.conf.set(key, value)


def assert_refused(spark, tables, result: tuple[int, str], code: int, message: str, before: tuple) -> None:
    """The exit code, the message, no stack trace, every file as it was (the metastore and the rows: checked by
    each test at its end, as they cost Spark jobs)."""
    got, output = result
    assert got == code, output
    assert message in output, output
    assert not any(trace in output for trace in TRACES), output
    assert files_of(tables) == before[0]


EMPTY_OR_PADDED = [
    (["compact", "--table", ""], "--table is empty ('')"),
    (["compact", "--tables", ""], "--tables is empty ('')"),
    (["compact", "--tables", "DB.ev,"], "an entry of --tables is empty ('')"),
    (["compact", "--tables", "DB.ev, DB.flat"], "an entry of --tables ' hostile_db.flat' has leading or trailing"),
    (["compact", "--database", ""], "--database is empty ('')"),
    (["compact", "--database", "   "], "--database is empty ('   ')"),
    (["compact", "--database", "DB "], "--database 'hostile_db ' has leading or trailing whitespace"),
    (["compact", "--table", "DB.ev "], "--table 'hostile_db.ev ' has leading or trailing whitespace"),
    (["compact", "--table", "DB.ev\n"], "--table 'hostile_db.ev\\n' has leading or trailing whitespace"),
    (["compact", "--table", "DB.e\tv"], "--table 'hostile_db.e\\tv' contains control character(s) '\\t'"),
    (["compact", "--table", "DB.ev\x00x"], "contains control character(s) '\\x00'"),
    (["compact", "--table", "DB. ev"], "--table 'hostile_db. ev' must be of the form DATABASE.TABLE"),
    (["compact", "--table", "ev"], "--table 'ev' must be of the form DATABASE.TABLE"),
    (["compact", "--table", "DB.ev.x"], "must be of the form DATABASE.TABLE"),
    (["compact", "--table", "DB.ev", "--partition", ""], "--partition is empty ('')"),
    (["compact", "--table", "DB.ev", "--partition", "date=2024-01-01 "], "has leading or trailing whitespace"),
    (["compact", "--table", "DB.ev", "--partition", "date=2024-01-01\n"], "has leading or trailing whitespace"),
    (["compact", "--table", "DB.ev", "--partition", "2024-01-01"], "is not a Hive partition name"),
    (["compact", "--table", "DB.ev", "--partition", "date=x//"], "is not a Hive partition name"),
    (["compact", "--table", "DB.ev", "--sort-columns", ""], "--sort-columns is empty"),
    (["compact", "--table", "DB.ev", "--sort-columns", "id,"], "a column of --sort-columns is empty"),
    (["analyze", "--table", ""], "--table is empty"),
    (["analyze", "--tables", " ", "--json"], "--tables is empty"),
    (["recover", "--table", ""], "--table is empty"),
    (["recover", "--database", ""], "--database is empty"),
    (["rollback", "--table", ""], "--table is empty"),
    (["rollback", "--table", "DB.ev", "--partition", ""], "--partition is empty"),
    (["rollback", "--table", "DB.ev", "--backup", ""], "--backup is empty"),
    (["cleanup", "--database", "DB", "--older-than", ""], "--older-than is empty ('')"),
    (["cleanup", "--database", "DB", "--older-than", " "], "--older-than is empty (' ')"),
    (["cleanup", "--database", "DB", "--older-than", "7d "], "--older-than '7d ' has leading or trailing"),
    (["cleanup", "--database", "DB", "--older-than", "7d\n"], "--older-than '7d\\n' has leading or trailing"),
    (["cleanup", "--database", "DB", "--older-than", "7x"], "--older-than '7x' is not a duration"),
    (["cleanup", "--database", "DB", "--older-than=-1d"], "--older-than '-1d' is not a duration"),
    (["cleanup", "--database", "DB", "--older-than", "\u0667d"], "is not a duration"),  # a digit, not ASCII
    (["cleanup", "--database", ""], "--database is empty"),
    (["cleanup", "--table", ""], "--table is empty"),
    (["--config-file", "", "analyze", "--table", "DB.ev"], "--config-file is empty"),
    (["generate-config", "--output", ""], "--output is empty"),
]


def test_an_empty_padded_or_malformed_value_is_refused(spark, tables, run):
    """An empty value (an unset shell variable) selected everything; a padded one was trimmed."""
    before = state(spark, tables)
    for argv, message in EMPTY_OR_PADDED:
        assert_refused(spark, tables, run(argv), 2, message, before)
    assert state(spark, tables) == before


def test_bad_values_are_refused_before_the_metastore_is_asked(spark, tables, run):
    """Flag validation comes first: with no metastore to reach, the message is still the flag's."""
    before = state(spark, tables)
    env = {"LAKEKEEPER_METASTORE_URI": f"thrift://127.0.0.1:{free_port()}"}
    assert_refused(spark, tables, run(["compact", "--table", ""], env=env), 2, "--table is empty", before)
    assert_refused(spark, tables, run(["analyze", "--table", "DB.ev"], env=env), 2, "is not reachable", before)
    assert state(spark, tables) == before


def test_names_the_config_gives_are_checked_too(spark, tables, run):
    before = state(spark, tables)
    for settings, message in [
        ({"tables": {"tables": [""]}}, "tables.tables"),
        ({"tables": {"databases": [" "]}}, "tables.databases"),
        ({"tables": {"tables": ["DB.ev "]}}, "has leading or trailing whitespace"),
        ({"tables": {"tables": ["noqualifier"]}}, "must be of the form DATABASE.TABLE"),
    ]:
        settings = yaml.safe_load(yaml.safe_dump(settings).replace("DB", DB))
        assert_refused(spark, tables, run(["compact"], config=settings), 2, message, before)
    assert state(spark, tables) == before


def test_config_files_and_uris_that_cannot_be_used_are_messages(spark, tables, run, tmp_path):
    """A directory, a binary file, a port that is not a number or out of range (file or environment)."""
    before = state(spark, tables)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(bytes(range(256)))
    nul = tmp_path / "nul.yaml"
    nul.write_bytes(b"block_size_mb: 1\x00\n")
    for argv, message in [
        (["--config-file", str(tmp_path), "analyze", "--table", "DB.ev"], "is a directory"),
        (["--config-file", str(binary), "analyze", "--table", "DB.ev"], "is not a text (UTF-8 YAML) file"),
        (["--config-file", str(nul), "analyze", "--table", "DB.ev"], "is not valid YAML"),
        (["--config-file", str(tmp_path / "none.yaml"), "analyze", "--table", "DB.ev"], "does not exist"),
    ]:
        assert_refused(spark, tables, run(argv), 2, message, before)
    for uri in ("thrift://127.0.0.1:abc", "thrift://127.0.0.1:99999", "thrift://127.0.0.1:-1", "http://h:9083"):
        file_case = run(["analyze", "--table", "DB.ev"], config={"metastore": {"uri": uri}})
        assert_refused(spark, tables, file_case, 2, f"metastore.uri: Value error, metastore URI {uri!r}", before)
        env_case = run(["analyze", "--table", "DB.ev"], env={"LAKEKEEPER_METASTORE_URI": uri})
        assert_refused(spark, tables, env_case, 2, "invalid configuration in LAKEKEEPER_METASTORE_URI", before)
        assert "1 to 65535" in env_case[1]
    assert state(spark, tables) == before


def test_half_a_kerberos_pair_or_a_missing_keytab_stops_the_cli(spark, tables, run, tmp_path):
    """Items 21 and 22: keytab without principal (or the reverse) ran without Kerberos; a missing keytab reached
    spark-submit's JVM. Each stops before the metastore or Spark is touched."""
    before = state(spark, tables)
    keytab = tmp_path / "etl.keytab"
    keytab.write_bytes(b"\x05\x02")
    for submit, message in [
        ({"keytab": str(keytab)}, "a Kerberos keytab is set (spark_submit.keytab, or the Dagster resource's"),
        ({"principal": "etl@CORP.EXAMPLE"}, "a Kerberos principal is set (spark_submit.principal, or the"),
        ({"principal": "etl@CORP.EXAMPLE", "keytab": str(tmp_path / "gone.keytab")}, "gone.keytab (spark_submit"),
        ({"principal": "etl@CORP.EXAMPLE", "keytab": str(keytab)}, "is not in keytab"),
    ]:
        result = run(["analyze", "--table", "DB.ev"], config={"spark_submit": submit})
        assert_refused(spark, tables, result, 2, message, before)
    assert state(spark, tables) == before


MISSING = [
    (["compact", "--table", "DB.missing"], "table hostile_db.missing does not exist"),
    (["compact", "--tables", "DB.ev,DB.missing"], "table hostile_db.missing does not exist"),
    (["compact", "--database", "nodb"], "database 'nodb' does not exist"),
    (["compact", "--table", "DB.ev", "--partition", "date=2099-01-01"], "partition 'date=2099-01-01' does not exist"),
    (["compact", "--table", "DB.flat", "--partition", "date=2024-01-01"], "hostile_db.flat is not partitioned"),
    (["analyze", "--table", "DB.missing", "--json"], "table hostile_db.missing does not exist"),
    (["analyze", "--tables", "DB.ev,DB.missing"], "table hostile_db.missing does not exist"),
    (["rollback", "--table", "DB.missing"], "hostile_db.missing does not exist"),
    (["recover", "--table", "DB.missing"], "table hostile_db.missing does not exist"),
]


def test_a_missing_table_or_partition_is_bad_input(spark, tables, run):
    """Exit 2 as the README says (compact exited 1, `analyze --json` 0); nothing is done for any table."""
    before = state(spark, tables)
    for argv, message in MISSING:
        result = run(argv)
        assert_refused(spark, tables, result, 2, message, before)
        if "--json" in argv:
            assert "[" not in result[1]  # no report a script could take for a result
    assert state(spark, tables) == before


def test_table_kinds_are_refused_with_exit_1_and_the_most_severe_code_wins(spark, tables, run):
    """A table refused for what it is exits 1; with a missing table in the same run, 1 still wins (the failure
    needs looking at), and every table's line is printed."""
    before = state(spark, tables)
    assert_refused(spark, tables, run(["compact", "--table", "DB.vw"]), 1, "cannot be compacted: view", before)
    assert_refused(spark, tables, run(["compact", "--table", "DB.mg"]), 1, "only EXTERNAL tables", before)
    both = run(["compact"], config={"tables": {"tables": [f"{DB}.missing", f"{DB}.vw"]}})
    assert_refused(spark, tables, both, 1, f"{DB}.missing: REFUSED: table {DB}.missing does not exist", before)
    assert f"{DB}.vw: REFUSED" in both[1]
    gone = run(["compact"], config={"tables": {"tables": [f"{DB}.missing"]}})
    assert_refused(spark, tables, gone, 2, f"{DB}.missing: REFUSED", before)
    report = run(["analyze"], config={"tables": {"tables": [f"{DB}.missing", f"{DB}.ev"]}})
    assert_refused(spark, tables, report, 2, "NEEDS COMPACTION", before)
    assert state(spark, tables) == before


def test_every_documented_exit_code(spark, tables, run, tmp_path):
    """0 success, 1 refused or failed, 2 bad input, 3 `metastore status` of a stopped metastore."""
    before = state(spark, tables)
    assert run(["analyze", "--table", "DB.ev", "--json"])[0] == 0
    assert run(["compact", "--table", "DB.ev", "--dry-run"])[0] == 0
    assert state(spark, tables) == before
    assert run(["compact", "--table", "DB.vw"])[0] == 1
    assert run(["compact", "--table", ""])[0] == 2
    assert run(["compact", "--no-such-flag"])[0] == 2  # argparse's own usage error
    stopped = {"metastore": {"uri": f"thrift://127.0.0.1:{free_port()}", "home": str(tmp_path / "ms")}}
    code, output = run(["metastore", "status"], config=stopped, env={"LAKEKEEPER_METASTORE_URI": ""})
    assert code == 3 and not any(trace in output for trace in TRACES), output


def test_dagster_run_config_values_are_refused_before_anything_starts(spark, tables, metastore):
    """The launchpad's empty or malformed values fail the run with the message (a dg.Failure, no stack trace);
    an empty recover table selected every managed table."""
    before = state(spark, tables)
    config = parse_config({"tables": {"databases": [DB]}, "metastore": {"uri": metastore.uri}}, "t")
    location = build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))
    info = read_table(spark, DB, "ev")
    asset = HiveTableTranslator().asset_key(info)
    cases = [
        ("analyze_job", "analyze_tables", {"database": ""}, "config.database is empty"),
        ("analyze_job", "analyze_tables", {"tables": [f"{DB}.ev "]}, "has leading or trailing whitespace"),
        ("rollback_job", "rollback", {"table": ""}, "config.table is empty"),
        ("rollback_job", "rollback", {"table": f"{DB}.ev", "partition": ""}, "config.partition is empty"),
        ("rollback_job", "rollback", {"table": f"{DB}.ev", "partition": "date"}, "is not a Hive partition name"),
        ("rollback_job", "rollback", {"table": f"{DB}.ev", "backup": " "}, "config.backup is empty"),
        ("recover_job", "recover", {"table": ""}, "config.table is empty"),
        ("recover_job", "recover", {"database": "\t"}, "config.database is empty"),
    ]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(HiveTableTranslator().partitions_def_name(info), ["date=2024-01-01"])
        for job, op, values, message in cases:
            result = location.get_job_def(job).execute_in_process(
                instance=instance, run_config={"ops": {op: {"config": values}}}, raise_on_error=False
            )
            failure = result.failure_data_for_node(op)
            assert failure.error.cls_name == "Failure", failure.error.to_string()
            assert message in failure.user_failure_data.description
        result = location.get_implicit_global_asset_job_def().execute_in_process(
            instance=instance,
            asset_selection=[asset],
            partition_key="date=2024-01-01",
            run_config={"ops": {f"hive__{DB}__ev": {"config": {"partitions": [""]}}}},
            raise_on_error=False,
        )
        failure = result.failure_data_for_node(f"hive__{DB}__ev")
        assert failure.error.cls_name == "Failure", failure.error.to_string()
        assert "an entry of config.partitions is empty" in failure.user_failure_data.description
    assert state(spark, tables) == before


def as_nobody(args: list[str], home: Path, metastore_uri: str) -> subprocess.CompletedProcess:
    """The CLI in a subprocess as user `nobody` (setpriv), HOME and TMPDIR in `home`."""
    (home / "lakekeeper.yaml").write_text("spark_submit:\n  master: local[1]\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "LAKEKEEPER_METASTORE_URI": metastore_uri}
    env.update(HOME=str(home), TMPDIR=str(home))
    env.pop("LAKEKEEPER_CONFIG", None)
    command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]
    command += [sys.executable, "-m", "lakekeeper_dagster.cli", *args]
    return subprocess.run(command, cwd=home, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to become another user")
def test_an_unprivileged_user_gets_messages_not_tracebacks(spark, metastore, tables):
    """A config file the user may not read, and a table location the user may read but not write: one
    message each naming the thing and what to do, no Python or Java stack, nothing changed."""
    base = Path(tempfile.mkdtemp(prefix="lk-nobody-"))  # not under pytest's tmp: that is private to root
    try:
        base.chmod(0o755)
        home = base / "home"
        home.mkdir()
        os.chown(home, NOBODY, NOBODY)
        secret = base / "secret.yaml"
        secret.write_text("block_size_mb: 1\n")
        secret.chmod(0o600)
        table = make_table(spark, DB, "ro", base / "ro", partitions=DATES, files=3, rows=30)
        before, rows = files_of(base), rows_of(spark, table)
        unreadable = as_nobody(["--config-file", str(secret), "analyze", "--table", table], home, metastore.uri)
        assert unreadable.returncode == 2, unreadable.stderr
        assert f"config file {secret} is not readable by this user (uid {NOBODY})" in unreadable.stderr
        compact = as_nobody(["compact", "--table", table], home, metastore.uri)  # no state directory possible
        output = compact.stdout + compact.stderr
        assert compact.returncode == 1, output[-3000:]
        assert f"{table}: REFUSED: could not create directory" in output and "permission denied" in output, output[
            -3000:
        ]
        assert not any(trace in output for trace in TRACES), output[-3000:]
        assert [f for f in files_of(base) if not f[0].startswith("home")] == [
            f for f in before if not f[0].startswith("home")
        ]
        assert rows_of(spark, table) == rows

        base.chmod(0o777)  # the state directory's parent writable, the table's directory not
        location = (base / "ro").as_uri().replace("file:///", "file:/")
        denied = as_nobody(["compact", "--table", table], home, metastore.uri)
        output = denied.stdout + denied.stderr
        assert denied.returncode == 1, output[-3000:]
        for date in DATES:  # each partition fails alone, before any Spark job
            name = f"date={date['date']}"
            assert f"{name}: FAILED: {table} partition {name}: user nobody may not write in {location}" in output
        assert not any(trace in output for trace in TRACES), output[-3000:]
        assert [f for f in files_of(base) if not f[0].startswith(("home", ".lakekeeper-"))] == [
            f for f in before if not f[0].startswith("home")
        ]
        assert rows_of(spark, table) == rows
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {DB}.ro")
        shutil.rmtree(base)
