"""Configuration: Lakekeeper's keys, validation errors naming key and file, YAML honoured unless a flag is given."""

from __future__ import annotations

from typing import get_args

import pytest
import yaml
from pydantic import BaseModel

from lakekeeper_dagster.cli.app import build_parser, config_from_args
from lakekeeper_dagster.config import LakekeeperConfig, config_template, load_config, parse_config
from lakekeeper_dagster.engine.errors import ConfigError

pytestmark = pytest.mark.pure


def write(tmp_path, data) -> str:
    path = tmp_path / "lakekeeper.yaml"
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return str(path)


def test_defaults_match_lakekeeper(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LAKEKEEPER_CONFIG", raising=False)
    monkeypatch.delenv("LAKEKEEPER_METASTORE_URI", raising=False)
    config = load_config()
    assert config.block_size_mb == 128
    assert config.compaction_ratio_threshold == 10.0
    assert config.backup_prefix == "__bkp"
    assert config.dry_run is False
    assert config.metastore.uri == "thrift://127.0.0.1:9083"


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"block_size_mb": 0}, "block_size_mb"),
        ({"compaction_ratio_threshold": 0}, "compaction_ratio_threshold"),
        ({"compaction_ratio_threshold": -1.5}, "compaction_ratio_threshold"),
        ({"compaction_ratio_threshold": float("inf")}, "compaction_ratio_threshold"),
        ({"block_size_mb": 10**29}, "block_size_mb"),
        ({"block_size_mb": 32 * 1024 + 1}, "block_size_mb"),
        ({"block_size_mb": "big"}, "block_size_mb"),
        ({"blok_size_mb": 64}, "blok_size_mb: unknown key"),
        ({"spark_submit": {"executor_memroy": "4g"}}, "spark_submit.executor_memroy: unknown key"),
        ({"spark_submit": {"deploy_mode": "both"}}, "spark_submit.deploy_mode"),
        ({"log_level": "LOUD"}, "log_level"),
        ({"sensor": {"min_files": 1}}, "sensor.min_files"),
        ({"sensor": {"max_runs_per_tick": 0}}, "sensor.max_runs_per_tick"),
        ({"sensor": {"quiet_hours": ["8-18"]}}, "sensor.quiet_hours: Value error, quiet hours '8-18': expected HH:MM"),
        ({"sensor": {"quiet_hours": ["06:00-06:00"]}}, "sensor.quiet_hours: Value error, quiet hours '06:00-06:00'"),
        ({"sensor": {"timezone": "Mars/Olympus"}}, "sensor.timezone: Value error, unknown time zone 'Mars/Olympus'"),
        ({"sensor": {"max_mb_per_hour": 0}}, "sensor.max_mb_per_hour"),
        ({"table_overrides": {"db.t": {"priority": 0}}}, "table_overrides.db.t.priority"),
        ({"table_overrides": {"db.t": {"min_fils": 5}}}, "table_overrides.db.t.min_fils: unknown key"),
        ({"observation": {"cron_schedule": "hourly"}}, "observation.cron_schedule"),
        ({"batching": {"concurrent_jobs": 0}}, "batching.concurrent_jobs"),
        ({"batching": {"max_partitions": 0}}, "batching.max_partitions"),
        (
            {"table_overrides": {"db.t": {"retention": {"older_than": "90d"}, "merge": {"view": "t_all"}}}},
            "table_overrides.db.t: Value error, retention.older_than and merge are both set: retention drops",
        ),
    ],
)
def test_bad_values_name_the_key_and_the_file(tmp_path, data, fragment):
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert fragment in str(error.value)
    assert path in str(error.value)


