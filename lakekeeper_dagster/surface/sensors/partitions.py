"""hive_partitions_sensor: the tables' Hive partitions appear in Dagster on their own, each one holding data recorded.

Dagster 1.13 gives an asset partition one of four statuses — Materialized, Materializing, Failed, Missing — computed
from materializations and runs only (observations do not count for an asset that is materialized). A Hive partition
that holds data is therefore *registered* once, by a runless `AssetMaterialization` that says so in its metadata
(`lakekeeper/state`: `existing` and whether it needs compaction); a compaction later adds its own materialization
from its run. "Missing" means a Hive partition with no data file, nothing to compact — or, at an estate being
onboarded, one not registered yet: registering costs the instance ~25 ms a partition (days for millions), so a tick
registers at most `observation.max_registrations_per_tick`, newest first, the tables taking turns, and the next ticks
go on (the dynamic partitions themselves are added at once, one request a table). A registration's observation (what
file_count_sensor reads) is written only for a partition needing compaction.
"""

from __future__ import annotations

import json
from itertools import chain, zip_longest

import dagster as dg

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.errors import CatalogError
from lakekeeper_dagster.engine.fs.listing import list_directories
from lakekeeper_dagster.engine.hive.catalog import current_location, partition_names
from lakekeeper_dagster.engine.hive.model import TableInfo, Unit, partition_spec
from lakekeeper_dagster.engine.ops.analyze import plan_listed
from lakekeeper_dagster.engine.plan.units import UnitPlan
from lakekeeper_dagster.surface.failures import engine_failures
from lakekeeper_dagster.surface.metadata import STATE
from lakekeeper_dagster.surface.observations import observation_metadata
from lakekeeper_dagster.surface.partitions import partition_requests
from lakekeeper_dagster.surface.tables import current_table
from lakekeeper_dagster.surface.translator import HiveTableTranslator
from spark_resources.resource import HiveSparkResource

PARTITIONS_SENSOR = "hive_partitions_sensor"
INTERVAL_SECONDS = 120
EXISTING = "existing"  # registered: data found in place, never compacted by lakekeeper
UNCHANGED = "the Hive partitions are unchanged and every one holding data is registered"
LISTINGS = 3  # directory listings (Spark jobs) a tick at most while looking for partitions holding data
OFFSET = "offset"  # the sensor's cursor: where in the queue of unregistered partitions the next tick starts


def registration(key: dg.AssetKey, plan: UnitPlan) -> list[dg.AssetMaterialization | dg.AssetObservation]:
    """The runless materialization that marks a unit's existing data as Materialized, with its figures and whether
    it needs compaction, and, when it does, the observation the file-count sensor reads."""
    state = "existing data, needs compaction" if plan.needs_compaction else "existing data, no compaction needed"
    metadata = observation_metadata(plan)
    materialization = dg.AssetMaterialization(
        asset_key=key,
        partition=plan.partition,
        description=f"{state}: {plan.file_count} data file(s) found in place, not written by a compaction",
        metadata={STATE: EXISTING, **metadata},
    )
    if not plan.needs_compaction:
        return [materialization]
    return [materialization, dg.AssetObservation(asset_key=key, partition=plan.partition, metadata=metadata)]


def in_turn(pending: dict[str, list[str | None]]) -> list[tuple[str, str | None]]:
    """Every table's unregistered units, newest (last in Hive's order) first, the tables taking turns."""
    rounds = zip_longest(*[[(name, u) for u in reversed(units)] for name, units in pending.items()])
    return [entry for entry in chain.from_iterable(rounds) if entry is not None]


def _unregistered(
    instance: dg.DagsterInstance, info: TableInfo, names: list[str | None], translator: HiveTableTranslator
) -> list[str | None]:
    """The units (partition names, None for an unpartitioned table) never materialized: not registered, never
    compacted, no compaction failed or running. The instance has no status at all (None) for an asset it holds no
    event of yet."""
    key = translator.asset_key(info)
    if not info.is_partitioned:
        return [] if instance.get_latest_materialization_event(key) else names
    statuses = instance.get_status_by_partition(key, names, translator.partitions_def(info))
    return [name for name in names if (statuses or {}).get(name) is None]


def _units(session, info: TableInfo, names: list[str | None]) -> list[Unit]:
    """The units of these names as the metastore locates them now (one call a partition; a partition dropped since
    its name was read is left out)."""
    if not info.is_partitioned:
        return [Unit(None, info.location)]
    units = []
    for name in names:
        spec = partition_spec(name, info.partition_columns)
        if (location := current_location(session, info, spec)) is not None:
            units.append(Unit(spec, location))
    return units


