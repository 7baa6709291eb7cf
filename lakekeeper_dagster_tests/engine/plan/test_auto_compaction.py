"""Choosing what the sensor requests is pure Python: thresholds, in-flight, back-off, run grouping, caps, cursor."""

from __future__ import annotations

import pytest

from lakekeeper_dagster.engine.plan.requests import Budget, Observed, TableState, plan_tick

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
        budget=Budget(10, 200),
    )
    assert [(r.table, r.partitions, r.last_storage_id) for r in plan.runs] == [("db.t", (ORDER[0], ORDER[4]), 12)]
    assert plan.cursor == {"db.t": 14}


def test_the_newest_observation_of_a_unit_decides():
    plan = plan_tick(
        [state([observed(ORDER[0], 1, 50), observed(ORDER[0], 2, 1, needs=False), observed(ORDER[1], 3, 1, False)])],
        cursor={},
        budget=Budget(10, 10),
    )
    assert plan.runs == [] and plan.cursor == {"db.t": 3}


def test_in_flight_and_backed_off_units_are_not_requested_and_are_reported():
    plan = plan_tick(
        [state([observed(p, i, 50) for i, p in enumerate(ORDER[:4])], in_flight={ORDER[0]}, backed_off={ORDER[1]})],
        cursor={},
        budget=Budget(10, 10),
    )
    assert [r.partitions for r in plan.runs] == [(ORDER[2], ORDER[3])]
    assert plan.in_flight == {"db.t": [ORDER[0]]} and plan.backed_off == {"db.t": [ORDER[1]]}


def test_runs_are_capped_and_the_cursor_moves_back_to_what_was_left():
    observations = [observed(p, 100 + i, 50) for i, p in enumerate(ORDER)]
    first = plan_tick([state(observations)], cursor={}, budget=Budget(2, 3))
    assert [r.partitions for r in first.runs] == [tuple(ORDER[0:3]), tuple(ORDER[3:6])]
    assert first.deferred == {"db.t": 4} and first.cursor == {"db.t": 105}
    # The next tick reads from the cursor on; the requested partitions are in flight by then.
    again = [o for o in observations if o.storage_id > first.cursor["db.t"]]
    second = plan_tick([state(again)], cursor=first.cursor, budget=Budget(2, 3))
    assert [r.partitions for r in second.runs] == [tuple(ORDER[6:9]), (ORDER[9],)]
    assert second.deferred == {} and second.cursor == {"db.t": 109}


def test_unpartitioned_tables_partitions_gone_and_other_tables_keep_their_cursor():
    plan = plan_tick(
        [
            state([observed(None, 7, 30)], table="db.flat", order=[]),
            state([observed("date=1999-01-01", 8, 30)]),  # observed, then removed from Hive
        ],
        cursor={"db.other": 3},
        budget=Budget(10, 10),
    )
    assert [(r.table, r.partitions) for r in plan.runs] == [("db.flat", (None,))]
    assert plan.cursor == {"db.other": 3, "db.flat": 7, "db.t": 8}


def test_records_that_are_not_file_counts_still_move_the_cursor():
    plan = plan_tick([state([], read_up_to=42)], cursor={"db.t": 40}, budget=Budget(1, 1))
    assert plan.runs == [] and plan.cursor == {"db.t": 42}


MB = 1024**2


def weighed(partition, storage_id, removed, size_mb, files=50):
    return Observed(partition, storage_id, files, True, files_removed=removed, bytes_rewritten=size_mb * MB)


