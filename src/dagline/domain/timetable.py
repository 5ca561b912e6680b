"""Schedules -> data intervals: when runs are due and which slice of time each covers.

A DAG's `schedule` is null (manual runs only), `@once`, a 5-field cron or preset, or an ISO-8601
duration. `make_timetable` turns it into a `Timetable`, which answers, on the timeline: the next
scheduled run after the latest one (`next_run`, and `upcoming` for the runs after it), every run
in a range (`runs_between`, for backfills) and the interval a manual run covers (`manual_interval`).
The scheduler's run creation, `dags next-runs` and backfill planning all walk `next_run`: one
implementation of "what comes next".

Apache Airflow's data-interval timetables (`CronDataIntervalTimetable`,
`DeltaDataIntervalTimetable`) are the reference: the same steps (`_get_next`, `_get_prev`, the two
alignments, the catch-up skip), so every interval is the one Airflow would make. The comparison
data in tests/unit/airflow_reference/airflow_timetables.json is generated from Airflow itself; the
README's "Time" section lists the rule for each schedule kind and the few deliberate differences.

Every search loop here is bounded: past `MAX_STEPS` steps it raises `ScheduleLoopError`, naming the
schedule, the zone, the instant and (when the timetable knows it) the DAG, so a defect in this
arithmetic stops one DAG (the scheduler records it as the DAG's import error), never a replica.

Pure code: no database and no wall clock (callers pass `now`). Every datetime returned is an
aware UTC `datetime`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import threading
from collections.abc import Iterator

import pendulum
from croniter import croniter
from dateutil.relativedelta import relativedelta

from dagline.errors import ScheduleLoopError
from dagline.times import UTC, parse_duration, to_utc, validate_timezone

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
    "MAX_STEPS",
]

MAX_STEPS = 5_000
"""Steps one search may take (a step back or forward to a fire, or an index probe). Real schedules need
a handful, a few dozen at most; past this many the search raises `ScheduleLoopError` instead of spinning."""
_MAX_PROBES = 20
"""Probes back from an instant for a fire before it, each twice as far (1 hour, 2, 4, ...: 2**20 hours is
about 120 years); one is all a spring-forward gap needs."""

PRESETS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
    "@quarterly": "0 0 1 */3 *",
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
}
ONCE = "@once"

_ACCEPTED = (
    "expected null, a 5-field cron expression such as '0 2 * * *', a preset "
    "(@once, @hourly, @daily, @midnight, @weekly, @monthly, @quarterly, @yearly, @annually) "
    "or an ISO-8601 duration such as 'PT6H' or 'P1D'"
)


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
    """Classify a schedule: ("null", None) for no schedule, ("once", None), ("cron", expr) or ("delta", parts)."""
    if schedule is None:
        return "null", None
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


def _parse_delta(schedule: str, text: str) -> tuple[int, dt.timedelta]:
    """(months, fixed) of a duration: calendar months (a year is 12) and a fixed length of real time.

    Days and weeks are fixed lengths (a day is 24 hours), as in Airflow's `timedelta` schedules.
    """
    try:
        duration = parse_duration(text)  # validates the whole thing, refuses zero durations
    except ValueError as exc:
        raise ValueError(f"schedule {schedule!r}: {exc}; {_ACCEPTED}") from None
    months = duration.years * 12 + duration.months
    # pendulum counts Y as 365 D and M as 30 D inside total_seconds(); take them back out.
    fixed = dt.timedelta(seconds=duration.total_seconds()) - dt.timedelta(
        days=365 * duration.years + 30 * duration.months)
    return months, fixed


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
    *,
    dag_id: str | None = None,
) -> Timetable:
    """The timetable for a DAG. `start_date` may be None only for schedule None. `dag_id` only names the
    DAG in a `ScheduleLoopError`."""
    kind, value = _parse(schedule)
    validate_timezone(timezone)
    start = to_utc(start_date) if start_date is not None else None
    end = to_utc(end_date) if end_date is not None else None
    if kind == "null":
        table: Timetable = NullTimetable(schedule, timezone, start, end)
    elif start is None:
        raise ValueError(f"schedule {schedule!r} needs a start_date")
    elif kind == "once":
        table = OnceTimetable(schedule, timezone, start, end)
    elif kind == "cron":
        table = CronTimetable(schedule, timezone, start, end, value)
    else:
        table = DeltaTimetable(schedule, timezone, start, end, value)
    table.dag_id = dag_id
    return table


class _Steps:
    """The step count of one search: `take()` once per loop turn; past `MAX_STEPS` it raises
    `ScheduleLoopError` naming the timetable's schedule, zone and DAG, what was searched and from where."""

    __slots__ = ("table", "doing", "instant", "limit", "taken")

    def __init__(self, table: Timetable, doing: str, instant: dt.datetime, limit: int = MAX_STEPS):
        self.table, self.doing, self.instant, self.limit, self.taken = table, doing, instant, limit, 0

    def take(self) -> None:
        self.taken += 1
        if self.taken > self.limit:
            table = self.table
            raise ScheduleLoopError(schedule=table.schedule, timezone=table.timezone, instant=self.instant,
                                    doing=self.doing, problem=f"took more than {self.limit:,} steps without an answer",
                                    dag_id=table.dag_id)


