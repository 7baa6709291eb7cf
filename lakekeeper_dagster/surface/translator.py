"""How a Hive table appears in Dagster: its asset key, spec, op, pool and partitions, in one object.

Like dagster-dbt's `DagsterDbtTranslator`: every Dagster definition of a table (its asset, checks, observations, the
sensor's requests, the partition sync) asks this object for the table's identity instead of composing names itself.
The asset keys, pools and partitions definition names are persisted in Dagster instances: changing them orphans
the history (observations, materializations, dynamic partitions) recorded under the old names.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.hive.model import TableInfo
from lakekeeper_dagster.engine.plan.merge import merge_names
from lakekeeper_dagster.engine.policies import TablePolicies
from lakekeeper_dagster.surface.metadata import COLUMN_SCHEMA, STORAGE_KIND, TABLE_NAME, URI

PARTITION_COLUMN = "partition column"  # the description of a partition column in the column schema


@dataclass(frozen=True)
class HiveTableTranslator:
    """The Dagster identity of a Hive table; `owners` and `tags` go on every table's asset, `policies` (by DB.TABLE,
    `table_overrides`) on its table's. `renamed`: the (database, table) pairs whose flattened names another table
    shares (`renamed_tables`), named apart."""

    owners: Sequence[str] = ()
    tags: Mapping[str, str] = field(default_factory=dict)
    policies: Mapping[str, TablePolicies] = field(default_factory=dict)
    renamed: frozenset[tuple[str, str]] = frozenset()

    def asset_key(self, info: TableInfo) -> dg.AssetKey:
        """`hive/<database>/<table>`."""
        return self.key_of(info.database, info.name)

    def key_of(self, database: str, name: str) -> dg.AssetKey:
        """`hive/<database>/<name>`: the key of a table or view known by name only (a merged table, a union view)."""
        return dg.AssetKey(["hive", database, name])

    def merge_keys(self, info: TableInfo) -> tuple[dg.AssetKey, dg.AssetKey] | None:
        """The keys of the table's merged table and union view, when its `merge` policy names a view and `into`."""
        policy = (self.policies.get(info.qualified_name) or TablePolicies()).merge
        if policy.view is None or policy.into is None:
            return None
        merged, view = merge_names(info.database, info.name, policy.view, policy.table)
        return self.key_of(*merged), self.key_of(*view)

    def op_name(self, info: TableInfo) -> str:
        """The op that compacts the table (the name its run config is keyed by)."""
        return self._identifier(info)

    def job_name(self, info: TableInfo) -> str:
        """`Compact__<database>__<table>`: the table's compaction job, launched by the UI, backfills and the sensor.

        The UI's Materialize button launches the first job, in name order, that holds the asset (the asset page names
        no preferred job), and Dagster's hidden `__ASSET_JOB` holds every asset: a name that starts with a capital
        sorts first (`C` < `_`), so the button launches this job, not the hidden one.
        """
        return self._identifier(info, prefix="Compact")

    def pool(self, info: TableInfo) -> str:
        """The concurrency pool of the table: runs compacting the same table queue behind each other."""
        return f"lakekeeper/{info.database}.{info.name}"

    def partitions_def_name(self, info: TableInfo) -> str:
        """The dynamic partitions of the table (keys are Hive partition names, `date=2024-01-01/ref=FR`)."""
        return self._identifier(info)

    def partitions_def(self, info: TableInfo) -> dg.DynamicPartitionsDefinition | None:
        """The table's dynamic partitions, mirroring its Hive partitions; None when it is not partitioned."""
        return dg.DynamicPartitionsDefinition(name=self.partitions_def_name(info)) if info.is_partitioned else None

    def metadata(self, info: TableInfo) -> dict[str, Any]:
        """Table name, location, format, codec, partition columns, and the schema of every column with Hive's
        types, the partition columns described as such."""
        columns = [
            dg.TableColumn(c.name, c.type, description=PARTITION_COLUMN if c.name in info.partition_columns else None)
            for c in info.columns
        ]
        return {
            TABLE_NAME: info.qualified_name,
            STORAGE_KIND: "hive",
            URI: info.location or "",
            "format": info.file_format,
            "codec": info.codec_property or "(from the files)",
            "partition_columns": ", ".join(info.partition_columns) or "(none)",
            COLUMN_SCHEMA: dg.TableSchema(columns=columns),
            **self.policy_metadata(info),
        }

    def policy_metadata(self, info: TableInfo) -> dict[str, str]:
        """The table's partition time, retention and archive policies (`table_overrides`), when it has any."""
        policies = self.policies.get(info.qualified_name)
        if policies is None:
            return {}
        time, retention, archive = policies.partition_time, policies.retention, policies.archive
        limit = f"older than {retention.older_than}, at most {retention.max_fraction:g} of the partitions a run"
        return {
            "partition_time": ", ".join(f"{c}: {f}" for c, f in (time or {}).items()) or "(not set)",
            "retention": limit if retention.older_than else "(not set)",
            "archive": f"older than {archive.older_than}, codec {archive.codec}" if archive.older_than else "(not set)",
        }

    def description(self, info: TableInfo) -> str:
        """What the table is and what materializing it does, for a partitioned or an unpartitioned table."""
        if info.is_partitioned:
            what = f"partitioned by {', '.join(info.partition_columns)}. Materializing a partition compacts its"
        else:
            what = "not partitioned. Materializing it compacts the table's"
        return (
            f"Hive external table {info.qualified_name} ({info.file_format}), {what} small files safely "
            "(backup, verify, journaled swap)."
        )

    def spec(self, info: TableInfo) -> dg.AssetSpec:
        """The table's asset: grouped by database, with its kinds, owners, tags, metadata and partitions."""
        return dg.AssetSpec(
            key=self.asset_key(info),
            group_name=info.database,
            description=self.description(info),
            kinds={"spark", "hive", info.file_format},
            owners=list(self.owners) or None,
            tags=dict(self.tags) or None,
            metadata=self.metadata(info),
            partitions_def=self.partitions_def(info),
        )

    def _identifier(self, info: TableInfo, prefix: str = "hive") -> str:
        """`_flattened`, or for a renamed table `<prefix>___<hash>__<database>__<table>` (its exact names hashed)."""
        name = _flattened(prefix, info.database, info.name)
        if (info.database, info.name) not in self.renamed:
            return name
        digest = hashlib.sha256(f"{info.database}.{info.name}".encode()).hexdigest()[:16]
        return f"{prefix}___{digest}__{name.removeprefix(f'{prefix}__')}"


