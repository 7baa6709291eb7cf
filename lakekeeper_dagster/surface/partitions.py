"""Dynamic partitions that mirror Hive partitions: keys are Hive partition names (`date=2024-01-01/ref=FR`)."""

from __future__ import annotations

import dagster as dg


def partition_changes(known: list[str], hive: list[str]) -> tuple[list[str], list[str]]:
    """(added, removed): the Hive partitions not yet dynamic partitions, and the dynamic partitions gone from Hive."""
    known_set = set(known)
    return [key for key in hive if key not in known_set], sorted(known_set - set(hive))


def partition_requests(
    name: str, known: list[str], hive: list[str]
) -> list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest]:
    """The sensor requests that make the dynamic partitions `name` equal the Hive partitions `hive`."""
    added, removed = partition_changes(known, hive)
    requests: list = []
    if added:
        requests.append(dg.AddDynamicPartitionsRequest(partitions_def_name=name, partition_keys=added))
    if removed:
        requests.append(dg.DeleteDynamicPartitionsRequest(partitions_def_name=name, partition_keys=removed))
    return requests


def sync_partitions(instance: dg.DagsterInstance, name: str, hive: list[str]) -> tuple[list[str], list[str]]:
    """Make the dynamic partitions `name` equal the Hive partitions `hive`; return (added, removed)."""
    added, removed = partition_changes(instance.get_dynamic_partitions(name), hive)
    if added:
        instance.add_dynamic_partitions(name, added)
    for key in removed:
        instance.delete_dynamic_partition(name, key)
    return added, removed