# ----------------------------------------------------------------------------------- timetables


class Timetable:
    """Base class; on its own it behaves like schedule None (no scheduled runs)."""

    periodic: bool = False
    dag_id: str | None = None  # named in a ScheduleLoopError

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

    def next_run(self, after: dt.datetime | None, *, catchup: bool = True, now: dt.datetime | None = None,
                 earliest: dt.datetime | None = None) -> DagRunInfo | None:
        """The run the scheduler creates next: after the latest scheduled run, which ended at `after`
        (None: no run yet). `catchup=False` with `now` skips to the latest complete interval.
        `earliest` raises the lower bound above the start date (backfill ranges, `--after`)."""
        return None

    def upcoming(self, after: dt.datetime | None, *, catchup: bool = True, now: dt.datetime | None = None,
                 earliest: dt.datetime | None = None) -> Iterator[DagRunInfo]:
        """`next_run`, then each run after it, as the scheduler would create them one by one. Each run
        starts after the one before (else `ScheduleLoopError`), so a caller's bound ends the walk."""
        info = self.next_run(after, catchup=catchup, now=now, earliest=earliest)
        while info is not None:
            yield info
            if not self.periodic:
                return
            previous = info
            info = self.next_run(previous.data_interval.end, catchup=catchup, now=now, earliest=earliest)
            if info is not None and info.logical_date <= previous.logical_date:
                raise ScheduleLoopError(
                    schedule=self.schedule, timezone=self.timezone, instant=previous.data_interval.end,
                    doing="the run after the interval ending at", dag_id=self.dag_id,
                    problem=f"did not advance (it starts at {info.logical_date.isoformat()})")

    def runs_between(self, start: dt.datetime, end: dt.datetime) -> list[DagRunInfo]:
        """Every scheduled run whose logical date lies in [start, end] (a backfill's plan)."""
        upper = to_utc(end)
        runs = []
        for info in self.upcoming(None, earliest=to_utc(start)):
            if info.logical_date > upper:
                break
            runs.append(info)
        return runs

    def manual_interval(self, logical_date: dt.datetime) -> DataInterval:
        instant = to_utc(logical_date)
        return DataInterval(instant, instant)


class NullTimetable(Timetable):
    """schedule None: manual runs only."""


class OnceTimetable(Timetable):
    """@once: a single run at start_date, with the empty interval [start_date, start_date]."""

    def next_run(self, after, *, catchup=True, now=None, earliest=None):
        if after is not None or self._past_end(self.start_date):
            return None
        if earliest is not None and to_utc(earliest) > self.start_date:
            return None
        return _info(self.start_date, self.start_date, self.start_date)


