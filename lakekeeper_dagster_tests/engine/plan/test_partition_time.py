"""The time of a partition from its values (pure Python: no Spark)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from lakekeeper_dagster.config import parse_config
from lakekeeper_dagster.engine.errors import ConfigError
from lakekeeper_dagster.engine.plan.partition_time import PartitionClock, parse_age
from lakekeeper_dagster.engine.policies import policy_age

pytestmark = pytest.mark.pure

FLAT = PartitionClock.of({"dt": "%Y%m%d%H"}, "db.flat")
NESTED = PartitionClock.of({"year": "%Y", "month": "%m", "day": "%d", "hour": "%H"}, "db.nested")
DAILY = PartitionClock.of({"date": "%Y-%m-%d"}, "db.daily")
MONTHLY = PartitionClock.of({"ym": "%Y%m"}, "db.monthly")


def test_flat_and_nested_values_give_the_same_hour():
    assert FLAT.start({"dt": "2019041316"}) == datetime(2019, 4, 13, 16)
    assert FLAT.end({"dt": "2019041316"}) == datetime(2019, 4, 13, 17)
    nested = {"year": "2019", "month": "04", "day": "13", "hour": "16"}
    assert NESTED.start(nested) == datetime(2019, 4, 13, 16)
    assert NESTED.start({k.upper(): v for k, v in nested.items()}) == datetime(2019, 4, 13, 16)  # Hive lowercases


@pytest.mark.parametrize(
    "clock, spec",
    [
        (DAILY, {"date": "2024-1-1"}),  # does not round-trip
        (DAILY, {"date": "__HIVE_DEFAULT_PARTITION__"}),
        (DAILY, {"date": "2023-02-29"}),
        (FLAT, {"dt": "20190413"}),
        (NESTED, {"year": "2019", "month": "02", "day": "30", "hour": "00"}),  # a day February does not have
        (NESTED, {"year": "2019", "month": "02", "hour": "00"}),  # a column missing
    ],
)
def test_values_that_do_not_parse_are_untimed(clock, spec):
    assert clock.start(spec) is None
    selection = clock.select_older([spec], datetime(2100, 1, 1))
    assert selection.untimed == (spec,) and not selection.older and not selection.newer


def test_a_partition_is_older_only_when_its_whole_period_ended():
    cutoff = datetime(2024, 3, 10, 12)
    specs = [{"ym": "202402"}, {"ym": "202403"}, {"ym": "bad"}]
    selection = MONTHLY.select_older(specs, cutoff)
    assert selection.older == ({"ym": "202402"},)
    assert selection.newer == ({"ym": "202403"},)
    assert selection.untimed == ({"ym": "bad"},)
    assert MONTHLY.end({"ym": "202412"}) == datetime(2025, 1, 1)
    assert FLAT.select_older([{"dt": "2024031011"}], cutoff).older  # ended exactly at the cutoff
    assert FLAT.select_older([{"dt": "2024031012"}], cutoff).newer
    named = MONTHLY.select_older([("a", {"ym": "202402"}), ("b", {"ym": "x"})], cutoff, spec_of=lambda item: item[1])
    assert named.older == (("a", {"ym": "202402"}),) and named.untimed == (("b", {"ym": "x"}),)


def test_pre_gregorian_and_far_future_values_parse():
    assert DAILY.start({"date": "1500-02-29"}) is None  # proleptic Gregorian: 1500 is not a leap year
    assert DAILY.start({"date": "1582-10-05"}) == datetime(1582, 10, 5)  # a day the Julian switch skipped
    assert DAILY.end({"date": "9999-12-30"}) == datetime(9999, 12, 31)


@pytest.mark.parametrize(
    "setting, message",
    [
        (None, "table_overrides.db.t.partition_time"),
        ({}, "table_overrides.db.t.partition_time"),
        ({"dt": "%Y%m%d%Hx%Z"}, "%Z"),
        ({"dt": "day-%d"}, "year"),
        ({"dt": "constant"}, "none"),
        ({"year": "%Y", "day": "%d"}, "fix the day but not the month"),  # 15 December would read as 15 January
        ({"dt": "%Y%m%H"}, "fix the hour but not the day"),
        ({"y": "%Y", "doy": "%j"}, "%j"),  # a day of the year needs its year to give a date: not supported
    ],
)
def test_an_unusable_partition_time_is_refused_naming_the_key(setting, message):
    with pytest.raises(ConfigError, match=message):
        PartitionClock.of(setting, "db.t")


def test_a_clock_column_must_be_a_partition_column():
    with pytest.raises(ConfigError, match="names dt, which is not a partition column"):
        FLAT.check_columns(["year", "month"], "db.flat")
    NESTED.check_columns(["YEAR", "month", "day", "hour"], "db.nested")


def test_ages():
    assert parse_age("90d", "x") == timedelta(days=90)
    assert parse_age(" 36h ", "x") == timedelta(hours=36)
    assert parse_age("2w", "x") == timedelta(weeks=2)
    for bad in ("0d", "90", "1y", "-3d", "d"):
        with pytest.raises(ConfigError, match="x: .* is not an age"):
            parse_age(bad, "x")
    with pytest.raises(ConfigError, match=r"--older-than \(e.g. 90d\) or set table_overrides.db.t.retention"):
        policy_age(None, None, "retention.older_than", "db.t")
    assert policy_age("2d", "90d", "retention.older_than", "db.t") == timedelta(days=2)


def test_policies_in_the_config_file():
    config = parse_config(
        {
            "table_overrides": {
                "db.t": {
                    "partition_time": {"year": "%Y", "month": "%m"},
                    "retention": {"older_than": "400d", "max_fraction": 0.9},
                    "archive": {"older_than": "90d", "codec": "ZSTD"},
                }
            }
        },
        "test",
    )
    policies = config.policies_for("db", "t")
    assert policies.clock("db.t").step == "month"
    assert policies.retention.max_fraction == 0.9 and policies.archive.codec == "zstd"
    assert config.policies_for("db", "other").retention.older_than is None
    with pytest.raises(ConfigError, match="table_overrides.db.other.partition_time"):
        config.policies_for("db", "other").clock("db.other")
    for bad, key in [
        ({"retention": {"older_than": "soon"}}, "table_overrides.db.t.retention.older_than"),
        ({"retention": {"max_fraction": 2}}, "table_overrides.db.t.retention.max_fraction"),
        ({"archive": {"codec": "brotli9"}}, "table_overrides.db.t.archive.codec"),
        ({"retention": {"keep": 3}}, "table_overrides.db.t.retention.keep: unknown key"),
    ]:
        with pytest.raises(ConfigError, match=key):
            parse_config({"table_overrides": {"db.t": bad}}, "test")
