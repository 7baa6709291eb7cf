"""The config `demo create` leaves behind: one that manages the demo database, so that the Dagster UI shows the demo
tables with no hand edit (written when there is no config file; an existing one is never overwritten)."""

from __future__ import annotations

import yaml

from lakekeeper_dagster.config import LakekeeperConfig, config_path

DEMO_CONFIG_HEADER = """\
# Written by `lakekeeper-dagster demo create`: the code location manages the demo database.
# Every other key, with its default and meaning: `lakekeeper-dagster generate-config --output other.yaml`.
"""


def demo_config_text(database: str) -> str:
    return DEMO_CONFIG_HEADER + yaml.safe_dump({"tables": {"databases": [database]}}, default_flow_style=None)


def ensure_demo_config(config: LakekeeperConfig, explicit: str | None, database: str, names: list[str]) -> str:
    """Make the config file (`--config-file`, else LAKEKEEPER_CONFIG, else ./lakekeeper.yaml) manage the demo tables
    `names`: write it when it does not exist; else say whether it manages them and, if not, exactly what to add
    (the file is left as it is). Returns the message."""
    path = config_path(explicit)[0]
    if not path.exists():
        path.write_text(demo_config_text(database), encoding="utf-8")
        return f"wrote {path.absolute()}: the code location manages database {database} (`make ui` shows its tables)"
    selection = config.tables
    missing = [
        name
        for name in names
        if name not in selection.tables
        and not (database in selection.databases and selection.matches(*name.split(".")))
    ]
    if not missing:
        return f"{path.absolute()} manages the demo tables"
    databases = [*config.tables.databases, *([] if database in config.tables.databases else [database])]
    addition = yaml.safe_dump({"tables": {"databases": databases}}, default_flow_style=None).rstrip()
    return (
        f"note: {path.absolute()} does not manage {', '.join(missing)}, so the Dagster UI will not show them. "
        f"It was not changed; to manage the demo tables set in it:\n{addition}\n"
        + ("(and check tables.include / tables.exclude)" if database in config.tables.databases else "")
    ).rstrip()