class _PeriodicTimetable(Timetable):
    """Intervals run from one fire time to the next. The steps are Airflow's:

    - `_get_next(x)` / `_get_prev(x)`: the fire time strictly after / before x;
    - `_align_to_next(x)`: x if it is a fire time, else the next one; `_align_to_prev(x)` likewise;
    - `_skip_to_latest(earliest, now)`: the start of the latest interval complete at `now`.
    """

    periodic = True

    def _get_next(self, x: dt.datetime) -> dt.datetime:
        raise NotImplementedError

    def _get_prev(self, x: dt.datetime) -> dt.datetime:
        raise NotImplementedError

    def _align_to_next(self, x: dt.datetime) -> dt.datetime:
        following = self._get_next(x)
        return x if self._get_prev(following) == x else following

    def _align_to_prev(self, x: dt.datetime) -> dt.datetime:
        previous = self._get_prev(x)
        return x if self._get_next(previous) == x else previous

    def _fire_before(self, x: dt.datetime) -> dt.datetime:
        """The last fire strictly before x: always earlier than x, so a walk back with it always moves.

        `_get_prev` is Airflow's step, and it is not always earlier than x: for a wall time inside a
        spring-forward gap (02:30 in New York on 2026-03-08, which fires shifted to 03:30 EDT) it returns
        that shifted fire for every x from the gap's end (03:00 EDT) up to and including the fire itself;
        in a fall-back fold it can return the second occurrence of a wall time x's clock shows first.
        Then this probes further back (1 hour before x, then 2, 4, ...) until the step lands before x,
        and walks forward with `_get_next` to the last fire before x.
        """
        probes = _Steps(self, "probing back for a fire before", x, limit=_MAX_PROBES)
        previous = self._get_prev(x)
        back = dt.timedelta(hours=1)
        while previous >= x:
            probes.take()
            previous = self._get_prev(x - back)
            back *= 2
        steps = _Steps(self, "finding the last fire before", x)
        while (following := self._get_next(previous)) < x:
            steps.take()
            previous = following
        return previous

    def _skip_to_latest(self, earliest: dt.datetime, now: dt.datetime) -> dt.datetime:
        """The start of the latest interval complete at `now`, but not before `earliest` (aligned).

        Airflow's version steps back from `now` with `_get_prev`, which on a spring-forward day can
        return a fire inside the gap (shifted past it) as its own predecessor, so it picks the
        interval that has not ended yet and skips the one that just did (a daily "0 2 * * *" or
        "30 2 * * *" in New York at 03:30 EDT on 2026-03-08). dagline recomputes this on every
        run-creation step, so that skip would lose the run: here the latest complete interval is
        found by its end, with `_fire_before`, which always moves back.
        """
        steps = _Steps(self, "finding the latest interval complete at", now)
        start = self._fire_before(now)
        while self._get_next(start) > now:
            steps.take()
            start = self._fire_before(start)
        while (following := self._get_next(start)) < now and self._get_next(following) <= now:
            steps.take()
            start = following
        return max(start, self._align_to_next(earliest))

    def next_run(self, after, *, catchup=True, now=None, earliest=None):
        lower = self.start_date if earliest is None else max(to_utc(earliest), self.start_date)
        if not catchup and now is not None:
            first = self._skip_to_latest(lower, to_utc(now))
        else:
            first = self._align_to_next(lower)
        if after is None:
            start = first
        else:
            after = to_utc(after)
            start = self._align_to_prev(after)
            steps = _Steps(self, "finding the first fire at or after", after)
            while start < after:  # the schedule changed: the new one starts at or after the last end
                steps.take()
                start = self._get_next(start)
            start = max(start, first)
        if self._past_end(start):
            return None
        return _info(start, self._get_next(start))

    def manual_interval(self, logical_date):
        """The interval that contains `logical_date` (its start is the fire at or before it)."""
        start = self._align_to_prev(to_utc(logical_date))
        return DataInterval(start, self._get_next(start))


