"""A table's files as a full scan of it opens them now, for what a compaction run bought (`figures.py`): each
unit's files as the observation job last kept them (`observations.py`), overlaid by the asset's compaction runs
since.

The overlay is kept in the instance's key-value store beside the snapshot: per unit, the files a run left and the
files the snapshot held for it then. An entry stands while the snapshot still holds that figure (an observation that
listed the unit before the run committed keeps it); once an observation records the unit again, the snapshot's
figure is the newer one and the entry is dropped at the next run.
"""

from __future__ import annotations

import json

import dagster as dg

from lakekeeper_dagster.surface.metadata import COMPACTED_KEY, OBSERVED_SNAPSHOT_KEY


def _read(instance: dg.DagsterInstance, key: dg.AssetKey) -> tuple[dict[str, int], dict[str, list]]:
    """(each unit's files in the snapshot, the overlay's entries), in one key-value read."""
    snapshot_name, overlay_name = OBSERVED_SNAPSHOT_KEY + key.to_user_string(), COMPACTED_KEY + key.to_user_string()
    kept = instance.run_storage.get_cursor_values({snapshot_name, overlay_name})
    observed = {unit: figures[0] for unit, figures in json.loads(kept.get(snapshot_name) or "{}").items()}
    return observed, json.loads(kept.get(overlay_name) or "{}")


def _standing(observed: dict[str, int], overlay: dict[str, list]) -> dict[str, list]:
    """The overlay's entries the snapshot has not recorded since (it still holds the figure it held then)."""
    return {unit: entry for unit, entry in overlay.items() if observed.get(unit) == entry[1]}


def table_files(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict[str, int]:
    """Each unit's files now (unit name, "" for an unpartitioned table -> files); empty for a table never observed."""
    observed, overlay = _read(instance, key)
    if not observed:
        return {}
    return observed | {unit: entry[0] for unit, entry in _standing(observed, overlay).items()}


def keep_compacted(instance: dg.DagsterInstance, key: dg.AssetKey, units: dict[str, int]) -> None:
    """Overlay the snapshot with the files a compaction run left in its `units` (the entries the snapshot has
    recorded since dropped)."""
    observed, overlay = _read(instance, key)
    entries = _standing(observed, overlay) | {unit: [files, observed.get(unit)] for unit, files in units.items()}
    text = json.dumps(entries, separators=(",", ":"))
    instance.run_storage.set_cursor_values({COMPACTED_KEY + key.to_user_string(): text})
