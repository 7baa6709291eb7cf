"""The YAML configuration: Lakekeeper's keys with the same meaning, plus tables, metastore and sensors."""

from __future__ import annotations

import fnmatch
import os
from enum import Enum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from spark_resources.metastore import DEFAULT_URI
from spark_resources.session import hive_spark_conf
from spark_resources.settings import SparkSubmitSettings

DEFAULT_CONFIG_PATH = "lakekeeper.yaml"


class ConfigError(ValueError):
    """The configuration file or a setting in it is not valid."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class SizeStatistic(str, Enum):
    AVERAGE = "average"
    MEDIAN = "median"


class TableSelection(_Strict):
    """Which tables are managed: whole databases and/or named tables, filtered by glob patterns on `db.table`."""

    databases: list[str] = Field(default_factory=list)
    tables: list[str] = Field(default_factory=list)
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)

    def matches(self, database: str, table: str) -> bool:
        """True when `database.table` passes the include and exclude patterns."""
        name = f"{database}.{table}".lower()
        included = any(fnmatch.fnmatchcase(name, p.lower()) for p in self.include)
        return included and not any(fnmatch.fnmatchcase(name, p.lower()) for p in self.exclude)


class MetastoreSettings(_Strict):
    uri: str = DEFAULT_URI
    home: str = ".lakekeeper"
    warehouse_dir: str | None = None

    def resolved_warehouse_dir(self) -> str:
        """The warehouse directory as a URI (defaults to `<home>/warehouse`)."""
        if self.warehouse_dir:
            return self.warehouse_dir
        return (Path(self.home).absolute() / "warehouse").as_uri()


class SensorThresholds(_Strict):
    min_files: int = Field(default=2, ge=2)
    minimum_interval_seconds: int = Field(default=300, ge=1)
    max_runs_per_tick: int = Field(default=10, ge=1)
    max_partitions_per_run: int = Field(default=200, ge=1)
    failure_backoff_seconds: int = Field(default=3600, ge=0)
    max_observations_per_tick: int = Field(default=20000, ge=1)


class ObservationSettings(_Strict):
    """When the observation job runs on its schedule (the schedule is off until turned on)."""

    cron_schedule: str = Field(default="0 * * * *", pattern=r"^\s*(\S+\s+){4}\S+\s*$")


class BatchSettings(_Strict):
    """How a compaction run groups partitions: concurrent Spark write jobs, and how much one batch may stage."""

    concurrent_jobs: int = Field(default=4, ge=1, le=64)
    max_partitions: int = Field(default=100, ge=1)
    max_mb: int = Field(default=8192, ge=1)


class TableOverride(_Strict):
    min_files: int | None = Field(default=None, ge=2)


class LakekeeperConfig(_Strict):
    """Everything one YAML file can set."""

    block_size_mb: int = Field(default=128, gt=0)
    compaction_ratio_threshold: float = Field(default=10.0, gt=0)
    size_statistic: SizeStatistic = SizeStatistic.AVERAGE
    backup_prefix: str = Field(default="__bkp", min_length=1, pattern=r"^\w+$")
    dry_run: bool = False
    log_level: str = Field(default="INFO", pattern="^(DEBUG|INFO|WARNING|ERROR)$")
    sort_columns: dict[str, list[str]] = Field(default_factory=dict)
    analyze_after_compaction: bool = False
    spark_submit: SparkSubmitSettings = Field(default_factory=SparkSubmitSettings)
    tables: TableSelection = Field(default_factory=TableSelection)
    metastore: MetastoreSettings = Field(default_factory=MetastoreSettings)
    sensor: SensorThresholds = Field(default_factory=SensorThresholds)
    observation: ObservationSettings = Field(default_factory=ObservationSettings)
    batching: BatchSettings = Field(default_factory=BatchSettings)
    table_overrides: dict[str, TableOverride] = Field(default_factory=dict)
    asset_owners: list[str] = Field(default_factory=list)
    asset_tags: dict[str, str] = Field(default_factory=dict)

    @property
    def block_size_bytes(self) -> int:
        return self.block_size_mb * 1024 * 1024

    def spark_conf(self, app_name: str = "lakekeeper-dagster") -> dict[str, str]:
        """Spark conf for a Hive-enabled session against the configured metastore."""
        return hive_spark_conf(self.spark_submit, self.metastore.uri, self.metastore.resolved_warehouse_dir(), app_name)

    def sort_columns_for(self, database: str, table: str) -> list[str]:
        return self.sort_columns.get(f"{database}.{table}", [])

    def min_files_for(self, database: str, table: str) -> int:
        """The sensor's file-count threshold for a table: its override, else `sensor.min_files`."""
        override = self.table_overrides.get(f"{database}.{table}")
        return override.min_files if override and override.min_files else self.sensor.min_files


def _format_errors(error: ValidationError, source: str) -> str:
    lines = []
    for item in error.errors():
        key = ".".join(str(p) for p in item["loc"]) or "(top level)"
        if item["type"] == "extra_forbidden":
            lines.append(f"  {key}: unknown key (check the spelling; see `lakekeeper-dagster generate-config`)")
        else:
            lines.append(f"  {key}: {item['msg']} (got {item.get('input')!r})")
    return f"invalid configuration in {source}:\n" + "\n".join(lines)


def config_path(explicit: str | None = None) -> tuple[Path, bool]:
    """The config file to read and whether it was asked for (flag or LAKEKEEPER_CONFIG) rather than defaulted."""
    chosen = explicit or os.environ.get("LAKEKEEPER_CONFIG")
    return Path(chosen or DEFAULT_CONFIG_PATH), chosen is not None


def parse_config(data: dict[str, Any], source: str) -> LakekeeperConfig:
    """Validate a mapping of settings; errors name each bad key and the source."""
    try:
        config = LakekeeperConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_format_errors(error, source)) from None
    env_uri = os.environ.get("LAKEKEEPER_METASTORE_URI")
    if env_uri:
        config.metastore.uri = env_uri
    return config


def load_config(explicit: str | None = None) -> LakekeeperConfig:
    """Read and validate the YAML config (`--config-file`, else LAKEKEEPER_CONFIG, else ./lakekeeper.yaml).

    A missing default file means defaults; a missing file that was asked for is an error.
    """
    path, asked = config_path(explicit)
    if not path.exists():
        if asked:
            raise ConfigError(f"config file {path} does not exist (from --config-file or LAKEKEEPER_CONFIG)")
        return parse_config({}, "defaults")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"config file {path} is not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of keys, not {type(data).__name__}")
    config = parse_config(data, str(path))
    home = Path(config.metastore.home)
    if not home.is_absolute():
        config.metastore.home = str((path.parent / home).absolute())
    return config


def with_overrides(config: LakekeeperConfig, **flags: Any) -> LakekeeperConfig:
    """A copy of `config` where only the flags actually given (not None) replace file values."""
    given = {k: v for k, v in flags.items() if v is not None}
    if not given:
        return config
    try:
        return LakekeeperConfig.model_validate({**config.model_dump(), **given})
    except ValidationError as error:
        raise ConfigError(_format_errors(error, "command-line flags")) from None