class _CronSteps:
    """The steps of one cron in one zone, shared by its timetables (`CronTimetable`)."""

    def __init__(self):
        self.local = threading.local()
        self.next_known: dict[dt.datetime, dt.datetime] = {}
        self.prev_known: dict[dt.datetime, dt.datetime] = {}
        self.regular: set[dt.datetime] = set()


_CRON_STEPS: dict[tuple[str, str], _CronSteps] = {}


class CronTimetable(_PeriodicTimetable):
    """A 5-field cron (or preset) read in the DAG's time zone, exactly as Airflow reads it.

    A cron whose hour field is `*` (hourly, every 15 minutes) keeps real elapsed time across DST:
    the next fire is found on the local wall clock and the wall-clock difference is added as real
    time, so "0 * * * *" has 23 one-hour intervals on a spring-forward day and 25 on a fall-back day.
    Any other cron fires at the local wall time its fields name; a wall time skipped by a
    spring-forward gap fires shifted forward by the gap (02:30 -> 03:30 for a one-hour gap), and a
    wall time that happens twice on a fall-back day fires once, at its second occurrence (standard
    time), so the interval before it is longer by the fold.
    """

    _MEMO_LIMIT = 20_000  # remembered steps per cron and zone; cleared when full

    def __init__(self, schedule, timezone, start_date, end_date, expression: str):
        super().__init__(schedule, timezone, start_date, end_date)
        self.expression = expression
        self._zone = pendulum.timezone(timezone)
        self._every_hour = croniter(expression).expanded[1] == ["*"]
        # A step depends on the cron and the zone alone: every timetable of one (expression, zone) shares
        # what was stepped (10,000 hourly DAGs at a tick take each step once, not 10,000 times).
        steps = _CRON_STEPS.get((expression, timezone))
        if steps is None:
            steps = _CRON_STEPS.setdefault((expression, timezone), _CronSteps())
        self._local = steps.local  # a parsed croniter per thread: parsing is most of a step's cost
        # Steps already taken, and one inferred: after `_get_next(x) == e` where x and e are both
        # fires whose wall times map back to them, `_get_prev(e) == x` follows from the cron alone.
        # Walking a timeline then costs one croniter step per run instead of three.
        self._next_known = steps.next_known
        self._prev_known = steps.prev_known
        self._regular = steps.regular

    def _cron_step(self, wall: dt.datetime, forward: bool) -> dt.datetime:
        cron = getattr(self._local, "cron", None)
        if cron is None:
            cron = self._local.cron = croniter(self.expression, wall)
        if forward:
            return cron.get_next(dt.datetime, start_time=wall)
        return cron.get_prev(dt.datetime, start_time=wall)

    def _wall(self, instant: dt.datetime) -> dt.datetime:
        """Naive local wall time of an instant (the fold is dropped, as Airflow's make_naive does)."""
        return instant.astimezone(self._zone).replace(tzinfo=None, fold=0)

    def _instant(self, wall: dt.datetime) -> dt.datetime:
        """The instant of a local wall time: in a gap, shifted forward by the gap; in a fold, the
        second occurrence (pendulum's convert with fold=1, as Airflow's make_aware)."""
        return to_utc(self._zone.convert(wall.replace(fold=1)))

    def _occurrences(self, wall: dt.datetime) -> list[dt.datetime]:
        """The instants whose local wall time is `wall`: none in a gap, two in a fold."""
        found = []
        for fold in (0, 1):
            instant = to_utc(wall.replace(tzinfo=self._zone, fold=fold))
            if self._wall(instant) == wall and instant not in found:
                found.append(instant)
        return found

    def _get_next(self, x):
        known = self._next_known.get(x)
        if known is not None:
            return known
        wall = self._wall(x)
        fire = self._cron_step(wall, forward=True)
        if not self._every_hour:
            following = self._instant(fire)
        else:
            following = x + (fire - wall)  # the wall-clock step, taken as real time (Airflow)
            shown = self._wall(following)
            if shown != fire and not croniter.match(self.expression, shown):
                # Only where an offset changes by other than a whole hour (Lord Howe's 30 minutes)
                # does the step land on a wall time the cron does not name; Airflow's scheduler
                # stops on such a DAG. Take the first instant after x that shows the fire's wall
                # time, or the step itself after a gap.
                following = min((i for i in self._occurrences(fire) if i > x), default=following)
        self._remember(x, wall, following, fire)
        return following

    def _remember(self, x: dt.datetime, wall: dt.datetime, following: dt.datetime, fire: dt.datetime) -> None:
        if len(self._next_known) > self._MEMO_LIMIT:
            self._next_known.clear()
            self._prev_known.clear()
            self._regular.clear()
        self._next_known[x] = following
        if self._wall(following) == fire:  # the fire's wall time maps back to it
            if x in self._regular and x + (fire - wall) == following:
                self._prev_known[following] = x
            self._regular.add(following)

    def _get_prev(self, x):
        known = self._prev_known.get(x)
        if known is not None:
            return known
        wall = self._wall(x)
        fire = self._cron_step(wall, forward=False)
        if not self._every_hour:
            previous = self._instant(fire)
        else:
            previous = x - (wall - fire)
            shown = self._wall(previous)
            if shown != fire and not croniter.match(self.expression, shown):
                previous = max((i for i in self._occurrences(fire) if i < x), default=previous)
        self._prev_known[x] = previous
        if self._wall(previous) == fire:
            self._regular.add(previous)
        return previous


