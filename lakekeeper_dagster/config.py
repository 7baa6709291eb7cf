"""The YAML configuration: the engine's settings plus the code location's (metastore, Spark, sensor, observation,
asset metadata); loading, validation with errors naming key and file, and the commented template generated from
the models' descriptions."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, replace
from functools import reduce
from pathlib import Path
from typing import Any, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from lakekeeper_dagster.engine.errors import ConfigError
from lakekeeper_dagster.engine.ops.options import ArchiveRule, CompactionOptions
from lakekeeper_dagster.engine.plan.quiet_hours import parse_window
from lakekeeper_dagster.engine.policies import TablePolicies
from lakekeeper_dagster.engine.protocol.history import HistorySink
from lakekeeper_dagster.engine.settings import EngineSettings, StrictModel
from spark_resources.session import hive_spark_conf
from spark_resources.settings import MetastoreSettings, SparkSubmitSettings

DEFAULT_CONFIG_PATH = "lakekeeper.yaml"
CONFIG_ENV = "LAKEKEEPER_CONFIG"  # the config file's path, when --config-file is not given
ENV_OVERRIDES = {"metastore.uri": "LAKEKEEPER_METASTORE_URI"}  # key -> the variable that replaces the file's value
ENTRY = "<DB.TABLE>"  # in a key's path: any entry of a mapping of blocks (table_overrides)
TEMPLATE_WIDTH = 118
TEMPLATE_HEADER = """\
# lakekeeper-dagster configuration. Every key is optional; the values shown are the defaults.
# Path: --config-file, else $LAKEKEEPER_CONFIG, else ./lakekeeper.yaml. An unknown key is an error.
"""


class SensorThresholds(StrictModel):
    """When the file-count sensor requests compaction, and how much per tick."""

    min_files: int = Field(
        default=2,
        ge=2,
        description="Request compaction of a partition only when its newest observation counts at least this many "
        "files (and its files are small by the size rule).",
    )
    minimum_interval_seconds: int = Field(default=300, ge=1, description="Seconds between two ticks of the sensor.")
    max_runs_per_tick: int = Field(
        default=10, ge=1, description="Runs requested per tick at most; the other partitions wait for the next tick."
    )
    max_partitions_per_run: int = Field(default=200, ge=1, description="Partitions of one requested run at most.")
    failure_backoff_seconds: int = Field(
        default=3600, ge=0, description="Do not re-request a partition whose compaction failed this recently."
    )
    max_observations_per_tick: int = Field(
        default=2000,
        ge=1,
        description="Observations read per tick at most (each costs the event log about 1 ms to read and decode: a "
        "tick's time); the cursor pages through the rest.",
    )
    max_mb_per_hour: int | None = Field(
        default=None,
        ge=1,
        examples=[51200],
        description="Megabytes of small files the sensor's requests may rewrite within any hour (the best-ranked "
        "partitions first; retries of failed runs are not counted); none: no limit. A partition larger than the whole "
        "budget is requested alone, in an hour with no other request: set the budget above the largest ones.",
    )
    quiet_hours: list[str] = Field(
        default_factory=list,
        examples=[["08:00-18:00"], ["22:00-06:00"]],
        description="Daily windows HH:MM-HH:MM (in `sensor.timezone`) in which the sensor requests nothing (retries "
        "included) and reads nothing: what was observed waits for the first tick after the window.",
    )
    timezone: str = Field(default="UTC", examples=["Europe/Berlin"], description="The time zone of `quiet_hours`.")

    @field_validator("quiet_hours")
    @classmethod
    def _windows(cls, windows: list[str]) -> list[str]:
        for window in windows:
            parse_window(window)
        return windows

    @field_validator("timezone")
    @classmethod
    def _zone(cls, zone: str) -> str:
        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {zone!r}: an IANA name such as UTC or Europe/Berlin") from None
        return zone


class ObservationSettings(StrictModel):
    """When the observation job runs on its schedule (the schedule is off until turned on), and how many partitions
    hive_partitions_sensor registers a tick."""

    cron_schedule: str = Field(
        default="0 * * * *",
        pattern=r"^\s*(\S+\s+){4}\S+\s*$",
        description="When observe_partitions_schedule runs (it is off until turned on).",
    )
    full_read_hours: int = Field(
        default=24,
        ge=1,
        description="Each table is read in full (every partition from the metastore, every directory listed) at "
        "least once in this many hours, the tables spread over them; other runs read partition names and list only "
        "directories whose modification time changed (a partition moved with SET LOCATION, or a file appended to in "
        "place, is seen at the table's next full read).",
    )
    max_registrations_per_tick: int = Field(
        default=1000,
        ge=1,
        description="Partitions holding data that hive_partitions_sensor registers per tick at most (a runless "
        "materialization each, ~25 ms of the instance's time), newest first, the tables in turn; the rest on the "
        "next ticks.",
    )


class TableOverride(TablePolicies):
    """Settings of one table that replace the general ones, and its partition-management policies."""

    min_files: int | None = Field(
        default=None, ge=2, examples=[50], description="The sensor's file-count threshold; default: sensor.min_files."
    )
    priority: float = Field(
        default=1.0,
        gt=0,
        examples=[10],
        description="How much the sensor favours this table: its partitions' scores (files removed per GB "
        "rewritten) are multiplied by it; e.g. how often the table is read, when known.",
    )


class LakekeeperConfig(EngineSettings):
    """Everything one YAML file can set: the engine's settings and the code location's."""

    log_level: str = Field(
        default="INFO",
        pattern="^(DEBUG|INFO|WARNING|ERROR)$",
        description="Logging level: DEBUG, INFO, WARNING or ERROR.",
    )
    metastore: MetastoreSettings = Field(default_factory=MetastoreSettings, description="The Hive Metastore.")
    spark_submit: SparkSubmitSettings = Field(
        default_factory=SparkSubmitSettings,
        description="Lakekeeper's spark_submit block: how Spark runs (local mode in the calling process unless "
        "enabled).",
    )
    sensor: SensorThresholds = Field(
        default_factory=SensorThresholds,
        description="The file-count sensor, which requests compaction of partitions with many small files (off "
        "until turned on).",
    )
    observation: ObservationSettings = Field(
        default_factory=ObservationSettings,
        description="The observation job: file counts and sizes per partition, recorded as asset observations.",
    )
    table_overrides: dict[str, TableOverride] = Field(
        default_factory=dict, description="Settings of single tables, by DB.TABLE."
    )
    asset_owners: list[str] = Field(
        default_factory=list,
        description="Owners of every table's asset, e.g. [team:data-platform, someone@example.com].",
    )
    asset_tags: dict[str, str] = Field(default_factory=dict, description="Tags of every table's asset.")

    def spark_conf(self, app_name: str = "lakekeeper-dagster") -> dict[str, str]:
        """Spark conf for a Hive-enabled session against the configured metastore."""
        return hive_spark_conf(self.spark_submit, self.metastore.uri, self.metastore.resolved_warehouse_dir(), app_name)

    def history_sink(self, dagster_run_id: str | None = None) -> HistorySink:
        """Where the history of a run goes (`history.*`), naming the Dagster run when there is one."""
        pending = self.history.pending_dir or Path(self.metastore.home) / "history-pending"
        return HistorySink(self.history.table, Path(pending), dagster_run_id)

    def min_files_for(self, database: str, table: str) -> int:
        """The sensor's file-count threshold for a table: its override, else `sensor.min_files`."""
        override = self.table_overrides.get(f"{database}.{table}")
        return override.min_files if override and override.min_files else self.sensor.min_files

    def priority_for(self, database: str, table: str) -> float:
        """The weight of a table's partitions in the sensor's ranking: its override's `priority`, else 1."""
        override = self.table_overrides.get(f"{database}.{table}")
        return override.priority if override else 1.0

    def policies_for(self, database: str, table: str) -> TablePolicies:
        """A table's partition time and partition-management policies (defaults when it has no override)."""
        return self.table_overrides.get(f"{database}.{table}") or TableOverride()

    def compaction_options(self, database: str, table: str, **choices: Any) -> CompactionOptions:
        """A compaction run's options (`EngineSettings.compaction_options`), with the table's standing archive rule:
        partitions older than `archive.older_than` are written in the archive codec, never recompressed back."""
        options = super().compaction_options(database, table, **choices)
        return replace(options, archive=self.policies_for(database, table).standing_archive(f"{database}.{table}"))

    def archive_rule(
        self, database: str, table: str, older_than: str | None, codec: str | None, flags: tuple[str, str]
    ) -> ArchiveRule:
        """An archive run's rule (`TablePolicies.archive_rule`). Without a standing `archive.older_than` policy, a
        global `codec` is refused: every compaction would recompress the archived partitions back to it."""
        policies, name = self.policies_for(database, table), f"{database}.{table}"
        if self.codec is not None and policies.archive.older_than is None:
            raise ConfigError(
                f"{name}: codec is set ({self.codec}), so every compaction would recompress archived partitions back "
                f"to {self.codec}; set table_overrides.{name}.archive.older_than (and archive.codec) so compactions "
                "keep old partitions in the archive codec, then archive; nothing was changed"
            )
        return policies.archive_rule(name, older_than, codec, flags=flags)


