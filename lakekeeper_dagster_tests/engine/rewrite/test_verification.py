"""What verification can see: rows counted from the files' own metadata, reads that cannot skip data whatever the
session says, and columns the table does not declare."""

from __future__ import annotations

import dataclasses

from lakekeeper_dagster.engine.ops.compaction import compact_table
from lakekeeper_dagster.engine.statuses import UnitStatus
from lakekeeper_dagster_tests.tables import DATES, OPTIONS, data_files, hidden_dirs, make_table, rows_of
from spark_resources.py4j import session_conf


def careless_cluster(spark, settings: dict[str, str]):
    """The session's SQL settings as a careless cluster default would have them, put back afterwards."""
    return session_conf(spark, settings)


def _on_disk(root) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def test_truncated_file_fails_the_unit_even_when_the_session_ignores_corrupt_files(spark, database, data_dir):
    table = make_table(spark, database, "ev", data_dir, partitions=DATES, files=4)
    before = rows_of(spark, table)
    victim = data_files(data_dir / "date=2024-01-01")[-1]  # not the first: the codec is read from that one
    victim.write_bytes(victim.read_bytes()[:-20])  # cut the footer off
    on_disk = _on_disk(data_dir)

    with careless_cluster(spark, {"spark.sql.files.ignoreCorruptFiles": "true"}):
        results = {r.partition: r for r in compact_table(spark, database, "ev", OPTIONS)}

    cut = results["date=2024-01-01"]
    assert cut.status == UnitStatus.FAILED
    assert "date=2024-01-01" in cut.reason and victim.name in cut.reason and "Nothing was changed" in cut.reason
    assert results["date=2024-01-02"].status == UnitStatus.COMPACTED
    assert _on_disk(data_dir / "date=2024-01-01") == {
        k.split("/", 1)[1]: v for k, v in on_disk.items() if k.startswith("date=2024-01-01/")
    }
    assert not [d for d in hidden_dirs(data_dir) if "staging" in d]
    spark.catalog.refreshTable(table)
    kept = sorted(tuple(r) for r in spark.table(table).where("`date` = '2024-01-02'").collect())
    assert kept == [r for r in before if r[3] == "2024-01-02"]


def test_case_sensitive_session_does_not_null_a_column_written_in_upper_case(spark, database, data_dir):
    spark.sql(
        f"CREATE EXTERNAL TABLE `{database}`.ev (id BIGINT, v STRING) STORED AS PARQUET LOCATION '{data_dir.as_uri()}'"
    )
    spark.range(0, 40, numPartitions=4).selectExpr("id AS ID", "cast(id AS string) AS v").write.mode("append").parquet(
        data_dir.as_uri()
    )
    table = f"{database}.ev"
    before = rows_of(spark, table)
    assert before[1] == (1, "1")

    with careless_cluster(spark, {"spark.sql.caseSensitive": "true"}):
        (result,) = compact_table(spark, database, "ev", OPTIONS)

    assert (result.status, result.rows_before, result.rows_after) == (UnitStatus.COMPACTED, 40, 40)
    assert len(data_files(data_dir)) == 1
    assert rows_of(spark, table) == before  # ids kept, not read as null by a case-sensitive match


def _table_over_wider_files(spark, database: str, data_dir) -> str:
    """Files with id, v, n, extra under a table that declares id, v, n (as after REPLACE COLUMNS)."""
    spark.range(0, 30, numPartitions=3).selectExpr(
        "id", "cast(id AS string) AS v", "cast(id % 7 AS int) AS n", "id * 10 AS extra"
    ).write.mode("append").parquet(f"{data_dir.as_uri()}/date=2024-01-01")
    spark.sql(
        f"CREATE EXTERNAL TABLE `{database}`.ev (id BIGINT, v STRING, n INT) PARTITIONED BY (`date` STRING) "
        f"STORED AS PARQUET LOCATION '{data_dir.as_uri()}'"
    )
    spark.sql(f"ALTER TABLE `{database}`.ev ADD PARTITION (`date`='2024-01-01')")
    return f"{database}.ev"


def test_files_with_an_undeclared_column_are_refused(spark, database, data_dir):
    table = _table_over_wider_files(spark, database, data_dir)
    before = rows_of(spark, table)
    on_disk = _on_disk(data_dir)

    (result,) = compact_table(spark, database, "ev", OPTIONS)

    assert result.status == UnitStatus.FAILED, result.reason
    assert "date=2024-01-01" in result.reason and "extra" in result.reason
    assert "drop_undeclared_columns" in result.reason
    assert _on_disk(data_dir) == on_disk and hidden_dirs(data_dir) == []
    assert rows_of(spark, table) == before
    assert all("extra" in spark.read.parquet(str(f)).columns for f in data_files(data_dir / "date=2024-01-01"))


def test_undeclared_column_is_dropped_when_configured(spark, database, data_dir, caplog):
    table = _table_over_wider_files(spark, database, data_dir)
    before = rows_of(spark, table)

    options = dataclasses.replace(OPTIONS, drop_undeclared_columns=True)
    (result,) = compact_table(spark, database, "ev", options)

    assert (result.status, result.rows_after, result.dropped_columns) == (UnitStatus.COMPACTED, 30, ["extra"])
    assert "dropping column(s)" in caplog.text and "extra" in caplog.text
    assert rows_of(spark, table) == before
    (output,) = data_files(data_dir / "date=2024-01-01")
    assert spark.read.parquet(str(output)).columns == ["id", "v", "n"]


def test_input_file_gone_before_the_read_fails_the_unit_even_when_the_session_ignores_missing_files(
    spark, database, data_dir, monkeypatch
):
    table = make_table(spark, database, "ev", data_dir, files=4)
    files = data_files(data_dir)
    before = rows_of(spark, table)
    monkeypatch.setenv("LAKEKEEPER_FAULT", "drop-input-file")  # another writer deletes a file meanwhile

    with careless_cluster(spark, {"spark.sql.files.ignoreMissingFiles": "true"}):
        (result,) = compact_table(spark, database, "ev", OPTIONS)

    (gone,) = set(files) - set(data_files(data_dir))  # only the deleted one is gone; nothing written, nothing moved
    assert result.status == UnitStatus.FAILED
    assert gone.name in result.reason and "the original files are untouched" in result.reason
    assert hidden_dirs(data_dir) == []
    monkeypatch.delenv("LAKEKEEPER_FAULT")
    assert len(rows_of(spark, table)) == len(before) - 50
