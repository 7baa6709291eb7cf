"""A table's files as a full scan of it opens them now, for what a compaction run bought (`figures.py`): each
unit's files as the observation job last kept them (`observations.py`), overlaid by the compaction runs since.

The overlay is kept in the instance's key-value store beside the snapshot, with the version (a digest) of the snapshot
it overlays: once the observation job keeps a new snapshot, the runs before it are in it and the overlay is dropped.
"""

from __future__ import annotations

import hashlib
import json

import dagster as dg

from lakekeeper_dagster.surface.metadata import COMPACTED_KEY, OBSERVED_SNAPSHOT_KEY


def _names(key: dg.AssetKey) -> tuple[str, str]:
    return OBSERVED_SNAPSHOT_KEY + key.to_user_string(), COMPACTED_KEY + key.to_user_string()


def table_files(instance: dg.DagsterInstance, key: dg.AssetKey) -> tuple[dict[str, int], str]:
    """Each unit's files now (unit name, "" for an unpartitioned table -> files), empty for a table never observed,
    and the version of the snapshot they start from (one key-value read)."""
    snapshot_name, overlay_name = _names(key)
    kept = instance.run_storage.get_cursor_values({snapshot_name, overlay_name})
    text = kept.get(snapshot_name)
    if not text:
        return {}, ""
    version = hashlib.sha256(text.encode()).hexdigest()[:16]
    files = {unit: figures[0] for unit, figures in json.loads(text).items()}
    overlay = json.loads(kept.get(overlay_name) or "{}")
    if overlay.get("snapshot") == version:
        files.update(overlay["units"])
    return files, version


def keep_compacted(instance: dg.DagsterInstance, key: dg.AssetKey, version: str, units: dict[str, int]) -> None:
    """Overlay the snapshot of `version` with the files a compaction run left in its `units` (over earlier runs'
    of the same snapshot)."""
    _, overlay_name = _names(key)
    kept = json.loads(instance.run_storage.get_cursor_values({overlay_name}).get(overlay_name) or "{}")
    earlier = kept["units"] if kept.get("snapshot") == version else {}
    text = json.dumps({"snapshot": version, "units": {**earlier, **units}}, separators=(",", ":"))
    instance.run_storage.set_cursor_values({overlay_name: text})