def _flattened(prefix: str, database: str, name: str) -> str:
    """`<prefix>__<database>__<table>`, anything but letters, digits and `_` replaced by `_`: a valid Dagster name,
    shared by tables such as `a__b.c` and `a.b__c`."""
    return re.sub(r"[^A-Za-z0-9_]", "_", f"{prefix}__{database}__{name}")


def renamed_tables(tables: Iterable[TableInfo]) -> frozenset[tuple[str, str]]:
    """The tables that share their flattened name with another: each is named apart (none inherits a name, and the
    runs and partitions stored under it, that another table had). Every other table keeps the name Dagster instances
    already persist; a table's names change when a table sharing them is added, and come back when it is removed."""
    flattened = {(t.database, t.name): _flattened("hive", t.database, t.name) for t in tables}
    shared = Counter(flattened.values())
    return frozenset(table for table, name in flattened.items() if shared[name] > 1)


def translator_for(config: LakekeeperConfig, tables: Sequence[TableInfo]) -> HiveTableTranslator:
    """The translator of the location `config` builds for `tables`: the one every definition and the pool
    registration use."""
    return HiveTableTranslator(
        owners=config.asset_owners,
        tags=config.asset_tags,
        policies=config.table_overrides,
        renamed=renamed_tables(tables),
    )
