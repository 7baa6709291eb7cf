"""The Hive tables the code location manages, read once when the definitions load."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.errors import CatalogError
from lakekeeper_dagster.engine.hive.catalog import read_table
from lakekeeper_dagster.engine.hive.eligibility import refusal
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.hive.selection import resolve_tables
from spark_resources.metastore import MetastoreError, parse_thrift_uri, port_is_open

log = logging.getLogger(__name__)


@dataclass
class ManagedTables:
    tables: list[TableInfo] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # db.table -> why it is not an asset


def load_managed_tables(spark, config: LakekeeperConfig) -> ManagedTables:
    """Read the configured tables' metadata; unmanageable ones are skipped with their reason (and logged)."""
    managed = ManagedTables()
    for database, table in resolve_tables(spark, config.tables):
        try:
            info = read_table(spark, database, table)
        except CatalogError as error:
            managed.skipped[f"{database}.{table}"] = str(error)
            continue
        reason = refusal(info)
        if reason:
            managed.skipped[info.qualified_name] = reason
        else:
            managed.tables.append(info)
    for name, reason in managed.skipped.items():
        log.warning("%s is not an asset: %s", name, reason)
    return managed


def check_metastore(config: LakekeeperConfig) -> None:
    """A clear error, not a py4j stack trace, when the metastore is down before a Spark session is started."""
    host, port = parse_thrift_uri(config.metastore.uri)
    if not port_is_open(host, port):
        raise MetastoreError(
            f"the Hive Metastore at {config.metastore.uri} is not reachable, so the Hive tables cannot be listed. "
            "Start the local one with `lakekeeper-dagster metastore start`, or point metastore.uri / "
            "LAKEKEEPER_METASTORE_URI at yours."
        )
