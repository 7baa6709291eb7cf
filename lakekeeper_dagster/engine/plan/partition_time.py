"""The time of a Hive partition, read from its values: one column with a strftime format (`dt='2019041316'`) or
several (`year=2019/month=04/day=16/hour=19`), per table (`table_overrides.<db.table>.partition_time`).

Pure Python. A value parses only when it round-trips exactly (`2024-1-1` is not `%Y-%m-%d`); a partition whose
values do not parse is *untimed*: reported and left alone by every time-based operation. Times are naive and read as
UTC. A partition is older than a cutoff only when the whole period it covers (its finest directive: an hour, a day,
a month...) ended at or before the cutoff.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Generic, TypeVar

from lakekeeper_dagster.engine.errors import ConfigError

# The strftime directives a partition column may use, finest first, with the period each one fixes.
STEP_ORDER = ("second", "minute", "hour", "day", "month", "year")
STEPS = {
    "S": "second",
    "M": "minute",
    "H": "hour",
    "d": "day",
    "m": "month",
    "b": "month",
    "B": "month",
    "Y": "year",
    "y": "year",
}
_DIRECTIVE = re.compile(r"%(.)")
_AGE = re.compile(r"^\s*(\d+)\s*([hdw])\s*$")
_AGE_UNITS = {"h": timedelta(hours=1), "d": timedelta(days=1), "w": timedelta(weeks=1)}

Spec = Mapping[str, str]
Item = TypeVar("Item")


def directives(fmt: str) -> list[str]:
    """The directives of a strftime format, `%%` excluded."""
    return [d for d in _DIRECTIVE.findall(fmt) if d != "%"]


def parse_age(text: str, setting: str) -> timedelta:
    """`90d`, `36h`, `2w` as a timedelta; anything else is a ConfigError naming `setting`."""
    match = _AGE.match(str(text))
    if not match or int(match.group(1)) == 0:
        raise ConfigError(
            f"{setting}: {text!r} is not an age; write a positive number of hours, days or weeks: 36h, 90d, 2w"
        )
    return int(match.group(1)) * _AGE_UNITS[match.group(2)]


def utc_now() -> datetime:
    """Now, naive UTC: what partition times are compared with."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _add_months(moment: datetime, months: int) -> datetime:
    index = moment.month - 1 + months
    year, month = moment.year + index // 12, index % 12 + 1
    return moment.replace(year=year, month=month, day=min(moment.day, calendar.monthrange(year, month)[1]))


@dataclass(frozen=True)
class TimedSelection(Generic[Item]):
    """Partitions split by a cutoff: wholly older, not (yet) older, and those whose values do not parse."""

    older: tuple[Item, ...]
    newer: tuple[Item, ...]
    untimed: tuple[Item, ...]


@dataclass(frozen=True)
class PartitionClock:
    """How one table's partition values give a time: (column, strftime format) pairs."""

    columns: tuple[tuple[str, str], ...]
    step: str  # the finest period the formats fix: a partition covers one such period

    @classmethod
    def of(cls, setting: Mapping[str, str] | None, table: str) -> PartitionClock:
        """The clock of `table` (D.T) from its `partition_time` setting {column: format}; a ConfigError names the
        key when it is missing or unusable."""
        key = f"table_overrides.{table}.partition_time"
        if not setting:
            raise ConfigError(
                f"{table} has no partition time: set {key} to its time column(s) and strftime format(s), e.g. "
                "{dt: '%Y%m%d%H'} or {year: '%Y', month: '%m', day: '%d', hour: '%H'}; nothing was changed"
            )
        steps = []
        for column, fmt in setting.items():
            found = directives(fmt)
            unknown = [d for d in found if d not in STEPS]
            if not found or unknown:
                raise ConfigError(
                    f"{key}.{column}: format {fmt!r} must use only the directives "
                    f"{' '.join('%' + d for d in STEPS)} (got {' '.join('%' + d for d in unknown) or 'none'})"
                )
            steps += [STEPS[d] for d in found]
        if "year" not in steps:
            raise ConfigError(f"{key}: no column gives the year (%Y or %y); a time without a year cannot be compared")
        finest = min(steps, key=STEP_ORDER.index)
        gaps = [step for step in STEP_ORDER[STEP_ORDER.index(finest) :] if step not in steps]
        if gaps:  # {year, day} would read 15 December as 15 January
            raise ConfigError(
                f"{key}: the formats fix the {finest} but not the {' and '.join(gaps)}; add the column(s) that "
                f"give the {' and '.join(gaps)}, or leave the {finest} out"
            )
        return cls(tuple(setting.items()), finest)

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(column for column, _ in self.columns)

    def check_columns(self, partition_columns: Sequence[str], table: str) -> None:
        """Refuse a clock naming a column that is not one of the table's partition columns."""
        lowered = {c.lower() for c in partition_columns}
        missing = [c for c in self.column_names if c.lower() not in lowered]
        if missing:
            raise ConfigError(
                f"table_overrides.{table}.partition_time names {', '.join(missing)}, which "
                f"{'is not a partition column' if len(missing) == 1 else 'are not partition columns'} of {table} "
                f"({', '.join(partition_columns) or 'none'}); nothing was changed"
            )

    def _value(self, spec: Spec, column: str) -> str | None:
        lowered = {k.lower(): v for k, v in spec.items()}
        return lowered.get(column.lower())

    def start(self, spec: Spec) -> datetime | None:
        """When the partition's period begins, or None when a value is missing, does not round-trip, or the
        columns disagree (a day that month does not have)."""
        fields: dict[str, int] = {}
        for column, fmt in self.columns:
            value = self._value(spec, column)
            try:
                parsed = datetime.strptime(value, fmt) if value is not None else None
            except ValueError:
                parsed = None
            if parsed is None or parsed.strftime(fmt) != value:
                return None
            for directive in directives(fmt):
                named = {"S": {"second": parsed.second}, "M": {"minute": parsed.minute}, "H": {"hour": parsed.hour},
                         "d": {"day": parsed.day},
                         "Y": {"year": parsed.year}, "y": {"year": parsed.year}}.get(directive,
                        {"month": parsed.month})  # fmt: skip
                for name, number in named.items():
                    if fields.setdefault(name, number) != number:
                        return None
        try:
            return datetime(fields["year"], fields.get("month", 1), fields.get("day", 1), fields.get("hour", 0),
                            fields.get("minute", 0), fields.get("second", 0))  # fmt: skip
        except ValueError:
            return None

    def end(self, spec: Spec) -> datetime | None:
        """When the partition's period ends (exclusive), or None when its values do not parse."""
        begin = self.start(spec)
        if begin is None:
            return None
        if self.step == "month":
            return _add_months(begin, 1)
        if self.step == "year":
            return _add_months(begin, 12)
        return begin + {"second": timedelta(seconds=1), "minute": timedelta(minutes=1), "hour": timedelta(hours=1),
                        "day": timedelta(days=1)}[self.step]  # fmt: skip

    def select_older(
        self, items: Iterable[Item], cutoff: datetime, spec_of: Callable[[Item], Spec] | None = None
    ) -> TimedSelection[Item]:
        """Split partitions (specs, or any items whose spec `spec_of` gives): those whose whole period ended at or
        before `cutoff`, the others, the untimed; each keeps its item."""
        older: list[Item] = []
        newer: list[Item] = []
        untimed: list[Item] = []
        for item in items:
            end = self.end(spec_of(item) if spec_of else item)  # type: ignore[arg-type]
            (untimed if end is None else older if end <= cutoff else newer).append(item)
        return TimedSelection(tuple(older), tuple(newer), tuple(untimed))
