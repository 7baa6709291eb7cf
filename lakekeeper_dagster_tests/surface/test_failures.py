"""Engine and resource errors reach the Dagster UI as the step's failure with the engine's message, not a stack
trace: on a real instance, real Spark, a real metastore and real files."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine.fs.locations import child
from lakekeeper_dagster.engine.hive.catalog import read_table
from lakekeeper_dagster.engine.protocol.journal import journal_root
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.translator import HiveTableTranslator
from lakekeeper_dagster_tests.tables import data_files, make_table, rows_of

RUN = "20240101T000000-abcdef"


@pytest.fixture
def location(spark, metastore, database, data_dir) -> dg.Definitions:
    make_table(spark, database, "t", data_dir / "t", files=3)
    config = parse_config({"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}}, "t")
    return build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False))


def assert_failed_with(result: dg.ExecuteInProcessResult, node: str, message: str) -> None:
    """The run failed at `node` with a `dg.Failure` whose description is exactly the engine's `message`."""
    assert not result.success
    failure = result.failure_data_for_node(node)
    assert failure.error.cls_name == "Failure" and failure.error.cause is None, failure.error.to_string()
    assert failure.user_failure_data.description == message


@pytest.mark.parametrize("through", ["recover_job", "materialization"])
def test_a_corrupt_journal_fails_the_run_with_the_engines_message(spark, location, database, data_dir, through):
    """A journal with no plan record (a StorageError): recovery, which every change starts with, refuses."""
    table = f"{database}.t"
    journal = data_dir / ".lakekeeper-t" / "journal" / RUN
    journal.mkdir(parents=True)
    (journal / "00000.json").write_text("{}")
    before, before_files = rows_of(spark, table), data_files(data_dir / "t")
    message = (
        f"journal {child(journal_root(read_table(spark, database, 't').location), RUN)} has no readable plan record, "
        "so the run it describes cannot be recovered automatically. Inspect its records and the table's hidden .lk- "
        "directories, then move it away."
    )
    with dg.instance_for_test() as instance:
        if through == "recover_job":
            result = location.get_job_def("recover_job").execute_in_process(
                instance=instance, run_config={"ops": {"recover": {"config": {"table": table}}}}, raise_on_error=False
            )
            node = "recover"
        else:
            key = HiveTableTranslator().asset_key(read_table(spark, database, "t"))
            result = location.get_implicit_global_asset_job_def().execute_in_process(
                instance=instance, asset_selection=[key], raise_on_error=False
            )
            node = f"hive__{database}__t"
    assert_failed_with(result, node, message)
    assert data_files(data_dir / "t") == before_files and rows_of(spark, table) == before
    assert (journal / "00000.json").read_text() == "{}"


def test_a_malformed_config_value_fails_the_run_with_the_engines_message(location, database, data_dir: Path):
    """A ConfigError from the launchpad's config: the run fails before touching anything."""
    with dg.instance_for_test() as instance:
        result = location.get_job_def("cleanup_job").execute_in_process(
            instance=instance,
            run_config={"ops": {"cleanup": {"config": {"table": f"{database}.t", "older_than": "7x"}}}},
            raise_on_error=False,
        )
    assert_failed_with(result, "cleanup", "config.older_than '7x' is not a duration like 7d, 12h, 30m or 2w")
    assert len(data_files(data_dir / "t")) == 3
