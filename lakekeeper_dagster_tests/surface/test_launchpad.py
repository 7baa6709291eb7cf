"""What a UI user meets when launching: the job a Materialize click, a backfill and the sensor run, each launchpad's
pre-filled run config, and run config that the schema or the engine refuses.

Through Dagster's GraphQL API on a workspace that serves the real code location in this process (real Spark, the
real metastore, real files), with the queries and the selectors the UI (dagster-webserver 1.13) sends.
"""

from __future__ import annotations

import logging
import os

import dagster as dg
import pytest
import yaml
from dagster._core.remote_origin import InProcessCodeLocationOrigin  # Dagster's own test workspace, as its tests use
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget
from dagster._daemon.backfill import execute_backfill_iteration
from dagster_graphql.test.utils import execute_dagster_graphql

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.surface.build import build_definitions, spark_resource_for
from lakekeeper_dagster.surface.metadata import PARTITION_TAG, RANGE_END_TAG, RANGE_START_TAG
from lakekeeper_dagster.surface.sensors.file_count import SENSOR_NAME
from lakekeeper_dagster_tests.surface.identity import asset_key, job_name, op_name, partitions_def_name
from lakekeeper_dagster_tests.tables import DATES, data_files, make_table, rows_of
from spark_resources.resource import HiveSparkResource

NAMES = [f"date={d['date']}" for d in DATES]
SERVED: list[dg.Definitions] = []  # the code location the workspace serves (set by the fixture)
QUEUED = {"run_coordinator": {"module": "dagster._core.run_coordinator", "class": "QueuedRunCoordinator"}}


@dg.definitions
def served_location() -> dg.Definitions:
    return SERVED[-1]


def config_for(metastore, database):
    return parse_config({"tables": {"databases": [database]}, "metastore": {"uri": metastore.uri}}, "t")


@pytest.fixture
def tables(spark, database, data_dir):
    make_table(spark, database, "ev", data_dir / "ev", partitions=DATES, files=3)
    make_table(spark, database, "flat", data_dir / "flat", files=3)
    return data_dir


@pytest.fixture
def workspace(spark, metastore, database, tables):
    """(process context, request context, location name) serving the code location; runs are only queued."""
    config = config_for(metastore, database)
    SERVED.append(build_definitions(config, spark, spark_resource_for(config, stop_at_teardown=False)))
    origin = LoadableTargetOrigin(module_name=__name__, attribute="served_location", working_directory=os.getcwd())
    with (
        dg.instance_for_test(overrides=QUEUED) as instance,
        WorkspaceProcessContext(instance, InProcessWorkspaceLoadTarget(InProcessCodeLocationOrigin(origin))) as process,
    ):
        context = process.create_request_context()
        (location,) = context.code_location_names
        assert context.get_code_location_error(location) is None
        yield process, context, location
    SERVED.pop()


def gql(context, query: str, variables: dict | None = None) -> dict:
    result = execute_dagster_graphql(context, query, variables or {})
    assert not result.errors, result.errors
    return result.data


def selector(location: str, job: str) -> dict:
    return {"repositoryLocationName": location, "repositoryName": "__repository__", "pipelineName": job}


ASSET_NODES = """
query ($keys: [AssetKeyInput!]!) {
  assetNodes(assetKeys: $keys) {
    assetKey { path } jobNames partitionDefinition { name }
    configField { isRequired }
    assetChecksOrError { ... on AssetChecks { checks { name jobNames } } }
  }
}"""
RESOURCES = """
query ($job: String!, $location: String!) {
  resourcesOrError(pipelineSelector: {pipelineName: $job, repositoryName: "__repository__",
                                      repositoryLocationName: $location}) {
    ... on ResourceConnection { resources { name configField { isRequired } } }
  }
}"""
PARTITION = """
query ($location: String!, $job: String!, $partition: String!, $keys: [AssetKeyInput!]!) {
  pipelineOrError(params: {pipelineName: $job, repositoryName: "__repository__", repositoryLocationName: $location}) {
    ... on Pipeline { partition(partitionName: $partition, selectedAssetKeys: $keys) {
      runConfigOrError { ... on PartitionRunConfig { yaml } }
      tagsOrError { ... on PartitionTags { results { key value } } } } }
  }
}"""
LAUNCH = """
mutation ($params: ExecutionParams!) {
  launchPipelineExecution(executionParams: $params) {
    __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message }
  }
}"""
BACKFILL = """
mutation ($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename ... on LaunchBackfillSuccess { backfillId } ... on PythonError { message }
  }
}"""
SENSOR = """
query ($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) { ... on Sensor { targets { pipelineName } } }
}
"""


