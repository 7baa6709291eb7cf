"""Merge's plan and view texts, pure Python: periods grouped and selected by the coarse clock, late and untimed
partitions left alone, the view's filters naming exact values, and a period too big for the view's text refused."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from lakekeeper_dagster.engine.errors import ConfigError
from lakekeeper_dagster.engine.hive.model import Column, TableInfo, partition_name
from lakekeeper_dagster.engine.plan.merge import FineCandidate, merge_layout, plan_merge
from lakekeeper_dagster.engine.plan.merge_view import VIEW_TEXT_LIMIT, UnionView
from lakekeeper_dagster.engine.plan.partition_time import PartitionClock

pytestmark = pytest.mark.pure


def table(partitions: dict[str, str]) -> TableInfo:
    columns = (Column("id", "bigint"), *(Column(c, t) for c, t in partitions.items()))
    return TableInfo("d", "t", "EXTERNAL", "hive", None, None, None, "file:/w/t", columns, tuple(partitions))


def candidate(spec: dict[str, str]) -> FineCandidate:
    name = partition_name(spec)
    return FineCandidate(name, spec, f"file:/w/t/{name}", {"f": [1, 1]})


FLAT_CLOCK = PartitionClock.of({"dt": "%Y%m%d%H"}, "d.t")
FLAT = merge_layout(table({"dt": "string"}), FLAT_CLOCK, "%Y%m")
VIEW = UnionView("`d`.`t`", "`d`.`t__merged`", FLAT)


def plan(candidates, merged=frozenset(), cutoff=datetime(2024, 6, 1)):
    fits = lambda p: VIEW.fits(p.spec, [f.spec for f in p.fine])  # noqa: E731
    return plan_merge("d.t", "file:/w/t", "d.t__merged", "d.v", FLAT, FLAT_CLOCK, candidates, set(merged), cutoff, fits)


def test_periods_are_whole_coarse_periods_older_than_the_cutoff():
    specs = [{"dt": v} for v in ("2024043023", "2024050100", "2024053123", "2024060100", "latest")]
    done = plan([candidate(s) for s in specs])
    assert [(p.partition, [f.partition for f in p.fine]) for p in done.periods] == [
        ("dt=202404", ["dt=2024043023"]),
        ("dt=202405", ["dt=2024050100", "dt=2024053123"]),
    ]
    assert done.untimed == ("dt=latest",) and done.kept == ()
    late = plan([candidate(s) for s in specs], merged={"dt=202404"})
    assert [p.partition for p in late.kept] == ["dt=202404"] and "late" in (late.kept[0].reason or "")


def test_a_period_with_a_fine_partition_outside_the_table_is_left_alone():
    """Its files may be another table's (a shared landing directory): merge never moves them."""
    specs = [{"dt": "2024050100"}, {"dt": "2024050101"}, {"dt": "2024040100"}]
    away = FineCandidate("dt=2024050101", specs[1], "file:/landing/feed/2024050101", {"f": [1, 1]})
    done = plan([candidate(specs[0]), away, candidate(specs[2])])
    assert [p.partition for p in done.periods] == ["dt=202404"]
    assert [p.partition for p in done.kept] == ["dt=202405"]
    assert "file:/landing/feed/2024050101 of dt=2024050101 is not inside the table's" in (done.kept[0].reason or "")


def test_the_view_texts_name_exact_values_and_keep_null_partitions():
    spec, fine = {"dt": "202405"}, [{"dt": "2024050100"}, {"dt": "2024053123"}]
    assert (
        VIEW.base() == "SELECT `id`, `dt` FROM `d`.`t` UNION ALL SELECT `id`, `dt__fine` AS `dt` FROM `d`.`t__merged`"
    )
    assert VIEW.pending(spec).endswith("FROM `d`.`t__merged` WHERE NOT coalesce(`dt` = '202405', false)")
    switched = VIEW.switched(spec, fine)
    assert "FROM `d`.`t` WHERE NOT coalesce(`dt` IN ('2024050100', '2024053123'), false) UNION ALL" in switched
    nested_clock = PartitionClock.of({"y": "%Y", "m": "%m", "h": "%d%H"}, "d.t")
    nested = merge_layout(table({"y": "string", "m": "string", "h": "string"}), nested_clock, ["y"])
    text = UnionView("s", "m", nested).switched({"y": "2024"}, [{"y": "2024", "m": "05", "h": "0100"}])
    assert "WHERE NOT coalesce(`y` = '2024' AND (`m`, `h`) IN (('05', '0100')), false)" in text


def test_a_period_whose_filter_would_not_fit_the_view_text_is_left_alone():
    hours = [datetime(2019, 1, 1) + timedelta(hours=h) for h in range(24 * 365)]
    yearly = merge_layout(table({"dt": "string"}), FLAT_CLOCK, "%Y")
    view = UnionView("`d`.`t`", "`d`.`m`", yearly)
    fine = [{"dt": h.strftime("%Y%m%d%H")} for h in hours]
    assert not view.fits({"dt": "2019"}, fine) and len(view.switched({"dt": "2019"}, fine)) > VIEW_TEXT_LIMIT
    month = [f for f in fine if f["dt"].startswith("201901")]
    assert VIEW.fits({"dt": "201901"}, month)  # a month of hours fits


@pytest.mark.parametrize(
    ("partitions", "clock", "into", "message"),
    [
        ({"dt": "int"}, {"dt": "%Y%m%d%H"}, "%Y%m", "partition_time: the time columns must be STRING"),
        ({"dt": "string"}, {"dt": "%Y%m%d%H"}, "%H", "merge.into: .*no column gives the year"),
        ({"dt": "string"}, {"dt": "%Y%m%d"}, "%Y%m%d", "merge.into: '%Y%m%d' fixes the day, no coarser"),
        ({"y": "string", "d": "string"}, {"y": "%Y", "d": "%m%d"}, ["d"], "merge.into: \\['d'\\] must be the first"),
        ({"y": "string", "d": "string"}, {"y": "%Y", "d": "%m%d"}, "%Y", "merge.into: a format"),
        ({"y": "string", "r": "string"}, {"y": "%Y"}, ["y"], "partition_time must name every partition column"),
    ],
)
def test_a_layout_that_does_not_fit_names_the_key(partitions, clock, into, message):
    with pytest.raises(ConfigError, match=message):
        merge_layout(table(partitions), PartitionClock.of(clock, "d.t"), into)