def test_not_a_mapping_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="must hold a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path, "a: [1,\n"))


def test_missing_explicit_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(str(tmp_path / "nope.yaml"))


def test_yaml_dry_run_is_honoured_unless_a_flag_is_given(tmp_path):
    path = write(tmp_path, {"dry_run": True, "block_size_mb": 64})
    args = build_parser().parse_args(["--config-file", path, "analyze", "--table", "a.b"])
    config = config_from_args(args)
    assert config.dry_run is True
    assert config.block_size_mb == 64
    args = build_parser().parse_args(["--config-file", path, "analyze", "--table", "a.b", "--block-size", "256"])
    assert config_from_args(args).block_size_mb == 256
    args = build_parser().parse_args(["--config-file", path, "analyze", "--table", "a.b", "--block-size", "0"])
    with pytest.raises(ConfigError, match="command-line flags"):
        config_from_args(args)


def test_env_overrides_metastore_uri_and_config_path(tmp_path, monkeypatch):
    path = write(tmp_path, {"metastore": {"uri": "thrift://h:1"}})
    monkeypatch.setenv("LAKEKEEPER_CONFIG", path)
    monkeypatch.delenv("LAKEKEEPER_METASTORE_URI", raising=False)
    assert load_config().metastore.uri == "thrift://h:1"
    monkeypatch.setenv("LAKEKEEPER_METASTORE_URI", "thrift://other:2")
    assert load_config().metastore.uri == "thrift://other:2"


def _models(model: type[BaseModel]) -> list[type[BaseModel]]:
    """The model and every settings block below it (fields typed as a model, or as a dict or list of models)."""
    found = [model]
    for field in model.model_fields.values():
        for candidate in (field.annotation, *get_args(field.annotation)):
            if isinstance(candidate, type) and issubclass(candidate, BaseModel) and candidate not in found:
                found += [m for m in _models(candidate) if m not in found]
    return found


def test_template_is_valid_and_every_key_is_known():
    config = parse_config(yaml.safe_load(config_template()), "template")
    assert config.block_size_mb == 128
    assert config.spark_submit.enabled is False


def test_the_generated_template_holds_exactly_the_defaults(monkeypatch):
    monkeypatch.delenv("LAKEKEEPER_METASTORE_URI", raising=False)
    config = parse_config(yaml.safe_load(config_template()), "template")
    assert config.model_dump() == LakekeeperConfig().model_dump()
    # Strings are quoted, so editing the cron to `*/15 * * * *` keeps it a string (unquoted, YAML reads an alias).
    edited = config_template().replace('"0 * * * *"', '"*/15 * * * *"')
    assert parse_config(yaml.safe_load(edited), "template").observation.cron_schedule == "*/15 * * * *"


def test_every_key_is_described_and_in_the_template():
    models = _models(LakekeeperConfig)
    assert {m.__name__ for m in models} == {
        "LakekeeperConfig",
        "BatchSettings",
        "TableSelection",
        "MetastoreSettings",
        "SparkSubmitSettings",
        "SensorThresholds",
        "ObservationSettings",
        "TableOverride",
        "RetentionPolicy",
        "ArchivePolicy",
        "MergePolicy",
        "HistorySettings",
    }
    template = config_template()
    for model in models:
        for name, field in model.model_fields.items():
            assert (field.description or "").strip(), f"{model.__name__}.{name} has no description"
            assert f"{name}:" in template, f"{model.__name__}.{name} is not in the template"


def test_table_selection_globs():
    config = parse_config({"tables": {"databases": ["d"], "include": ["d.ev*"], "exclude": ["d.*_tmp"]}}, "x")
    assert config.tables.matches("d", "events")
    assert not config.tables.matches("d", "events_tmp")
    assert not config.tables.matches("d", "users")


def test_min_files_per_table_override():
    config = parse_config({"sensor": {"min_files": 20}, "table_overrides": {"db.big": {"min_files": 500}}}, "t")
    assert (config.min_files_for("db", "big"), config.min_files_for("db", "other")) == (500, 20)


def test_priority_per_table_override():
    config = parse_config({"table_overrides": {"db.hot": {"priority": 12.5}}}, "t")
    assert (config.priority_for("db", "hot"), config.priority_for("db", "other")) == (12.5, 1.0)
