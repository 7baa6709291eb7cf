"""The file-count sensor's cursor: pending units keep their figures, the hour's requests are counted and expire,
and a cursor written before the figures were kept still reads."""

from __future__ import annotations

import json

import pytest

from lakekeeper_dagster.engine.plan.requests import Observed
from lakekeeper_dagster.surface.sensors.cursor import read_cursor, write_cursor

pytestmark = pytest.mark.pure


def test_a_cursor_round_trips_and_forgets_requests_older_than_an_hour():
    pending = {"db.t": {"p=1": Observed("p=1", 7, 30, True, files_removed=29, bytes_rewritten=5)}}
    text = write_cursor({"db.t": 9, "min_files:db.t": 5}, pending, [(1000.0, 10), (4000.0, 20)], now=5000.0)
    kept = read_cursor(text, {"db.t": 5})
    assert kept.marks == {"db.t": 9, "min_files:db.t": 5}
    assert kept.pending == pending and kept.requested == [(4000.0, 20)]
    assert kept.spent(5000.0) == 20 and kept.spent(7601.0) == 0


def test_a_cursor_of_an_older_version_reads_its_pending_units_without_figures():
    kept = read_cursor(json.dumps({"db.t": 3, "pending:db.t": [["p=1", 2], [None, 3]]}), {"db.t": 6})
    assert kept.pending == {"db.t": {"p=1": Observed("p=1", 2, 6, True), None: Observed(None, 3, 6, True)}}
    assert kept.requested == [] and kept.marks == {"db.t": 3}