def ui_job(node: dict) -> str:
    """The job the UI's Materialize button launches for one asset (LaunchAssetExecutionButton's getCommonJob with no
    preferred job, as on the asset page and in the catalog): the first of the asset node's `jobNames`."""
    return node["jobNames"][0]


def test_materialize_and_backfill_launch_the_tables_named_job(workspace, database):
    process, context, location = workspace
    context.instance.add_dynamic_partitions(partitions_def_name(database, "ev"), NAMES)  # as the sync leaves them
    keys = {t: {"path": asset_key(database, t).path} for t in ("ev", "flat")}
    nodes = {
        n["assetKey"]["path"][-1]: n for n in gql(context, ASSET_NODES, {"keys": list(keys.values())})["assetNodes"]
    }
    for table, node in nodes.items():
        assert "__ASSET_JOB" in node["jobNames"]  # Dagster's hidden job holds every asset ...
        assert ui_job(node) == job_name(database, table)  # ... but the button launches the table's own job
        assert node["configField"]["isRequired"] is False
        checks = node["assetChecksOrError"]["checks"]
        assert checks and all(ui_job(node) in check["jobNames"] for check in checks)  # the job runs the checks too
        # No required resource config either: the button launches without opening a launchpad first.
        resources = gql(context, RESOURCES, {"job": ui_job(node), "location": location})["resourcesOrError"]
        assert [r for r in resources["resources"] if r["configField"] and r["configField"]["isRequired"]] == []
    assert nodes["ev"]["partitionDefinition"]["name"] == partitions_def_name(database, "ev")

    # One partition: the partitions dialog fetches the partition's config and tags, then launches a single run.
    job = ui_job(nodes["ev"])
    ev = [keys["ev"]]
    partition = gql(context, PARTITION, {"location": location, "job": job, "partition": NAMES[0], "keys": ev})
    partition = partition["pipelineOrError"]["partition"]
    tags = partition["tagsOrError"]["results"]
    checks = [{"name": c["name"], "assetKey": keys["ev"]} for c in nodes["ev"]["assetChecksOrError"]["checks"]]
    params = {
        "mode": "default",
        "executionMetadata": {"tags": tags},
        "runConfigData": partition["runConfigOrError"]["yaml"],
        "selector": {**selector(location, job), "assetSelection": ev, "assetCheckSelection": checks},
    }
    launched = gql(context, LAUNCH, {"params": params})["launchPipelineExecution"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run = context.instance.get_run_by_id(launched["run"]["runId"])
    assert (run.job_name, run.tags[PARTITION_TAG], run.status) == (job, NAMES[0], dg.DagsterRunStatus.QUEUED)

    # Several partitions: a backfill of the named job's partition set (the UI's choice for a job that is not
    # hidden); the table's single-run backfill policy makes it one run over the range.
    backfill = {
        "selector": {
            "partitionSetName": f"{job}_partition_set",
            "repositorySelector": {"repositoryLocationName": location, "repositoryName": "__repository__"},
        },
        "assetSelection": ev,
        "partitionNames": NAMES,
        "fromFailure": False,
        "tags": [],
    }
    started = gql(context, BACKFILL, {"params": backfill})["launchPartitionBackfill"]
    assert started["__typename"] == "LaunchBackfillSuccess", started
    list(execute_backfill_iteration(process, logging.getLogger("backfill")))
    (run,) = context.instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": started["backfillId"]}))
    assert run.job_name == job
    assert (run.tags[RANGE_START_TAG], run.tags[RANGE_END_TAG]) == (NAMES[0], NAMES[-1])

    # The sensor targets the same jobs (its requests name them: test_observations).
    sensor = {"repositoryLocationName": location, "repositoryName": "__repository__", "sensorName": SENSOR_NAME}
    targets = gql(context, SENSOR, {"selector": sensor})["sensorOrError"]["targets"]
    assert sorted(t["pipelineName"] for t in targets) == [job_name(database, "ev"), job_name(database, "flat")]


CONFIG_SCHEMA = """
query ($selector: PipelineSelector!) {
  runConfigSchemaOrError(selector: $selector) {
    ... on RunConfigSchema {
      rootDefaultYaml
      rootConfigType { key }
      allConfigTypes { __typename key
        ... on CompositeConfigType { fields { name description isRequired defaultValueAsJson configTypeKey } } }
    }
  }
}"""

# Every job's op and what its launchpad opens with: the op config's defaults (Dagster leaves out the fields whose
# default is null, "not set"); rollback's and archive's table is required, on purpose: they always name their table.
OP_CONFIG = {
    "analyze_job": ("analyze_tables", {"ops": {"analyze_tables": {"config": {"tables": []}}}}),
    "rollback_job": ("rollback", {}),
    "cleanup_job": (
        "cleanup",
        {"ops": {"cleanup": {"config": {"delete_all_backups": False, "skip_trash": False, "dry_run": True}}}},
    ),
    "recover_job": ("recover", {}),
    "archive_job": ("archive", {"ops": {"archive": {"config": {"dry_run": True}}}}),  # opens as a dry run
    "retention_job": (
        "retention",
        {"ops": {"retention": {"config": {"dry_run": True, "force": False, "skip_trash": False}}}},
    ),
    "merge_job": ("merge", {"ops": {"merge": {"config": {"dry_run": True, "skip_trash": False}}}}),
    "sync_partitions_job": (None, {}),
    "observe_partitions_job": (None, {}),
}
NO_DEFAULT = {("rollback", "table"), ("archive", "table")}


def op_config_fields(schema: dict, op: str) -> list[dict]:
    types = {t["key"]: t for t in schema["allConfigTypes"]}

    def field(type_key: str, name: str) -> dict:
        return next(f for f in types[type_key]["fields"] if f["name"] == name)

    config = field(field(field(schema["rootConfigType"]["key"], "ops")["configTypeKey"], op)["configTypeKey"], "config")
    return types[config["configTypeKey"]]["fields"]


def test_every_launchpad_opens_with_its_op_config_and_no_resources(workspace, database):
    _, context, location = workspace
    compact = {"config": {"force": False, "sort_columns": [], "partitions": [], "resume": False}}
    expected = {
        job_name(database, t): (op_name(database, t), {"ops": {op_name(database, t): compact}}) for t in ("ev", "flat")
    }
    for job, (op, prefilled_yaml) in {**expected, **OP_CONFIG}.items():
        schema = gql(context, CONFIG_SCHEMA, {"selector": selector(location, job)})["runConfigSchemaOrError"]
        prefilled = yaml.safe_load(schema["rootDefaultYaml"]) or {}
        assert prefilled == prefilled_yaml, job  # no `resources:`: Spark's settings come from the location
        if op is None:
            continue
        for f in op_config_fields(schema, op):
            assert f["description"], (job, f["name"])
            if (op, f["name"]) in NO_DEFAULT:
                assert f["isRequired"], (job, f["name"])
            else:
                assert not f["isRequired"] and f["defaultValueAsJson"] is not None, (job, f["name"])


VALID = """
query ($selector: PipelineSelector!, $config: RunConfigData!) {
  isPipelineConfigValid(pipeline: $selector, mode: "default", runConfigData: $config) {
    __typename ... on RunConfigValidationInvalid { errors { message } }
  }
}"""


def test_the_launchpad_refuses_what_the_schema_expresses(workspace, database):
    _, context, location = workspace
    op = op_name(database, "ev")
    refused = {
        "rollback_job": ({"ops": {"rollback": {"config": {}}}}, "table"),
        job_name(database, "ev"): ({"ops": {op: {"config": {"force": "yes"}}}}, "force"),
        "analyze_job": ({"ops": {"analyze_tables": {"config": {"tables": "db.t"}}}}, "tables"),
        "cleanup_job": ({"ops": {"cleanup": {"config": {"older_then": "7d"}}}}, "older_then"),
        "sync_partitions_job": (
            {"resources": {"spark": {"config": {"metastore_uri": "thrift://elsewhere:1"}}}},
            "spark",
        ),
    }
    for job, (config, named) in refused.items():
        answer = gql(context, VALID, {"selector": selector(location, job), "config": config})["isPipelineConfigValid"]
        assert answer["__typename"] == "RunConfigValidationInvalid", (job, answer)
        assert any(named in e["message"] for e in answer["errors"]), (job, answer)
    # What the schema cannot express passes the launchpad and is refused by the run (next test).
    answer = gql(
        context,
        VALID,
        {"selector": selector(location, "rollback_job"), "config": {"ops": {"rollback": {"config": {"table": ""}}}}},
    )["isPipelineConfigValid"]
    assert answer["__typename"] == "PipelineConfigValidationValid"


def test_bad_run_config_fails_every_job_with_the_engines_message_before_spark(spark, metastore, database, tables):
    config = config_for(metastore, database)
    # A resource whose session cannot start (Kerberos principal without keytab): a run that touched Spark before
    # checking its config would fail with the Kerberos message instead.
    trap = HiveSparkResource(metastore_uri=metastore.uri, principal="nobody@EXAMPLE.COM", stop_at_teardown=False)
    defs = build_definitions(config, spark, trap)
    op = op_name(database, "ev")
    flat_op = op_name(database, "flat")
    before = {t: rows_of(spark, f"{database}.{t}") for t in ("ev", "flat")}
    files = [data_files(tables / "ev" / n) for n in NAMES] + [data_files(tables / "flat")]
    bad = [
        (job_name(database, "ev"), op, {"partitions": [""]}, "an entry of config.partitions is empty"),
        (job_name(database, "ev"), op, {"partitions": ["2024-01-01"]}, "is not a Hive partition name"),
        (job_name(database, "flat"), flat_op, {"sort_columns": ["nope"]}, "sort column(s) nope are not columns of"),
        (job_name(database, "flat"), flat_op, {"sort_columns": [" id"]}, "has leading or trailing whitespace"),
        ("analyze_job", "analyze_tables", {"database": ""}, "config.database is empty"),
        ("analyze_job", "analyze_tables", {"tables": ["nodot"]}, "must be of the form DATABASE.TABLE"),
        ("rollback_job", "rollback", {"table": ""}, "config.table is empty"),
        ("rollback_job", "rollback", {"table": f"{database}.ev", "partition": "x"}, "is not a Hive partition name"),
        ("cleanup_job", "cleanup", {"older_than": "soon"}, "config.older_than"),
        ("cleanup_job", "cleanup", {"dry_run": False}, "set older_than"),
        ("recover_job", "recover", {"table": "a.b.c"}, "must be of the form DATABASE.TABLE"),
        ("retention_job", "retention", {"table": ""}, "config.table is empty"),
        ("retention_job", "retention", {"table": f"{database}.ev", "older_than": "soon"}, "config.older_than"),
        ("retention_job", "retention", {"table": f"{database}.ev"}, f"table_overrides.{database}.ev.partition_time"),
        ("retention_job", "retention", {}, "no table named (config.table)"),
    ]
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions(partitions_def_name(database, "ev"), NAMES)
        for job, node, values, message in bad:
            partition = NAMES[0] if job == job_name(database, "ev") else None
            result = defs.resolve_job_def(job).execute_in_process(
                instance=instance,
                run_config={"ops": {node: {"config": values}}},
                partition_key=partition,
                raise_on_error=False,
            )
            assert not result.success, (job, values)
            failure = result.failure_data_for_node(node).user_failure_data
            assert failure is not None, (job, values)  # a dg.Failure with the engine's message, not a stack trace
            assert message in failure.description and "Kerberos" not in failure.description, failure.description
    assert {t: rows_of(spark, f"{database}.{t}") for t in ("ev", "flat")} == before
    assert [data_files(tables / "ev" / n) for n in NAMES] + [data_files(tables / "flat")] == files


def test_a_location_managing_no_table_loads_with_its_jobs(spark, metastore, database):
    defs = build_definitions(config_for(metastore, database), spark)
    jobs = sorted(j.name for j in defs.resolve_all_job_defs() if not j.name.startswith("__"))
    assert "rollback_job" in jobs and not any(j.startswith("Compact__") for j in jobs)
    assert defs.resolve_sensor_def(SENSOR_NAME).targets == []
