"""Schedules -> data intervals: when runs are due and which slice of time each covers.

A DAG's `schedule` is null (manual runs only), `@once`, a 5-field cron or preset, or an ISO-8601
duration. `make_timetable` turns it into a `Timetable`, which answers three questions on the
timeline: the next scheduled run after the latest one (`next_run`), every run in a range
(`runs_between`, for backfills) and the interval a manual run covers (`manual_interval`).

Pure code: no database and no wall clock (callers pass `now`). Cron fields are read in the DAG's
IANA time zone; every datetime returned is an aware UTC `datetime`. Airflow's
CronDataIntervalTimetable is the reference behaviour; see DESIGN.md section 4.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import zoneinfo
from collections.abc import Iterator

import pendulum
from croniter import croniter

from dagline.times import parse_duration, to_utc, validate_timezone

__all__ = [
    "DataInterval",
    "DagRunInfo",
    "Timetable",
    "NullTimetable",
    "OnceTimetable",
    "CronTimetable",
    "DeltaTimetable",
    "validate_schedule",
    "make_timetable",
]

PRESETS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
ONCE = "@once"

_ACCEPTED = (
    "expected null, a 5-field cron expression such as '0 2 * * *', a preset "
    "(@once, @hourly, @daily, @midnight, @weekly, @monthly, @yearly, @annually) "
    "or an ISO-8601 duration such as 'PT6H' or 'P1D'"
)

# How far a wall-clock cron search starts before (or after) the instant it is asked about. A DST
# shift moves a wall time by at most a few hours (a whole day for Samoa's 2011 date-line jump), so
# two days is enough for a fire whose shifted instant lies after the instant but whose wall time
# lies before it (e.g. 02:30 on a spring-forward day fires at 03:30, after 03:00).
_SLACK = dt.timedelta(days=2)


@dataclasses.dataclass(frozen=True)
class DataInterval:
    start: dt.datetime  # aware UTC
    end: dt.datetime  # aware UTC


@dataclasses.dataclass(frozen=True)
class DagRunInfo:
    logical_date: dt.datetime  # == data_interval.start for scheduled runs
    data_interval: DataInterval
    run_after: dt.datetime  # when the run may be created: data_interval.end (for @once: start)


def _info(start: dt.datetime, end: dt.datetime, run_after: dt.datetime | None = None) -> DagRunInfo:
    return DagRunInfo(start, DataInterval(start, end), end if run_after is None else run_after)


# --------------------------------------------------------------------------------------- parsing


def _parse(schedule: str | None) -> tuple[str, object]:
    """Classify a schedule: ("none", None), ("once", None), ("cron", expr) or ("delta", parts)."""
    if schedule is None:
        return "none", None
    if not isinstance(schedule, str):
        raise ValueError(f"schedule {schedule!r} is not a string: {_ACCEPTED}")
    text = schedule.strip()
    if not text:
        raise ValueError(f"schedule is empty: {_ACCEPTED}")
    if text.startswith("@"):
        name = text.lower()
        if name == ONCE:
            return "once", None
        if name not in PRESETS:
            raise ValueError(f"schedule {schedule!r} is not a known preset: {_ACCEPTED}")
        return "cron", PRESETS[name]
    if text[0] in "Pp":
        return "delta", _parse_delta(schedule, text)
    return "cron", _check_cron(schedule, text)


def _parse_delta(schedule: str, text: str) -> tuple[int, int, int, dt.timedelta]:
    """(years, months, days, clock) of a duration: the calendar part and the real-time part.

    pendulum folds hours into days (PT36H == P1DT12H), so the text is split at "T" and each side
    parsed on its own: calendar days keep local wall time, clock hours are real hours.
    """
    try:
        parse_duration(text)  # validates the whole thing, refuses zero durations
    except ValueError as exc:
        raise ValueError(f"schedule {schedule!r}: {exc}; {_ACCEPTED}") from None
    date_text, _, time_text = text.upper().partition("T")
    years = months = days = 0
    if date_text != "P":
        try:
            cal = parse_duration(date_text)
            years, months = cal.years, cal.months
            days = cal.days - 365 * cal.years - 30 * cal.months  # pendulum counts Y as 365 D, M as 30 D
        except ValueError:  # a zero calendar part, e.g. "P0DT6H"
            pass
    clock = dt.timedelta(0)
    if time_text:
        try:
            clock = dt.timedelta(seconds=parse_duration("PT" + time_text).total_seconds())
        except ValueError:  # a zero clock part, e.g. "P1DT0H"
            pass
    return years, months, days, clock


def _check_cron(schedule: str, text: str) -> str:
    fields = text.split()
    if len(fields) != 5:
        raise ValueError(
            f"schedule {schedule!r} has {len(fields)} field(s); cron expressions must have exactly 5 "
            f"(minute hour day-of-month month day-of-week): {_ACCEPTED}"
        )
    expr = " ".join(fields)
    try:
        croniter(expr, dt.datetime(2000, 1, 1)).get_next(dt.datetime)
    except Exception as exc:  # croniter raises several error types, with useful messages
        raise ValueError(f"schedule {schedule!r} is not a valid cron expression ({exc}): {_ACCEPTED}") from None
    return expr


def validate_schedule(schedule: str | None) -> None:
    """Raise ValueError, saying what is accepted, unless `schedule` is a valid schedule."""
    _parse(schedule)


def make_timetable(
    schedule: str | None,
    timezone: str = "UTC",
    start_date: dt.datetime | None = None,
    end_date: dt.datetime | None = None,
) -> Timetable:
    """The timetable for a DAG. `start_date` may be None only for schedule None."""
    kind, value = _parse(schedule)
    validate_timezone(timezone)
    start = to_utc(start_date) if start_date is not None else None
    end = to_utc(end_date) if end_date is not None else None
    if kind == "none":
        return NullTimetable(schedule, timezone, start, end)
    if start is None:
        raise ValueError(f"schedule {schedule!r} needs a start_date")
    if kind == "once":
        return OnceTimetable(schedule, timezone, start, end)
    if kind == "cron":
        return CronTimetable(schedule, timezone, start, end, value)
    return DeltaTimetable(schedule, timezone, start, end, value)


# ----------------------------------------------------------------------------------- timetables


class Timetable:
    """Base class; on its own it behaves like schedule None (no scheduled runs)."""

    periodic: bool = False

    def __init__(self, schedule: str | None, timezone: str, start_date: dt.datetime | None,
                 end_date: dt.datetime | None):
        self.schedule = schedule
        self.summary = "None" if schedule is None else schedule
        self.timezone = timezone
        self.start_date = start_date
        self.end_date = end_date

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.summary!r}, tz={self.timezone!r}, start={self.start_date}, "
                f"end={self.end_date})")

    def _past_end(self, instant: dt.datetime) -> bool:
        return self.end_date is not None and instant > self.end_date

    def next_run(self, after: dt.datetime | None, *, catchup: bool = True,
                 now: dt.datetime | None = None) -> DagRunInfo | None:
        return None

    def runs_between(self, start: dt.datetime, end: dt.datetime) -> list[DagRunInfo]:
        return []

    def manual_interval(self, logical_date: dt.datetime) -> DataInterval:
        instant = to_utc(logical_date)
        return DataInterval(instant, instant)


class NullTimetable(Timetable):
    """schedule None: manual runs only."""


class OnceTimetable(Timetable):
    """@once: a single run at start_date, with the empty interval [start_date, start_date]."""

    def _the_run(self) -> DagRunInfo | None:
        if self._past_end(self.start_date):
            return None
        return _info(self.start_date, self.start_date, self.start_date)

    def next_run(self, after, *, catchup=True, now=None):
        return self._the_run() if after is None else None

    def runs_between(self, start, end):
        run = self._the_run()
        return [run] if run is not None and to_utc(start) <= run.logical_date <= to_utc(end) else []


class _PeriodicTimetable(Timetable):
    """Shared logic for timetables with a sequence of fire times; intervals run fire to next fire.

    Subclasses provide `_fires_after(x)` (the fire times strictly after x, in order) and
    `_prev(x)` (the last fire time strictly before x).
    """

    periodic = True

    def _fires_after(self, x: dt.datetime) -> Iterator[dt.datetime]:
        raise NotImplementedError

    def _prev(self, x: dt.datetime) -> dt.datetime:
        raise NotImplementedError

    def _next(self, x: dt.datetime) -> dt.datetime:
        return next(self._fires_after(x))

    def _at_or_after(self, x: dt.datetime) -> dt.datetime:
        following = self._next(x)
        return x if self._prev(following) == x else following

    def _at_or_before(self, x: dt.datetime) -> dt.datetime:
        # Walk forward from a fire before x so the answer's next fire is guaranteed to be after x.
        previous = self._prev(x)
        for fire in self._fires_after(previous):
            if fire > x:
                return previous
            previous = fire
        raise AssertionError("unreachable: fire times are endless")

    def next_run(self, after, *, catchup=True, now=None):
        lower = self.start_date if after is None else max(to_utc(after), self.start_date)
        start = self._at_or_after(lower)
        if self._past_end(start):
            return None
        if not catchup and now is not None:
            # Latest complete interval: it ends at the last fire <= now. Never earlier than `start`.
            latest = self._prev(self._at_or_before(to_utc(now)))
            if self._past_end(latest):
                latest = self._at_or_before(self.end_date)
            start = max(start, latest)
        return _info(start, self._next(start))

    def runs_between(self, start, end):
        lower = max(to_utc(start), self.start_date)
        upper = to_utc(end) if self.end_date is None else min(to_utc(end), self.end_date)
        if lower > upper:
            return []
        current = self._at_or_after(lower)
        runs: list[DagRunInfo] = []
        if current > upper:
            return runs
        for fire in self._fires_after(current):  # one generator: no search from scratch per run
            runs.append(_info(current, fire))
            if fire > upper:
                break
            current = fire
        return runs

    def manual_interval(self, logical_date):
        start = self._at_or_before(to_utc(logical_date))
        return DataInterval(start, self._next(start))


class CronTimetable(_PeriodicTimetable):
    """A 5-field cron (or preset) read in the DAG's time zone.

    A "fixed-time" cron (minute and hour both single numbers) follows local wall time: it fires once
    per matching local day; a wall time skipped by spring-forward fires shifted forward by the gap,
    and an ambiguous fall-back wall time fires once, at its first occurrence. Any other cron keeps
    real elapsed time across DST (Airflow's approach): the next fire is found in naive local time
    and the naive difference is added to the current instant, so "0 * * * *" has 23 one-hour
    intervals on a spring-forward day and 25 on a fall-back day.
    """

    def __init__(self, schedule, timezone, start_date, end_date, expression: str):
        super().__init__(schedule, timezone, start_date, end_date)
        self.expression = expression
        minute, hour = expression.split()[:2]
        self.fixed_time = minute.isdigit() and hour.isdigit()
        self._zone = zoneinfo.ZoneInfo(timezone)
        self._day_sets = self._plain_day_fields() if self.fixed_time else None

    def _plain_day_fields(self) -> tuple[set[int] | None, set[int] | None, set[int] | None] | None:
        """(days of month, months, cron weekdays) as sets, None meaning "*"; or None when a field
        uses L, W or # (then croniter does the matching). Only a speed-up: croniter costs ~40 us
        per fire, a set lookup per local day is ~20x cheaper (10,000 daily runs: 0.4 s -> 0.05 s).
        """
        cron = croniter(self.expression)
        if cron.nth_weekday_of_month or getattr(cron, "nearest_weekday", None):
            return None
        sets = []
        for values in cron.expanded[2:]:
            if values == ["*"]:
                sets.append(None)
            elif all(isinstance(v, int) for v in values):
                sets.append(set(values))
            else:
                return None
        return sets[0], sets[1], sets[2]

    def _day_matches(self, day: dt.date) -> bool:
        doms, months, dows = self._day_sets
        if months is not None and day.month not in months:
            return False
        dom_ok = doms is None or day.day in doms
        dow_ok = dows is None or (day.weekday() + 1) % 7 in dows  # cron: Sunday = 0
        if doms is not None and dows is not None:
            return dom_ok or dow_ok  # classic cron: both restricted -> either may match
        return dom_ok and dow_ok

    def _wall(self, instant: dt.datetime) -> dt.datetime:
        """Naive local wall time of a UTC instant."""
        return instant.astimezone(self._zone).replace(tzinfo=None)

    def _instant(self, wall: dt.datetime) -> dt.datetime:
        # fold=0 gives exactly the rule we want (PEP 495): an ambiguous wall time is its first
        # occurrence, and a non-existent one is read with the pre-transition offset, i.e. shifted
        # forward by the gap (02:30 on a spring-forward day -> 03:30 DST).
        return to_utc(wall.replace(tzinfo=self._zone, fold=0))

    def _fires_after(self, x):
        if self.fixed_time:
            last = x
            for wall in self._wall_fires_from(self._wall(x) - _SLACK):
                fire = self._instant(wall)
                if fire > last:  # skip fires before x (search slack) and any DST duplicate
                    yield fire
                    last = fire
        else:
            current, it, expected = x, None, None
            while True:
                wall = self._wall(current)
                if wall != expected:  # first step, or an offset change moved the wall clock
                    it = croniter(self.expression, wall)
                expected = it.get_next(dt.datetime)
                current = current + (expected - wall)  # naive delta added as real elapsed time
                yield current

    def _wall_fires_from(self, wall: dt.datetime) -> Iterator[dt.datetime]:
        """Naive local fire times of a fixed-time cron strictly after `wall`."""
        if self._day_sets is None:
            it = croniter(self.expression, wall)
            while True:
                yield it.get_next(dt.datetime)
        minute, hour = (int(f) for f in self.expression.split()[:2])
        day = wall.date()
        while True:
            candidate = dt.datetime(day.year, day.month, day.day, hour, minute)
            if candidate > wall and self._day_matches(day):
                yield candidate
            day += dt.timedelta(days=1)

    def _prev(self, x):
        if self.fixed_time:
            it = croniter(self.expression, self._wall(x) + _SLACK)
            while True:
                fire = self._instant(it.get_prev(dt.datetime))
                if fire < x:
                    return fire
        wall = self._wall(x)
        return x - (wall - croniter(self.expression, wall).get_prev(dt.datetime))


class DeltaTimetable(_PeriodicTimetable):
    """An ISO-8601 duration: fires at start_date + k * duration, for every integer k.

    The grid is anchored at start_date and each point is computed from it (not chained), so a
    calendar part (P1D, P1M) keeps start_date's local wall time with no drift after a DST gap or
    a short month (Jan 31 + P1M -> Feb 28, Mar 31, ...). The clock part (PT6H) is real time.
    Intervals tile: each runs from one grid point to the next.
    """

    def __init__(self, schedule, timezone, start_date, end_date, parts: tuple[int, int, int, dt.timedelta]):
        super().__init__(schedule, timezone, start_date, end_date)
        self.years, self.months, self.days, self.clock = parts
        self._calendar = bool(self.years or self.months or self.days)
        self._zone = zoneinfo.ZoneInfo(timezone)
        local = start_date.astimezone(self._zone)
        self._anchor = pendulum.naive(local.year, local.month, local.day, local.hour, local.minute,
                                      local.second, local.microsecond)
        # Rough length of one step, only to guess an index before stepping to the exact one.
        self._approx = dt.timedelta(days=self.years * 365.2425 + self.months * 30.436875 + self.days) + self.clock

    def _point(self, k: int) -> dt.datetime:
        if k == 0:
            return self.start_date
        base = self.start_date
        if self._calendar:
            w = self._anchor.add(years=k * self.years, months=k * self.months, days=k * self.days)
            wall = dt.datetime(w.year, w.month, w.day, w.hour, w.minute, w.second, w.microsecond)
            base = to_utc(wall.replace(tzinfo=self._zone, fold=0))  # same DST rule as cron
        return base + k * self.clock

    def _first_index(self, x: dt.datetime, strict: bool) -> int:
        """Smallest k with point(k) > x (strict) or >= x."""
        k = math.floor((x - self.start_date) / self._approx)

        def ok(i: int) -> bool:
            p = self._point(i)
            return p > x if strict else p >= x

        while not ok(k):
            k += 1
        while ok(k - 1):
            k -= 1
        return k

    def _fires_after(self, x):
        k = self._first_index(x, strict=True)
        while True:
            yield self._point(k)
            k += 1

    def _prev(self, x):
        return self._point(self._first_index(x, strict=False) - 1)

    def _at_or_after(self, x):
        return self._point(self._first_index(x, strict=False))