def test_the_best_ranked_units_are_requested_first_across_tables():
    """Files removed per GB rewritten, times the table's priority, decides; the runs come best first."""
    plan = plan_tick(
        [
            state([weighed(ORDER[0], 1, 10, 100), weighed(ORDER[1], 2, 40, 100)], table="db.a"),
            state([weighed(ORDER[0], 3, 20, 100)], table="db.b", priority=3.0),
            state([weighed(ORDER[0], 4, 49, 10)], table="db.c"),
        ],
        cursor={},
        budget=Budget(2, 1),
    )
    # scores: c 4.9 per MB, b 0.6 (0.2 x 3), a/1 0.4, a/0 0.1: two runs of one unit each
    assert [(r.table, r.partitions) for r in plan.runs] == [("db.c", (ORDER[0],)), ("db.b", (ORDER[0],))]
    assert plan.deferred == {"db.a": 2} and plan.cursor["db.a"] == 0  # read again from before its first
    assert plan.bytes_requested == 110 * MB


def test_a_tables_chosen_units_share_runs_in_partition_order():
    observations = [weighed(p, i + 1, 50 - i, 10) for i, p in enumerate(ORDER[:5])]
    plan = plan_tick([state(observations)], cursor={}, budget=Budget(10, 3))
    assert [r.partitions for r in plan.runs] == [tuple(ORDER[0:3]), tuple(ORDER[3:5])]


def test_the_hourly_byte_budget_takes_the_best_that_fit_and_leaves_the_rest():
    observations = [weighed(ORDER[0], 1, 40, 60), weighed(ORDER[1], 2, 30, 50), weighed(ORDER[2], 3, 5, 30)]
    plan = plan_tick([state(observations)], cursor={"db.t": 0}, budget=Budget(10, 10, 100 * MB, spent=10 * MB))
    # ORDER[1] (0.6/MB) fits in 90 MB, ORDER[0] (0.67/MB) first: 60 + 50 > 90, so ORDER[1] waits; ORDER[2] fits
    assert [r.partitions for r in plan.runs] == [(ORDER[0], ORDER[2])]
    assert plan.over_bytes == {"db.t": 1} and plan.cursor == {"db.t": 1} and plan.bytes_requested == 90 * MB
    spent = plan_tick([state(observations)], cursor={}, budget=Budget(10, 10, 100 * MB, spent=100 * MB))
    assert spent.runs == [] and spent.over_bytes == {"db.t": 3} and spent.cursor == {"db.t": 0}


def test_a_unit_larger_than_the_whole_budget_runs_alone_once_the_hour_is_empty():
    big, small = weighed(ORDER[0], 1, 900, 500), weighed(ORDER[1], 2, 1, 10)
    plan = plan_tick([state([big, small])], cursor={}, budget=Budget(10, 10, 100 * MB))
    assert [r.partitions for r in plan.runs] == [(ORDER[0],)] and plan.over_bytes == {"db.t": 1}
    later = plan_tick([state([big])], cursor={}, budget=Budget(10, 10, 100 * MB, spent=1))
    assert later.runs == [] and later.over_bytes == {"db.t": 1}


def test_an_observation_stored_before_the_run_that_settled_its_unit_started_is_stale():
    """Read again after the cursor moved back, or kept pending, an observation from before the start of the unit's
    last settling run (storage ids, not clocks) is not requested."""
    old, new, kept = weighed(ORDER[0], 1, 40, 10), weighed(ORDER[1], 7, 40, 10), weighed(ORDER[2], 2, 40, 10)
    acted = {ORDER[0]: 5, ORDER[1]: 5, ORDER[2]: 5}
    plan = plan_tick([state([old, new], pending={ORDER[2]: kept}, acted_on=acted)], cursor={}, budget=Budget(10, 10))
    assert [r.partitions for r in plan.runs] == [(ORDER[1],)]


def test_a_unit_over_the_whole_budget_waits_for_an_hour_it_is_first_in():
    small, big = weighed(ORDER[0], 1, 40, 1), weighed(ORDER[1], 2, 90, 500)  # small ranks first
    plan = plan_tick([state([small, big])], cursor={}, budget=Budget(10, 10, 100 * MB))
    assert [r.partitions for r in plan.runs] == [(ORDER[0],)] and plan.over_bytes == {"db.t": 1}
