"""Hive tables and their units as plain data, and the quoting and escaping of identifiers and partition values."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

from lakekeeper_dagster.engine.errors import ConfigError

HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"

# Hive's FileUtils.escapePathName escapes these characters (and control characters) as %XX.
_HIVE_ESCAPED = set("\"#%'*/:=?\\\x7f{[]^")
_ESCAPED_CHARACTER = re.compile("[\x00-\x1f" + re.escape("".join(sorted(_HIVE_ESCAPED))) + "]")

FORMATS_BY_SERDE = {
    "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe": "parquet",
    "org.apache.hadoop.hive.ql.io.orc.OrcSerde": "orc",
    "org.apache.hadoop.hive.serde2.avro.AvroSerDe": "avro",
    "org.apache.hadoop.hive.serde2.lazy.LazySimpleSerDe": "text",
}
SUPPORTED_FORMATS = ("parquet", "orc", "avro", "text")
BACKUP_SOURCE_PROPERTY = "lakekeeper.backup.source"
MERGED_SOURCE_PROPERTY = "lakekeeper.merged.source"  # on a merged table and its union view: the source D.T
HISTORY_PROPERTY = "lakekeeper.history"  # marks the history table (`hive/history_table.py`): never managed
# Hive 3/4 metastores (CDP, HDP 3) sync the partitions of a table with this property set to true every few minutes:
# a partition whose directory is missing is dropped, one whose directory has no entry is added.
DISCOVER_PARTITIONS_PROPERTY = "discover.partitions"


def escape_partition_value(value: str | None) -> str:
    """Escape one partition value as Hive does in directory and partition names."""
    if value is None or value == "":
        return HIVE_DEFAULT_PARTITION
    if not _ESCAPED_CHARACTER.search(value):  # most values: nothing to escape (a Python loop a character costs)
        return value
    return "".join(f"%{ord(c):02X}" if (ord(c) < 0x20 or c in _HIVE_ESCAPED) else c for c in value)


def partition_name(spec: dict[str, str | None]) -> str:
    """Hive partition name (`date=2024-01-01/ref=FR`) of an ordered spec, escaped as the metastore prints it."""
    return "/".join(f"{escape_partition_value(k)}={escape_partition_value(v)}" for k, v in spec.items())


def _unescape(text: str) -> str:
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), text) if "%" in text else text


def partition_spec(name: str, columns: tuple[str, ...]) -> dict[str, str | None]:
    """The spec of a Hive partition name, the inverse of `partition_name` (values in `columns`' order; the default
    partition's value None); a ValueError when the name does not hold exactly those columns."""
    pairs = [part.partition("=") for part in name.split("/")]
    if len(pairs) != len(columns) or any(
        not sep or _unescape(key).lower() != column.lower()
        for (key, sep, _), column in zip(pairs, columns, strict=False)
    ):
        raise ValueError(f"partition name {name!r} does not hold the columns {list(columns)}")
    return {
        c: None if v == HIVE_DEFAULT_PARTITION else _unescape(v) for (_, _, v), c in zip(pairs, columns, strict=False)
    }


def quote_identifier(name: str) -> str:
    """Backquote a Spark SQL identifier, doubling any backquote inside."""
    return "`" + name.replace("`", "``") + "`"


def sql_string(value: str) -> str:
    """A Spark SQL string literal for `value` (backslashes and quotes escaped)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def partition_clause(spec: dict[str, str | None]) -> str:
    """`PARTITION (`a`='x', `b`='y')` for a spec, every identifier quoted and value escaped."""
    parts = []
    for column, value in spec.items():
        literal = "NULL" if value is None or value == HIVE_DEFAULT_PARTITION else sql_string(value)
        parts.append(f"{quote_identifier(column)}={literal}")
    return f"PARTITION ({', '.join(parts)})"


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    nullable: bool = True


def validated_name(value: str, what: str) -> str:
    """`value` unchanged when it is a usable name or partition spec, else a ConfigError naming `what` (the flag or
    setting) and the value: empty, blank, surrounding whitespace and control characters are refused, never trimmed
    (an empty value would select everything; a trimmed one would name something else than what was typed)."""
    if not isinstance(value, str) or not value or not value.strip():
        raise ConfigError(
            f"{what} is empty ({value!r}): give a value (an unset shell variable expands to '', which must not "
            "select everything). Nothing was done"
        )
    if value != value.strip():
        raise ConfigError(
            f"{what} {value!r} has leading or trailing whitespace; pass the value exactly, without it. Nothing was done"
        )
    bad = sorted({c for c in value if ord(c) < 0x20 or ord(c) == 0x7F})
    if bad:
        raise ConfigError(
            f"{what} {value!r} contains control character(s) {', '.join(repr(c) for c in bad)}; pass the value "
            "without them. Nothing was done"
        )
    return value


def validated_partition(value: str, what: str = "--partition") -> str:
    """A Hive partition name (`date=2024-01-01/ref=FR`): a usable name whose every `/` part is `column=value`."""
    validated_name(value, what)
    if any(not column or not sep for column, sep, _ in (part.partition("=") for part in value.split("/"))):
        raise ConfigError(
            f"{what} {value!r} is not a Hive partition name like date=2024-01-01/ref=FR (COLUMN=VALUE parts "
            "joined by /). Nothing was done"
        )
    return value


def split_table_name(name: str, what: str = "table name") -> tuple[str, str]:
    """`db.table` -> (db, table), with a clear error for anything else (nothing is trimmed)."""
    parts = validated_name(name, what).split(".")
    if len(parts) != 2 or not all(p and p == p.strip() for p in parts):
        raise ConfigError(f"{what} {name!r} must be of the form DATABASE.TABLE. Nothing was done")
    return parts[0], parts[1]


@dataclass(frozen=True)
class Unit:
    """What an operation works on: one partition (raw values in partition-column order, its own location), or a
    whole unpartitioned table (no spec, the table's location)."""

    spec: dict[str, str | None] | None
    location: str

    @cached_property
    def partition(self) -> str | None:
        """The Hive partition name (`date=2024-01-01/ref=FR`), or None for a whole table (made once a unit)."""
        return partition_name(self.spec) if self.spec else None

    @classmethod
    def named(cls, name: str, spec: dict[str, str | None], location: str) -> Unit:
        """The unit of a partition whose Hive name is known (`partition_spec(name)` gave `spec`): its name is not
        made again (an estate's names-only read has millions)."""
        unit = cls(spec, location)
        unit.__dict__["partition"] = name  # `partition`'s cached value (a cached_property keeps it there)
        return unit


@dataclass(frozen=True)
class TableInfo:
    """Structured metadata of a Hive table, as read from the catalog."""

    database: str
    name: str
    table_type: str
    provider: str | None
    serde: str | None
    input_format: str | None
    output_format: str | None
    location: str | None
    columns: tuple[Column, ...]
    partition_columns: tuple[str, ...]
    table_properties: dict[str, str] = field(default_factory=dict)
    storage_properties: dict[str, str] = field(default_factory=dict)
    num_buckets: int | None = None
    bucket_columns: tuple[str, ...] = ()
    sort_columns: tuple[str, ...] = ()
    schema_json: str | None = None

    @property
    def qualified_name(self) -> str:
        return f"{self.database}.{self.name}"

    @property
    def sql_name(self) -> str:
        return f"{quote_identifier(self.database)}.{quote_identifier(self.name)}"

    @property
    def is_partitioned(self) -> bool:
        return bool(self.partition_columns)

    @property
    def data_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.name not in self.partition_columns)

    @property
    def transactional(self) -> bool:
        return self.table_properties.get("transactional", "false").lower() == "true"

    @property
    def table_format(self) -> str | None:
        """Lakehouse table format (iceberg, delta, hudi) if the table is one, else None."""
        props = {k.lower(): v.lower() for k, v in self.table_properties.items()}
        provider = (self.provider or "").lower()
        source_provider = props.get("spark.sql.sources.provider", "")
        if "metadata_location" in props:  # set by Iceberg's HiveCatalog on every Iceberg table
            return "iceberg"
        for fmt in ("iceberg", "delta", "hudi"):
            if fmt in (provider, source_provider, props.get("table_type", "")):
                return fmt
            if fmt in (self.input_format or "").lower() or fmt in (self.serde or "").lower():
                return fmt
        return None

    @property
    def file_format(self) -> str:
        """Data file format: parquet, orc, avro, text, or the provider/SerDe name when unsupported."""
        provider = (self.provider or "").lower()
        if provider and provider != "hive":
            return provider
        fmt = FORMATS_BY_SERDE.get(self.serde or "", self.serde or "unknown")
        if fmt == "text" and not (self.input_format or "").endswith(".TextInputFormat"):
            return (self.input_format or "unknown").rsplit(".", 1)[-1]  # e.g. SequenceFileInputFormat
        return fmt

    @property
    def codec_property(self) -> str | None:
        """The codec set in TBLPROPERTIES for this format, if any."""
        key = {"parquet": "parquet.compression", "orc": "orc.compress", "avro": "avro.output.codec"}.get(
            self.file_format
        )
        if key is None:
            return None
        props = {k.lower(): v for k, v in self.table_properties.items()}
        return props.get(key)

    def skip_reason(self) -> str | None:
        """Why this table cannot be compacted, or None when it can."""
        reason = self.unmanaged_reason()
        if reason:
            return reason
        if self.num_buckets:
            return f"bucketed table ({self.num_buckets} buckets): rewriting files would break bucketing"
        if self.file_format not in SUPPORTED_FORMATS:
            return f"unsupported file format {self.file_format!r} (supported: {', '.join(SUPPORTED_FORMATS)})"
        return None

    @property
    def lakekeeper_owned(self) -> bool:
        """A table lakekeeper made for its own use: a backup (at its source's location), a merged table, the
        history. Never a source of journals: a backup's location leads to its source's."""
        owned = (BACKUP_SOURCE_PROPERTY, MERGED_SOURCE_PROPERTY, HISTORY_PROPERTY)
        return any(key in self.table_properties for key in owned)

    def discovery_reason(self) -> str | None:
        """Why the metastore's partition discovery makes this table's partitions unsafe to move, or None."""
        if self.table_properties.get(DISCOVER_PARTITIONS_PROPERTY, "").strip().lower() != "true":
            return None
        return (
            f"the metastore's partition discovery is on ('{DISCOVER_PARTITIONS_PROPERTY}'='true'): it would drop a "
            "partition while its directory is swapped, and re-add one being dropped. Set it aside for the run: "
            f"ALTER TABLE {self.sql_name} SET TBLPROPERTIES ('{DISCOVER_PARTITIONS_PROPERTY}'='false'), and "
            "back to 'true' once the run is done"
        )

    def unmanaged_reason(self) -> str | None:
        """Why lakekeeper may not change this table's partitions or directories at all (a view, a backup, a table
        whose files another system owns: Hive for an internal table, one whose partitions the metastore discovers,
        one without a location), or None; what rewrites no file needs only this."""
        if self.table_type == "VIEW":
            return "view (no data files of its own)"
        if BACKUP_SOURCE_PROPERTY in self.table_properties:
            return f"lakekeeper backup of {self.table_properties[BACKUP_SOURCE_PROPERTY]} (roll back or clean it up)"
        if MERGED_SOURCE_PROPERTY in self.table_properties:
            return f"merged table of {self.table_properties[MERGED_SOURCE_PROPERTY]} (`merge` owns its partitions)"
        if HISTORY_PROPERTY in self.table_properties:
            return "lakekeeper's operation history (every run appends to it; not managed as a source)"
        if self.table_format:
            return f"{self.table_format} table (it manages its own files; use its own compaction)"
        if self.transactional:
            return "transactional (ACID) table: Hive compaction owns its files"
        if discovering := self.discovery_reason():
            return discovering
        if self.table_type == "MANAGED":  # Hive's MANAGED_TABLE: an internal table, whose files Hive owns
            return "managed table (a Hive internal table, MANAGED_TABLE): only EXTERNAL tables are taken"
        if self.table_type != "EXTERNAL":
            return f"{self.table_type.lower()} table: only EXTERNAL tables are taken"
        if not self.location:
            return "table has no location"
        return None