class DeltaTimetable(_PeriodicTimetable):
    """An ISO-8601 duration: fires at start_date + k * duration, for every integer k.

    As in Airflow's delta timetables the arithmetic is on the UTC clock: days, hours and minutes
    are real time (P1D is 24 hours, whatever DST does to the local wall clock), and months and
    years are calendar steps on the UTC calendar. Each fire is computed from start_date (not
    chained), so a month-end start keeps its day: Jan 31 + P1M -> Feb 28, Mar 31, Apr 30.
    """

    def __init__(self, schedule, timezone, start_date, end_date, parts: tuple[int, dt.timedelta]):
        super().__init__(schedule, timezone, start_date, end_date)
        self.months, self.fixed = parts
        # Rough length of one step, only to guess an index before stepping to the exact one.
        self._approx = dt.timedelta(days=self.months * 30.436875) + self.fixed

    def _point(self, k: int) -> dt.datetime:
        point = self.start_date
        if self.months:  # months first, then the fixed part, as relativedelta(months=, days=) applies them
            point += relativedelta(months=k * self.months)
        return (point + k * self.fixed).replace(tzinfo=UTC)

    def _first_index(self, x: dt.datetime, strict: bool) -> int:
        """Smallest k with point(k) > x (strict) or >= x."""
        k = math.floor((x - self.start_date) / self._approx)

        def ok(i: int) -> bool:
            p = self._point(i)
            return p > x if strict else p >= x

        steps = _Steps(self, "finding the first fire after" if strict else "finding the first fire at or after", x)
        while not ok(k):
            steps.take()
            k += 1
        while ok(k - 1):
            steps.take()
            k -= 1
        return k

    def _get_next(self, x):
        return self._point(self._first_index(x, strict=True))

    def _get_prev(self, x):
        return self._point(self._first_index(x, strict=False) - 1)

    def _align_to_next(self, x):
        return self._point(self._first_index(x, strict=False))

    def _align_to_prev(self, x):
        return self._point(self._first_index(x, strict=True) - 1)
