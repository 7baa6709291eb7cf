"""Quiet hours: daily windows ("HH:MM-HH:MM", in one time zone) in which the sensor requests no compaction."""

from __future__ import annotations

import re
from datetime import datetime, time, timedelta

WINDOW = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)$")


def parse_window(text: str) -> tuple[time, time]:
    """A window's start and end; one whose end is not after its start runs past midnight ("22:00-06:00")."""
    match = WINDOW.match(text.strip())
    if not match:
        raise ValueError(f"quiet hours {text!r}: expected HH:MM-HH:MM, e.g. 08:00-18:00 or 22:00-06:00")
    h1, m1, h2, m2 = (int(g) for g in match.groups())
    if (h1, m1) == (h2, m2):
        raise ValueError(f"quiet hours {text!r}: the window is empty (its start is its end)")
    return time(h1, m1), time(h2, m2)


def quiet_until(now: datetime, windows: list[str]) -> datetime | None:
    """When the quiet window `now` (an aware time in the windows' zone) falls in ends; None outside them."""
    ends = []
    for text in windows:
        start, end = parse_window(text)
        for day in (now.date() - timedelta(days=1), now.date()):  # a window that began yesterday may hold now
            begins = datetime.combine(day, start, now.tzinfo)
            finishes = datetime.combine(day + timedelta(days=end <= start), end, now.tzinfo)
            if begins <= now < finishes:
                ends.append(finishes)
    return max(ends) if ends else None
