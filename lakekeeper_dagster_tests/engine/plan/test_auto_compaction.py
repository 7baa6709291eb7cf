"""Choosing what the sensor requests is pure Python: thresholds, in-flight, back-off, run grouping, caps, cursor."""

from __future__ import annotations

import pytest

from lakekeeper_dagster.engine.plan.requests import Observed, TableState, plan_tick

pytestmark = pytest.mark.pure

ORDER = [f"date=2024-01-{day:02d}" for day in range(1, 11)]


def observed(partition, storage_id, files, needs=True):
    return Observed(partition, storage_id, files, needs)


def state(observations, **kwargs):
    return TableState(
        table=kwargs.pop("table", "db.t"),
        observations=observations,
        partition_order=kwargs.pop("order", ORDER),
        min_files=kwargs.pop("min_files", 5),
        **kwargs,
    )


def test_requests_only_units_over_threshold_in_one_run_in_partition_order():
    plan = plan_tick(
        [
            state(
                [
                    observed(ORDER[4], 11, 50),
                    observed(ORDER[0], 12, 50),
                    observed(ORDER[1], 13, 4),  # below min_files
                    observed(ORDER[2], 14, 80, needs=False),  # the plan says the files are not small
                ]
            )
        ],
        cursor={"db.t": 10},
        max_runs=10,
        max_partitions_per_run=200,
    )
    assert [(r.table, r.partitions, r.last_storage_id) for r in plan.runs] == [("db.t", (ORDER[0], ORDER[4]), 12)]
    assert plan.cursor == {"db.t": 14}


def test_the_newest_observation_of_a_unit_decides():
    plan = plan_tick(
        [state([observed(ORDER[0], 1, 50), observed(ORDER[0], 2, 1, needs=False), observed(ORDER[1], 3, 1, False)])],
        cursor={},
        max_runs=10,
        max_partitions_per_run=10,
    )
    assert plan.runs == [] and plan.cursor == {"db.t": 3}


def test_in_flight_and_backed_off_units_are_not_requested_and_are_reported():
    plan = plan_tick(
        [state([observed(p, i, 50) for i, p in enumerate(ORDER[:4])], in_flight={ORDER[0]}, backed_off={ORDER[1]})],
        cursor={},
        max_runs=10,
        max_partitions_per_run=10,
    )
    assert [r.partitions for r in plan.runs] == [(ORDER[2], ORDER[3])]
    assert plan.in_flight == {"db.t": [ORDER[0]]} and plan.backed_off == {"db.t": [ORDER[1]]}


def test_runs_are_capped_and_the_cursor_moves_back_to_what_was_left():
    observations = [observed(p, 100 + i, 50) for i, p in enumerate(ORDER)]
    first = plan_tick([state(observations)], cursor={}, max_runs=2, max_partitions_per_run=3)
    assert [r.partitions for r in first.runs] == [tuple(ORDER[0:3]), tuple(ORDER[3:6])]
    assert first.deferred == {"db.t": 4} and first.cursor == {"db.t": 105}
    # The next tick reads from the cursor on; the requested partitions are in flight by then.
    again = [o for o in observations if o.storage_id > first.cursor["db.t"]]
    second = plan_tick([state(again)], cursor=first.cursor, max_runs=2, max_partitions_per_run=3)
    assert [r.partitions for r in second.runs] == [tuple(ORDER[6:9]), (ORDER[9],)]
    assert second.deferred == {} and second.cursor == {"db.t": 109}


def test_unpartitioned_tables_partitions_gone_and_other_tables_keep_their_cursor():
    plan = plan_tick(
        [
            state([observed(None, 7, 30)], table="db.flat", order=[]),
            state([observed("date=1999-01-01", 8, 30)]),  # observed, then removed from Hive
        ],
        cursor={"db.other": 3},
        max_runs=10,
        max_partitions_per_run=10,
    )
    assert [(r.table, r.partitions) for r in plan.runs] == [("db.flat", (None,))]
    assert plan.cursor == {"db.other": 3, "db.flat": 7, "db.t": 8}


def test_records_that_are_not_file_counts_still_move_the_cursor():
    plan = plan_tick([state([], read_up_to=42)], cursor={"db.t": 40}, max_runs=1, max_partitions_per_run=1)
    assert plan.runs == [] and plan.cursor == {"db.t": 42}
