"""The Spark settings a unit's rewrite runs under: reads that cannot skip data, writes that keep the input's form.

Reads: whatever the cluster's defaults, a run reads with `READER_SETTINGS` (no corrupt or missing file skipped,
Hive's case-insensitive column matching, columns matched by name, never by Parquet field id).

Writes keep what the input files use (read from their footers, `footers.py`): the Parquet timestamp type (INT96,
which Hive 2 and Impala read, or INT64 micros/millis), the datetime and INT96 rebase modes Spark recorded for old
dates, and the decimal layout (fixed-length binary as Hive writes it, or INT32/INT64). Spark takes these from the
session's SQL conf at write time, not from write options, so each unit is written in its own clone of the session
(`spark_resources.py4j.isolated_session`): concurrent units with different encodings do not disturb each other, and
the caller's session is never changed. A unit whose files disagree (some INT96, some INT64; some LEGACY, some
CORRECTED) cannot keep both in one file: it is refused, nothing changed. The table's format properties
(TBLPROPERTIES `parquet.*` / `orc.*`: block and stripe size, bloom filters, dictionary, row index stride...) go to
the writer as options, which Spark hands to the Parquet/ORC writer.
"""

from __future__ import annotations

from lakekeeper_dagster.engine.errors import UnitFailure
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.rewrite.footers import FileFooter
from lakekeeper_dagster.engine.rewrite.schema import HIVE_COMPATIBLE_WRITES

READER_SETTINGS = {
    "spark.sql.files.ignoreCorruptFiles": "false",
    "spark.sql.files.ignoreMissingFiles": "false",
    "spark.sql.caseSensitive": "false",
    "spark.sql.parquet.fieldId.read.enabled": "false",
    # Files that do not say how their old dates are stored (written by Hive or Impala, not Spark 3+) are read as
    # Hive writes them, and written back the same way (`write_settings`): their stored values never shift.
    "spark.sql.parquet.datetimeRebaseModeInRead": "LEGACY",
    "spark.sql.parquet.int96RebaseModeInRead": "LEGACY",
}
# What a file that records no rebase mode gets written with: the read mode above, so the stored days are kept.
_UNRECORDED_REBASE = {
    "spark.sql.parquet.datetimeRebaseModeInWrite": "LEGACY",
    "spark.sql.parquet.int96RebaseModeInWrite": "LEGACY",
}

# footer attribute -> the SQL conf that writes it, and how a footer value becomes the conf's value
_WRITE_CONFS = {
    "timestamp_type": "spark.sql.parquet.outputTimestampType",
    "decimal_legacy": "spark.sql.parquet.writeLegacyFormat",
    "datetime_rebase": "spark.sql.parquet.datetimeRebaseModeInWrite",
    "int96_rebase": "spark.sql.parquet.int96RebaseModeInWrite",
}


def _conf_value(value: str | bool) -> str:
    return str(value).lower() if isinstance(value, bool) else value


def input_encodings(footers: list[FileFooter], label: str) -> dict[str, str | bool]:
    """The one value of each encoding attribute the files that have it share; UnitFailure when they disagree."""
    chosen: dict[str, str | bool] = {}
    for attribute in _WRITE_CONFS:
        values: dict[str | bool, str] = {}
        for footer in footers:
            value = getattr(footer, attribute)
            if value is not None:
                values.setdefault(value, footer.path)
        if len(values) > 1 or any(isinstance(v, str) and "+" in v for v in values):
            found = "; ".join(f"{value} in {path}" for value, path in values.items())
            raise UnitFailure(
                f"{label}: its files disagree on {attribute.replace('_', ' ')} ({found}); one rewritten file "
                "cannot keep both, so it is not compacted. Nothing was changed; rewrite the partition with one "
                "encoding first."
            )
        if values:
            chosen[attribute] = next(iter(values))
    return chosen


def write_settings(encodings: dict[str, str | bool]) -> dict[str, str]:
    """Reader settings plus the SQL confs that write `encodings` (Hive's layout where the input says nothing)."""
    settings = {**READER_SETTINGS, **HIVE_COMPATIBLE_WRITES, **_UNRECORDED_REBASE}
    settings.update({_WRITE_CONFS[attribute]: _conf_value(value) for attribute, value in encodings.items()})
    return settings


def changed_encodings(encodings: dict[str, str | bool], output: list[FileFooter]) -> list[str]:
    """The attributes an output file stores otherwise than the input did, as `attribute: input -> output`."""
    changed = []
    for footer in output:
        for attribute, value in encodings.items():
            written = getattr(footer, attribute)
            if written is not None and written != value:
                changed.append(f"{attribute}: {value} -> {written} ({footer.path})")
    return changed


def format_options(info: TableInfo) -> dict[str, str]:
    """The table's TBLPROPERTIES of its file format (`parquet.*` or `orc.*`), the codec aside (chosen apart)."""
    prefix = f"{info.file_format}."
    codec_keys = {"parquet.compression", "orc.compress"}
    return {
        key: value
        for key, value in info.table_properties.items()
        if key.lower().startswith(prefix) and key.lower() not in codec_keys
    }
