"""Which text tables' files can be concatenated with every row kept exactly (`rewrite/textconcat.py`)."""

from __future__ import annotations

from lakekeeper_dagster.engine.hive.model import TableInfo

_HEADER_FOOTER = ("skip.header.line.count", "skip.footer.line.count")


def text_refusal(info: TableInfo) -> str | None:
    """Why the (LazySimpleSerDe) text table's files cannot be concatenated with every row kept, naming the
    property, or None.

    A Spark datasource text table (`USING text`) reads by its own options: `wholetext` makes each file one row, a
    `lineSep` other than LF joins the last line of a file to the next one's first, and neither is in the SerDe
    properties.

    Headers and footers (`skip.header.line.count`, `skip.footer.line.count`) are skipped by Hive in each file: in a
    concatenation all but the first file's would become rows. A record delimiter other than LF (`line.delim`,
    `textinputformat.record.delimiter`) is not what the checks read lines by.
    """
    if (info.provider or "hive").lower() != "hive":
        return (
            f"a Spark datasource table (USING {info.provider}): its reader options (wholetext, lineSep) are not the "
            "Hive SerDe's; only Hive TEXTFILE tables are concatenated"
        )
    properties = {k.lower(): (k, v) for k, v in {**info.storage_properties, **info.table_properties}.items()}
    for name in _HEADER_FOOTER:
        key, value = properties.get(name, (name, "0"))
        if value.strip() not in ("", "0"):
            return (
                f"{key}={value}: Hive skips these lines in every file; concatenated files would turn all but the "
                "first file's into rows"
            )
    for name in ("line.delim", "textinputformat.record.delimiter"):
        key, value = properties.get(name, (name, "\n"))
        if value != "\n":
            return f"{key}={value!r}: only LF-delimited lines are compacted"
    return None