def build_partitions_sensor(
    settings: LakekeeperConfig, tables: list[TableInfo], translator: HiveTableTranslator
) -> dg.SensorDefinition:
    """The code location's partition sensor: running by default, it writes only Dagster's own records.

    It reads each table's partition names (not the partitions: one call a table), and the locations of the
    partitions it lists to register them (one call each). It lists through the code server's own Spark session (the
    one that loaded the definitions, reused by `getOrCreate`), kept between ticks: the resource would stop it after
    each evaluation, and starting another every tick costs a SparkContext (on a cluster, an application).
    """
    kept: dict[str, HiveSparkResource] = {}

    @dg.sensor(
        name=PARTITIONS_SENSOR,
        minimum_interval_seconds=INTERVAL_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Keeps each table's dynamic partitions equal to its Hive partitions (from the metastore) and "
        "registers the partitions holding data that Dagster has no materialization of yet, with a runless "
        "materialization (lakekeeper/state: existing, needs_compaction and file figures in its metadata), at most "
        "observation.max_registrations_per_tick a tick, newest first. Reads the metastore and lists only "
        "unregistered partitions; never changes data.",
    )
    def hive_partitions_sensor(context: dg.SensorEvaluationContext, spark: HiveSparkResource) -> dg.SensorResult:
        instance = context.instance
        resource = kept.setdefault("spark", spark.model_copy(update={"stop_at_teardown": False}))
        observed: list[TableInfo] = []  # as the metastore has them now
        names: dict[str, list[str | None]] = {}  # their partition names (names only: one call a table)
        with engine_failures():
            session = resource.spark_session
            for info in tables:
                try:
                    now = current_table(session, info)
                    names[info.qualified_name] = partition_names(session, now) if now.is_partitioned else [None]
                except CatalogError as error:  # it does not stop the others
                    context.log.warning(f"{info.qualified_name} skipped: {error}")
                    continue
                observed.append(now)
        requests: list = []
        pending: dict[str, list[str | None]] = {}
        for info in observed:
            found = names[info.qualified_name]
            if info.is_partitioned:
                name = translator.partitions_def_name(info)
                changes = partition_requests(name, instance.get_dynamic_partitions(name), found)
                requests += changes
                for change in changes:
                    verb = "adding" if isinstance(change, dg.AddDynamicPartitionsRequest) else "removing"
                    context.log.info(f"{info.qualified_name}: {verb} {len(change.partition_keys)} partition(s)")
            pending[info.qualified_name] = _unregistered(instance, info, found, translator)
        offset = int(json.loads(context.cursor or "{}").get(OFFSET, 0))
        events, offset = _registrations(context, session, settings, observed, pending, translator, offset)
        cursor = json.dumps({OFFSET: offset})  # always: Dagster keeps the previous cursor when a tick gives none
        if not requests and not events:
            return dg.SensorResult(skip_reason=UNCHANGED, cursor=cursor)
        return dg.SensorResult(dynamic_partitions_requests=requests, asset_events=events, cursor=cursor)

    return hive_partitions_sensor


def _registrations(
    context: dg.SensorEvaluationContext,
    session,
    settings: LakekeeperConfig,
    observed: list[TableInfo],
    pending: dict[str, list[str | None]],
    translator: HiveTableTranslator,
    offset: int,
) -> tuple[list[dg.AssetMaterialization | dg.AssetObservation], int]:
    """The registrations of up to `max_registrations_per_tick` unregistered units holding data, and where the next
    tick starts in the queue. Directories are listed a budget's worth at a time (an empty partition stays
    unregistered and takes no place in the budget), at most LISTINGS times a tick, from `offset`: a tick that found
    too many empty partitions to fill its budget lets the next one start past them (registered ones leave the
    queue), and the queue starts over from the newest once a tick fills its budget or reaches the queue's end."""
    budget, thresholds = settings.observation.max_registrations_per_tick, settings.thresholds()
    tables = {info.qualified_name: info for info in observed}
    queue, plans = in_turn(pending), {}
    start = offset if offset < len(queue) else 0
    listed = start
    for _ in range(LISTINGS):
        chunk = queue[listed : listed + budget - sum(len(p) for p in plans.values())]
        if not chunk:
            break
        listed += len(chunk)
        by_table: dict[str, list[str | None]] = {}
        for name, unit in chunk:
            by_table.setdefault(name, []).append(unit)
        with engine_failures():
            units = {name: _units(session, tables[name], chosen) for name, chosen in by_table.items()}
            what = f"register {len(chunk)} partition(s)"
            locations = [u.location for table in units.values() for u in table]
            listing = list_directories(session, locations, what, thresholds.min_file_bytes)
        for name, table in units.items():
            plans.setdefault(name, []).extend(p for p in plan_listed(table, listing, thresholds) if p.file_count)
    events: list = []
    for info in observed:
        chosen = sorted(plans.get(info.qualified_name, []), key=lambda p: p.partition or "")
        for plan in chosen:
            events += registration(translator.asset_key(info), plan)
        if chosen:
            context.log.info(
                f"{info.qualified_name}: {len(chosen)} partition(s) holding data registered, "
                f"{sum(p.needs_compaction for p in chosen)} of them need compaction"
            )
    registered = sum(len(p) for p in plans.values())
    if listed < len(queue) or start:
        context.log.info(
            f"{len(queue) - registered} partition(s) not registered (empty, or left for the next ticks: "
            f"observation.max_registrations_per_tick {budget})"
        )
    filled = registered >= budget or listed >= len(queue)
    return events, 0 if filled else start + (listed - start - registered)