def run_owner(run_id: str | None) -> str:
    """Who a run is, as journals and leases name it: the Dagster run, or else the command line."""
    return f"dagster run {run_id}" if run_id else "cli"


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
    chosen = explicit or os.environ.get(CONFIG_ENV)
    return Path(chosen or DEFAULT_CONFIG_PATH), chosen is not None


def parse_config(data: dict[str, Any], source: str) -> LakekeeperConfig:
    """Validate a mapping of settings; errors name each bad key and the source."""
    try:
        config = LakekeeperConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_format_errors(error, source)) from None
    for key, variable in ENV_OVERRIDES.items():
        value = os.environ.get(variable)
        if value:
            *blocks, name = key.split(".")
            try:
                setattr(reduce(getattr, blocks, config), name, value)
            except ValidationError as error:
                raise ConfigError(_format_errors(error, variable)) from None
    return config


def load_config(explicit: str | None = None) -> LakekeeperConfig:
    """Read and validate the YAML config (`--config-file`, else LAKEKEEPER_CONFIG, else ./lakekeeper.yaml).

    A missing default file means defaults; a missing file that was asked for is an error.
    """
    path, asked = config_path(explicit)
    try:
        if not path.exists():
            if asked:
                raise ConfigError(f"config file {path} does not exist (from --config-file or LAKEKEEPER_CONFIG)")
            return parse_config({}, "defaults")
        if path.is_dir():
            raise ConfigError(f"config file {path} is a directory; pass the YAML file itself (--config-file)")
        text = path.read_text(encoding="utf-8")
    except PermissionError:
        raise ConfigError(
            f"config file {path} is not readable by this user (uid {os.getuid()}); fix the mode or owner of the file "
            "(or of a directory above it), or pass another file with --config-file"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not a text (UTF-8 YAML) file; pass the YAML config") from None
    except OSError as error:
        raise ConfigError(f"config file {path} cannot be read ({error.strerror}); pass a readable YAML file") from None
    try:
        data = yaml.safe_load(text) or {}
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


@dataclass(frozen=True)
class ConfigKey:
    """One key of a settings model: its path (ENTRY for any entry of a mapping of blocks), its field and default
    (JSON form; None when required); `block`: the model of a nested block; `entry`: of each entry of a mapping."""

    path: tuple[str, ...]
    field: FieldInfo
    default: Any
    block: type[BaseModel] | None
    entry: type[BaseModel] | None


def _model(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def config_keys(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[ConfigKey]:
    """Every key of `model`, depth first: a block's key before its own keys, a mapping of blocks' entry keys under
    ENTRY. The one walk of the settings: the template and the reference (docs/reference/generate.py) are made of it."""
    for name, field in model.model_fields.items():
        path = (*prefix, name)
        default = None if field.is_required() else to_jsonable_python(field.get_default(call_default_factory=True))
        block, entry = _model(field.annotation), _model((get_args(field.annotation) or (None,))[-1])
        yield ConfigKey(path, field, default, block, entry)
        if block or entry:
            yield from config_keys(block or entry, path if block else (*path, ENTRY))


def config_template() -> str:
    """The YAML `generate-config` writes: every key with its default, its description above it as a comment."""
    return TEMPLATE_HEADER + "\n".join(_template_lines(LakekeeperConfig)) + "\n"


def _yaml_value(value: Any) -> str:
    if isinstance(value, str):  # quoted, so an edit such as `*/15 * * * *` stays a string, not a YAML alias
        return json.dumps(value)
    return yaml.safe_dump(value, default_flow_style=True, width=10**6).removesuffix("...\n").strip()


def _comment(text: str, indent: str) -> list[str]:
    return [f"{indent}# {line}" for line in textwrap.wrap(text, TEMPLATE_WIDTH - len(indent) - 2)]


def _template_lines(model: type[BaseModel]) -> list[str]:
    """Each key under its description, a top-level one after a blank line, a block's keys indented under it; a
    mapping of blocks is followed by one entry commented out, as an example (its keys' examples, else defaults)."""
    lines = []
    for key in config_keys(model):
        name, depth = key.path[-1], len(key.path) - 1
        if ENTRY in key.path:
            if key.path[-2] == ENTRY:  # the example entry's own keys, one line each
                value = _yaml_value((key.field.examples or [key.default])[0])
                lines.append(f"{'  ' * (depth - 2)}#     {name}: {value}  # {key.field.description}")
            continue
        indent = "  " * depth
        lines += ([""] if not depth else []) + _comment(key.field.description or "", indent)
        lines.append(f"{indent}{name}:" if key.block else f"{indent}{name}: {_yaml_value(key.default)}")
        if key.entry:
            lines.append(f"{indent}#   mydb.mytable:")
    return lines
