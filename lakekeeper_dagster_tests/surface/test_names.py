"""Tables whose names flatten alike each get job, op and partitions-definition names of their own; a table no other
collides with keeps the names instances persist."""

from __future__ import annotations

import itertools

import dagster as dg
import pytest

from lakekeeper_dagster.config import LakekeeperConfig
from lakekeeper_dagster.engine.hive.model import Column, TableInfo
from lakekeeper_dagster.surface.build import definitions_from_state
from lakekeeper_dagster.surface.state import LocationState
from lakekeeper_dagster.surface.tables import ManagedTables
from lakekeeper_dagster.surface.translator import HiveTableTranslator, renamed_tables

pytestmark = pytest.mark.pure

# Legal Hive names built to flatten alike: `_` runs at the join; in a table's name (between backquotes) a `-` that
# flattening turns into `_` (a database's name is letters, digits and `_`).
DATABASES = ["a", "b", "a_b", "a__b", "_b", "a_", "b__c", "c"]
TABLES = [*DATABASES, "a-b", "b-c"]


def info(database: str, name: str, partitioned: bool = True) -> TableInfo:
    columns = (Column("id", "bigint"), Column("date", "string"))
    return TableInfo(
        database, name, "EXTERNAL", "hive", None, None, None, f"file:/w/{database}/{name}", columns,
        ("date",) if partitioned else (),
    )  # fmt: skip


def names(translator: HiveTableTranslator, table: TableInfo) -> tuple[str, str, str]:
    return translator.job_name(table), translator.op_name(table), translator.partitions_def_name(table)


def test_every_pair_of_tables_gets_names_of_its_own_and_a_table_alone_keeps_its_names():
    tables = [info(d, t) for d, t in itertools.product(DATABASES, TABLES)]
    renamed = renamed_tables(tables)
    translator = HiveTableTranslator(renamed=renamed)

    given = {(t.database, t.name): names(translator, t) for t in tables}

    for kind in range(3):  # job, op, partitions definition: each unique over the tables
        assert len({n[kind] for n in given.values()}) == len(tables)
    assert all(
        HiveTableTranslator().pool(t) != HiveTableTranslator().pool(u) for t, u in itertools.combinations(tables, 2)
    )
    # Both of a colliding pair are renamed (neither inherits the other's stored runs and partitions) ...
    assert {("a__b", "c"), ("a", "b__c"), ("a", "a_b"), ("a", "a-b")} <= renamed
    assert given["a", "a_b"][0].startswith("Compact___") and given["a", "a-b"][1].startswith("hive___")
    # ... and a table no other collides with keeps what instances persist, plain or not.
    for database, name in [("b", "c"), ("c", "b__c"), ("_b", "a_")]:
        assert (database, name) not in renamed
        assert given[database, name] == (f"Compact__{database}__{name}", *[f"hive__{database}__{name}"] * 2)


def test_a_location_with_tables_whose_names_flatten_alike_loads_each_with_its_own_job():
    tables = [info("a__b", "c"), info("a", "b__c"), info("a_b", "c"), info("a", "b-c", partitioned=False)]
    tables.append(info("a", "b_c"))  # a plain name, shared with a.b-c
    state = LocationState(ManagedTables(tables=tables), read_at=None)

    location = definitions_from_state(LakekeeperConfig(), state)

    dg.Definitions.validate_loadable(location)
    for table in tables:
        job = location.resolve_job_def(HiveTableTranslator(renamed=renamed_tables(tables)).job_name(table))
        assert job.asset_layer.executable_asset_keys == {dg.AssetKey(["hive", table.database, table.name])}
    assert location.resolve_job_def("Compact__a_b__c")  # colliding with none: its name, as before
