"""A table's Dagster names as the code location's translator gives them, from a database and table name."""

from __future__ import annotations

from types import SimpleNamespace

import dagster as dg

from lakekeeper_dagster.surface.translator import HiveTableTranslator

TRANSLATOR = HiveTableTranslator()


def asset_key(database: str, table: str) -> dg.AssetKey:
    return TRANSLATOR.asset_key(SimpleNamespace(database=database, name=table))


def partitions_def_name(database: str, table: str) -> str:
    return TRANSLATOR.partitions_def_name(SimpleNamespace(database=database, name=table))


def job_name(database: str, table: str) -> str:
    return TRANSLATOR.job_name(SimpleNamespace(database=database, name=table))


def op_name(database: str, table: str) -> str:
    return TRANSLATOR.op_name(SimpleNamespace(database=database, name=table))
