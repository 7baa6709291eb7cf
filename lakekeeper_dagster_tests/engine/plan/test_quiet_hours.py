"""Quiet hours: daily windows in one time zone, also across midnight; a malformed window is refused by name."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from lakekeeper_dagster.engine.plan.quiet_hours import parse_window, quiet_until

pytestmark = pytest.mark.pure


def test_quiet_hours_end_when_their_window_does_also_past_midnight():
    at = datetime(2026, 12, 7, 23, 30, tzinfo=timezone.utc)
    assert quiet_until(at, ["22:00-06:00"]) == datetime(2026, 12, 8, 6, 0, tzinfo=timezone.utc)
    assert quiet_until(at.replace(day=8, hour=5), ["22:00-06:00"]) == datetime(2026, 12, 8, 6, 0, tzinfo=timezone.utc)
    assert quiet_until(at.replace(hour=6), ["22:00-06:00", "08:00-18:00"]) is None
    assert quiet_until(at.replace(hour=8), ["08:00-18:00"]) == at.replace(hour=18, minute=0)
    assert quiet_until(at.replace(hour=18, minute=0), ["08:00-18:00"]) is None
    for bad in ("8:00-18:00", "08:00-24:00", "08:00-08:00", "08:00"):
        with pytest.raises(ValueError, match="quiet hours"):
            parse_window(bad)
