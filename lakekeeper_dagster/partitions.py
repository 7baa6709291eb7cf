"""Dynamic partitions that mirror Hive partitions: keys are Hive partition names (`date=2024-01-01/ref=FR`)."""

from __future__ import annotations

import dagster as dg


def sync_partitions(instance: dg.DagsterInstance, name: str, hive: list[str]) -> tuple[list[str], list[str]]:
    """Make the dynamic partitions `name` equal the Hive partitions `hive`; return (added, removed)."""
    known = set(instance.get_dynamic_partitions(name))
    added = [key for key in hive if key not in known]
    removed = sorted(known - set(hive))
    if added:
        instance.add_dynamic_partitions(name, added)
    for key in removed:
        instance.delete_dynamic_partition(name, key)
    return added, removed
