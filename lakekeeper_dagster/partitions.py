"""Dynamic partitions that mirror Hive partitions: keys are Hive partition names (`date=2024-01-01/ref=FR`)."""

from __future__ import annotations

import re

import dagster as dg

from lakekeeper_dagster.engine.hive.model import TableInfo


def partitions_def_name(database: str, table: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", f"hive__{database}__{table}")


def partitions_def_for(info: TableInfo) -> dg.DynamicPartitionsDefinition | None:
    if not info.is_partitioned:
        return None
    return dg.DynamicPartitionsDefinition(name=partitions_def_name(info.database, info.name))


def sync_partitions(instance: dg.DagsterInstance, info: TableInfo, hive: list[str]) -> tuple[list[str], list[str]]:
    """Make the table's dynamic partitions equal its Hive partitions `hive`; return (added, removed)."""
    name = partitions_def_name(info.database, info.name)
    known = set(instance.get_dynamic_partitions(name))
    added = [key for key in hive if key not in known]
    removed = sorted(known - set(hive))
    if added:
        instance.add_dynamic_partitions(name, added)
    for key in removed:
        instance.delete_dynamic_partition(name, key)
    return added, removed
