"""Tests for dagline.domain.timetable: schedules -> data intervals, in UTC, across DST.

2026 DST transitions used below (all instants UTC):
  Europe/Amsterdam  spring forward 2026-03-29 01:00 (02:00 CET -> 03:00 CEST, +1 -> +2)
                    fall back      2026-10-25 01:00 (03:00 CEST -> 02:00 CET, +2 -> +1)
  America/New_York  spring forward 2026-03-08 07:00 (02:00 EST -> 03:00 EDT, -5 -> -4)
                    fall back      2026-11-01 06:00 (02:00 EDT -> 01:00 EST, -4 -> -5)

Every test here has a few seconds (`pytestmark`): a search that loops fails fast instead of hanging.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pendulum
import pytest

from dagline.domain.timetable import (
    MAX_STEPS,
    CronTimetable,
    DagRunInfo,
    DataInterval,
    DeltaTimetable,
    NullTimetable,
    OnceTimetable,
    make_timetable,
    validate_schedule,
)
from dagline.errors import DaglineError, ScheduleLoopError
from dagline.times import UTC

pytestmark = pytest.mark.timeout(20)

AMS = "Europe/Amsterdam"
NYC = "America/New_York"
HOUR = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)
START_2026 = dt.datetime(2026, 1, 1, tzinfo=UTC)


def U(*args: int) -> dt.datetime:
    """A UTC instant."""
    return dt.datetime(*args, tzinfo=UTC)


def starts(runs: list[DagRunInfo]) -> list[dt.datetime]:
    return [r.logical_date for r in runs]


def assert_well_formed(runs: list[DagRunInfo]) -> None:
    """Scheduled runs: logical date == interval start, run_after == end, contiguous, UTC."""
    for run in runs:
        assert run.logical_date == run.data_interval.start
        assert run.run_after == run.data_interval.end
        assert run.data_interval.start < run.data_interval.end
        for value in (run.logical_date, run.data_interval.start, run.data_interval.end, run.run_after):
            assert type(value) is dt.datetime and value.tzinfo is UTC
    for earlier, later in zip(runs, runs[1:]):
        assert earlier.data_interval.end == later.data_interval.start


def chain(tt, count: int, after: dt.datetime | None = None) -> list[DagRunInfo]:
    """`count` runs as the scheduler would create them: each next_run after the previous end."""
    runs = []
    for _ in range(count):
        run = tt.next_run(after)
        runs.append(run)
        after = run.data_interval.end
    return runs


# ------------------------------------------------------------------- daily crons across DST

# (tz, cron, window, expected interval starts; the last expected interval's end)
# fmt: off
DAILY_DST = [
    # Amsterdam spring forward: 02:00 does not exist on 03-29 -> 03:00 CEST (01:00Z)
    (AMS, "0 2 * * *", (U(2026, 3, 28), U(2026, 3, 30, 12)),
     [U(2026, 3, 28, 1), U(2026, 3, 29, 1), U(2026, 3, 30, 0)], U(2026, 3, 31, 0)),
    (AMS, "30 2 * * *", (U(2026, 3, 28), U(2026, 3, 30, 12)),
     [U(2026, 3, 28, 1, 30), U(2026, 3, 29, 1, 30), U(2026, 3, 30, 0, 30)], U(2026, 3, 31, 0, 30)),
    (AMS, "0 0 * * *", (U(2026, 3, 27, 12), U(2026, 3, 30, 12)),
     [U(2026, 3, 27, 23), U(2026, 3, 28, 23), U(2026, 3, 29, 22)], U(2026, 3, 30, 22)),
    # Amsterdam fall back: 02:00-02:59 happen twice on 10-25 -> the second (CET) occurrence, once (Airflow)
    (AMS, "0 2 * * *", (U(2026, 10, 24), U(2026, 10, 26, 12)),
     [U(2026, 10, 24, 0), U(2026, 10, 25, 1), U(2026, 10, 26, 1)], U(2026, 10, 27, 1)),
    (AMS, "30 2 * * *", (U(2026, 10, 24), U(2026, 10, 26, 12)),
     [U(2026, 10, 24, 0, 30), U(2026, 10, 25, 1, 30), U(2026, 10, 26, 1, 30)], U(2026, 10, 27, 1, 30)),
    (AMS, "0 0 * * *", (U(2026, 10, 24, 12), U(2026, 10, 26, 12)),
     [U(2026, 10, 24, 22), U(2026, 10, 25, 23)], U(2026, 10, 26, 23)),
    # New York spring forward: 02:00 does not exist on 03-08 -> 03:00 EDT (07:00Z)
    (NYC, "0 2 * * *", (U(2026, 3, 7), U(2026, 3, 9, 12)),
     [U(2026, 3, 7, 7), U(2026, 3, 8, 7), U(2026, 3, 9, 6)], U(2026, 3, 10, 6)),
    (NYC, "0 0 * * *", (U(2026, 3, 7), U(2026, 3, 9, 12)),
     [U(2026, 3, 7, 5), U(2026, 3, 8, 5), U(2026, 3, 9, 4)], U(2026, 3, 10, 4)),
    # New York fall back: 02:00 is not ambiguous there (01:00-01:59 is), 01:30 fires at its EST occurrence
    (NYC, "0 2 * * *", (U(2026, 10, 31), U(2026, 11, 2, 12)),
     [U(2026, 10, 31, 6), U(2026, 11, 1, 7), U(2026, 11, 2, 7)], U(2026, 11, 3, 7)),
    (NYC, "30 1 * * *", (U(2026, 10, 31), U(2026, 11, 2, 12)),
     [U(2026, 10, 31, 5, 30), U(2026, 11, 1, 6, 30), U(2026, 11, 2, 6, 30)], U(2026, 11, 3, 6, 30)),
    (NYC, "0 0 * * *", (U(2026, 10, 31), U(2026, 11, 2, 12)),
     [U(2026, 10, 31, 4), U(2026, 11, 1, 4), U(2026, 11, 2, 5)], U(2026, 11, 3, 5)),
    # weekdays at 06:30 local: Friday before the Amsterdam switch, then Monday after it
    (AMS, "30 6 * * 1-5", (U(2026, 3, 27), U(2026, 3, 30, 12)),
     [U(2026, 3, 27, 5, 30), U(2026, 3, 30, 4, 30)], U(2026, 3, 31, 4, 30)),
]
# fmt: on


@pytest.mark.parametrize("tz,cron,window,expected,last_end", DAILY_DST)
def test_daily_cron_across_dst(tz, cron, window, expected, last_end):
    tt = make_timetable(cron, tz, START_2026)
    runs = tt.runs_between(*window)
    assert starts(runs) == expected
    assert runs[-1].data_interval.end == last_end
    assert_well_formed(runs)
    # The scheduler's path (next_run after each end) walks the same timeline.
    assert chain(tt, len(expected), after=window[0]) == runs


# ----------------------------------------------------------------- hourly and */15 across DST

# (tz, local day, [start, end) of that local day in UTC, expected number of hourly intervals)
HOURLY_DAYS = [
    (AMS, "2026-03-28", U(2026, 3, 27, 23), U(2026, 3, 28, 23), 24),
    (AMS, "2026-03-29", U(2026, 3, 28, 23), U(2026, 3, 29, 22), 23),
    (AMS, "2026-10-25", U(2026, 10, 24, 22), U(2026, 10, 25, 23), 25),
    (NYC, "2026-03-08", U(2026, 3, 8, 5), U(2026, 3, 9, 4), 23),
    (NYC, "2026-11-01", U(2026, 11, 1, 4), U(2026, 11, 2, 5), 25),
]


@pytest.mark.parametrize("cron", ["0 * * * *", "@hourly"])
@pytest.mark.parametrize("tz,day,day_start,day_end,count", HOURLY_DAYS)
def test_hourly_keeps_real_hours(cron, tz, day, day_start, day_end, count):
    tt = make_timetable(cron, tz, START_2026)
    runs = tt.runs_between(day_start, day_end - dt.timedelta(microseconds=1))
    assert len(runs) == count
    assert runs[0].logical_date == day_start
    assert runs[-1].data_interval.end == day_end
    assert all(r.data_interval.end - r.data_interval.start == HOUR for r in runs)
    assert_well_formed(runs)
    local_days = {r.logical_date.astimezone(zoneinfo.ZoneInfo(tz)).date().isoformat() for r in runs}
    assert local_days == {day}
    assert chain(tt, count, after=day_start) == runs


def test_hourly_local_wall_hours_on_transition_days():
    ams = zoneinfo.ZoneInfo(AMS)
    tt = make_timetable("0 * * * *", AMS, START_2026)
    spring = tt.runs_between(U(2026, 3, 28, 23), U(2026, 3, 29, 21, 59))
    assert [r.logical_date.astimezone(ams).hour for r in spring] == [0, 1] + list(range(3, 24))
    fall = tt.runs_between(U(2026, 10, 24, 22), U(2026, 10, 25, 22, 59))
    assert [r.logical_date.astimezone(ams).hour for r in fall] == [0, 1, 2, 2] + list(range(3, 24))


@pytest.mark.parametrize("tz,transition", [
    (AMS, U(2026, 3, 29, 1)), (AMS, U(2026, 10, 25, 1)),
    (NYC, U(2026, 3, 8, 7)), (NYC, U(2026, 11, 1, 6)),
])
def test_every_15_minutes_across_dst(tz, transition):
    tt = make_timetable("*/15 * * * *", tz, START_2026)
    begin, end = transition - 3 * HOUR, transition + 3 * HOUR
    runs = tt.runs_between(begin, end - dt.timedelta(microseconds=1))
    quarter = dt.timedelta(minutes=15)
    # Exactly every real quarter hour: none missing, none duplicated.
    assert starts(runs) == [begin + i * quarter for i in range(24)]
    assert all(r.data_interval.end - r.data_interval.start == quarter for r in runs)
    assert_well_formed(runs)
    assert chain(tt, 24, after=begin) == runs


# ---------------------------------------------------------------- start_date, end_date, catchup

# (schedule, tz, start_date, expected first interval)
# fmt: off
FIRST_INTERVAL = [
    ("0 2 * * *", "UTC", U(2026, 1, 1, 10), (U(2026, 1, 2, 2), U(2026, 1, 3, 2))),      # unaligned
    ("0 2 * * *", "UTC", U(2026, 1, 1, 2), (U(2026, 1, 1, 2), U(2026, 1, 2, 2))),       # on schedule
    ("0 * * * *", "UTC", U(2026, 1, 1, 10, 15), (U(2026, 1, 1, 11), U(2026, 1, 1, 12))),
    ("*/15 * * * *", "UTC", dt.datetime(2026, 1, 1, 10, 15, 0, 500, tzinfo=UTC),
     (U(2026, 1, 1, 10, 30), U(2026, 1, 1, 10, 45))),
    ("@weekly", "UTC", U(2026, 1, 1), (U(2026, 1, 4), U(2026, 1, 11))),                 # 01-01 is a Thursday
    ("@monthly", "UTC", U(2026, 1, 15), (U(2026, 2, 1), U(2026, 3, 1))),
    ("@yearly", "UTC", U(2026, 1, 15), (U(2027, 1, 1), U(2028, 1, 1))),
    ("0 2 * * *", AMS, U(2026, 1, 1), (U(2026, 1, 1, 1), U(2026, 1, 2, 1))),            # 02:00 CET
    ("@daily", NYC, U(2026, 1, 1), (U(2026, 1, 1, 5), U(2026, 1, 2, 5))),
    ("30 6 * * 1-5", AMS, U(2026, 3, 28), (U(2026, 3, 30, 4, 30), U(2026, 3, 31, 4, 30))),  # Sat -> Mon
    ("PT6H", "UTC", U(2026, 1, 1, 3, 7), (U(2026, 1, 1, 3, 7), U(2026, 1, 1, 9, 7))),    # grid = start_date
]
# fmt: on


@pytest.mark.parametrize("schedule,tz,start_date,expected", FIRST_INTERVAL)
def test_first_interval_at_or_after_start_date(schedule, tz, start_date, expected):
    run = make_timetable(schedule, tz, start_date).next_run(None)
    assert (run.data_interval.start, run.data_interval.end) == expected
    assert run.logical_date == expected[0] and run.run_after == expected[1]


def test_end_date_cut_off():
    tt = make_timetable("0 0 * * *", "UTC", START_2026, end_date=U(2026, 1, 3))
    assert tt.next_run(None).logical_date == U(2026, 1, 1)
    assert tt.next_run(U(2026, 1, 3)).data_interval == DataInterval(U(2026, 1, 3), U(2026, 1, 4))  # starts at end_date
    assert tt.next_run(U(2026, 1, 4)) is None
    assert starts(tt.runs_between(U(2025, 1, 1), U(2026, 12, 31))) == [U(2026, 1, 1), U(2026, 1, 2), U(2026, 1, 3)]

    tt = make_timetable("0 0 * * *", "UTC", START_2026, end_date=U(2026, 1, 3, 12))
    assert tt.next_run(U(2026, 1, 3)).logical_date == U(2026, 1, 3)
    assert tt.next_run(U(2026, 1, 4)) is None

    assert make_timetable("0 0 * * *", "UTC", START_2026, end_date=U(2025, 12, 1)).next_run(None) is None
    assert make_timetable("PT6H", "UTC", START_2026, end_date=U(2026, 1, 1, 6)).next_run(U(2026, 1, 1, 6, 1)) is None


# (schedule, tz, start_date, end_date, after, now, expected interval)
# fmt: off
CATCHUP_FALSE = [
    # behind: only the latest complete interval
    ("@daily", "UTC", START_2026, None, None, U(2026, 1, 10, 12), (U(2026, 1, 9), U(2026, 1, 10))),
    ("@daily", "UTC", START_2026, None, None, U(2026, 1, 10), (U(2026, 1, 9), U(2026, 1, 10))),
    ("@daily", "UTC", START_2026, None, U(2026, 1, 5), U(2026, 1, 10, 12), (U(2026, 1, 9), U(2026, 1, 10))),
    # up to date: the next interval, whether complete or not
    ("@daily", "UTC", START_2026, None, U(2026, 1, 9), U(2026, 1, 10, 12), (U(2026, 1, 9), U(2026, 1, 10))),
    ("@daily", "UTC", START_2026, None, U(2026, 1, 10), U(2026, 1, 10, 12), (U(2026, 1, 10), U(2026, 1, 11))),
    # nothing complete yet: same as catchup=True
    ("@daily", "UTC", START_2026, None, None, U(2026, 1, 1, 12), (U(2026, 1, 1), U(2026, 1, 2))),
    ("@daily", "UTC", START_2026, None, None, U(2025, 12, 1), (U(2026, 1, 1), U(2026, 1, 2))),
    # never earlier than the catchup=True answer (a run already exists beyond now)
    ("@daily", "UTC", START_2026, None, U(2026, 1, 20), U(2026, 1, 10, 12), (U(2026, 1, 20), U(2026, 1, 21))),
    # hourly on the Amsterdam fall-back night: 02:00 CEST -> 02:00 CET is complete at 01:30Z
    ("@hourly", AMS, START_2026, None, None, U(2026, 10, 25, 1, 30), (U(2026, 10, 25, 0), U(2026, 10, 25, 1))),
    ("0 2 * * *", AMS, START_2026, None, None, U(2026, 3, 30, 0, 30), (U(2026, 3, 29, 1), U(2026, 3, 30, 0))),
    ("PT6H", "UTC", START_2026, None, None, U(2026, 1, 10, 13), (U(2026, 1, 10, 6), U(2026, 1, 10, 12))),
    # issue 30: a fire inside a spring-forward gap (not at its start) fires shifted past it; the skip
    # used to loop forever from the gap's end until the next day's fire. 02:30 New York on 03-08 -> 07:30Z
    ("30 2 * * *", NYC, START_2026, None, None, U(2026, 3, 8, 12), (U(2026, 3, 7, 7, 30), U(2026, 3, 8, 7, 30))),
    ("30 2 * * *", NYC, START_2026, None, None, U(2026, 3, 8, 7), (U(2026, 3, 6, 7, 30), U(2026, 3, 7, 7, 30))),
    ("30 2 * * *", NYC, START_2026, None, None, U(2026, 3, 8, 7, 15), (U(2026, 3, 6, 7, 30), U(2026, 3, 7, 7, 30))),
    ("30 2 * * *", NYC, START_2026, None, None, U(2026, 3, 8, 7, 30), (U(2026, 3, 7, 7, 30), U(2026, 3, 8, 7, 30))),
    ("30 2 * * *", NYC, START_2026, None, None, U(2026, 3, 9, 6, 29), (U(2026, 3, 7, 7, 30), U(2026, 3, 8, 7, 30))),
    ("30 2 * * *", NYC, START_2026, None, U(2026, 3, 7, 7, 30), U(2026, 3, 8, 12),
     (U(2026, 3, 7, 7, 30), U(2026, 3, 8, 7, 30))),
    ("30 2 * * *", AMS, START_2026, None, None, U(2026, 3, 29, 12), (U(2026, 3, 28, 1, 30), U(2026, 3, 29, 1, 30))),
    # midnight does not exist in Santiago on 09-06: 00:30 -> 01:30 -03 (04:30Z)
    ("30 0 * * *", "America/Santiago", START_2026, None, None, U(2026, 9, 6, 12),
     (U(2026, 9, 5, 4, 30), U(2026, 9, 6, 4, 30))),
    # Lord Howe's 30-minute gap (02:00 -> 02:30 on 10-04): 02:15 -> 02:45 +11 (15:45Z on 10-03)
    ("15 2 * * *", "Australia/Lord_Howe", START_2026, None, None, U(2026, 10, 3, 20),
     (U(2026, 10, 2, 15, 45), U(2026, 10, 3, 15, 45))),
    # Chatham, +12:45 -> +13:45 at 02:45 on 09-27: 03:30 -> 04:30 +13:45 (14:45Z on 09-26)
    ("30 3 * * *", "Pacific/Chatham", START_2026, None, None, U(2026, 9, 26, 20),
     (U(2026, 9, 25, 14, 45), U(2026, 9, 26, 14, 45))),
    ("45 2 * * *", "Australia/Sydney", START_2026, None, None, U(2026, 10, 4),
     (U(2026, 10, 2, 16, 45), U(2026, 10, 3, 16, 45))),
]
# fmt: on


@pytest.mark.parametrize("schedule,tz,start_date,end_date,after,now,expected", CATCHUP_FALSE)
def test_catchup_false(schedule, tz, start_date, end_date, after, now, expected):
    tt = make_timetable(schedule, tz, start_date, end_date)
    run = tt.next_run(after, catchup=False, now=now)
    assert (run.data_interval.start, run.data_interval.end) == expected
    assert run.logical_date == expected[0] and run.run_after == expected[1]


def test_catchup_true_ignores_now_and_catchup_false_needs_now():
    tt = make_timetable("@daily", "UTC", START_2026)
    first = DataInterval(U(2026, 1, 1), U(2026, 1, 2))
    assert tt.next_run(None, catchup=True, now=U(2026, 1, 10, 12)).data_interval == first
    assert tt.next_run(None, catchup=False).data_interval == first
    tt = make_timetable("@daily", "UTC", START_2026, end_date=U(2026, 1, 5))
    assert tt.next_run(U(2026, 1, 6), catchup=False, now=U(2026, 1, 10)) is None


# (new schedule, new start_date, expected interval after the old run ending 2026-01-06 00:00Z)
# fmt: off
SCHEDULE_CHANGE = [
    ("0 12 * * *", START_2026, (U(2026, 1, 6, 12), U(2026, 1, 7, 12))),
    ("@hourly", START_2026, (U(2026, 1, 6), U(2026, 1, 6, 1))),
    ("@weekly", START_2026, (U(2026, 1, 11), U(2026, 1, 18))),        # 01-06 is a Tuesday
    ("PT6H", U(2026, 1, 1, 3), (U(2026, 1, 6, 3), U(2026, 1, 6, 9))),  # next point of the start_date grid
    ("PT6H", START_2026, (U(2026, 1, 6), U(2026, 1, 6, 6))),
    ("0 2 * * *", START_2026, (U(2026, 1, 6, 2), U(2026, 1, 7, 2))),
]
# fmt: on


@pytest.mark.parametrize("schedule,start_date,expected", SCHEDULE_CHANGE)
def test_schedule_change_takes_effect_after_latest_run(schedule, start_date, expected):
    old = make_timetable("0 0 * * *", "UTC", START_2026)
    latest = old.runs_between(U(2026, 1, 5), U(2026, 1, 5))[0]
    assert latest.data_interval.end == U(2026, 1, 6)
    run = make_timetable(schedule, "UTC", start_date).next_run(latest.data_interval.end)
    assert (run.data_interval.start, run.data_interval.end) == expected


def test_schedule_change_from_hourly_to_daily_in_amsterdam():
    old = make_timetable("@hourly", AMS, START_2026)
    latest = old.next_run(U(2026, 1, 5, 13))
    assert latest.data_interval == DataInterval(U(2026, 1, 5, 13), U(2026, 1, 5, 14))
    new = make_timetable("0 0 * * *", AMS, START_2026)
    assert new.next_run(latest.data_interval.end).data_interval == DataInterval(U(2026, 1, 5, 23), U(2026, 1, 6, 23))


# ------------------------------------------------------------------------------- @once, None


def test_once():
    sd = U(2026, 2, 3, 4, 5)
    tt = make_timetable("@once", AMS, sd)
    assert isinstance(tt, OnceTimetable) and not tt.periodic and tt.summary == "@once"
    run = tt.next_run(None)
    assert run == DagRunInfo(sd, DataInterval(sd, sd), sd)
    assert tt.next_run(None, catchup=False, now=U(2030, 1, 1)) == run
    assert tt.next_run(sd) is None
    assert tt.next_run(U(2020, 1, 1)) is None
    assert tt.runs_between(U(2026, 1, 1), U(2026, 12, 31)) == [run]
    assert tt.runs_between(sd, sd) == [run]
    assert tt.runs_between(U(2026, 2, 4), U(2026, 12, 31)) == []
    assert tt.manual_interval(U(2026, 5, 1)) == DataInterval(U(2026, 5, 1), U(2026, 5, 1))
    assert make_timetable("@ONCE", "UTC", sd, end_date=U(2026, 1, 1)).next_run(None) is None


def test_none():
    tt = make_timetable(None)
    assert isinstance(tt, NullTimetable) and not tt.periodic and tt.summary == "None"
    assert tt.next_run(None) is None
    assert tt.next_run(U(2026, 1, 1), catchup=False, now=U(2026, 2, 1)) is None
    assert tt.runs_between(U(2000, 1, 1), U(2100, 1, 1)) == []
    assert tt.manual_interval(U(2026, 5, 1, 7)) == DataInterval(U(2026, 5, 1, 7), U(2026, 5, 1, 7))
    assert make_timetable(None, AMS, START_2026).next_run(None) is None


def test_kinds_and_summary():
    assert isinstance(make_timetable("0 2 * * *", AMS, START_2026), CronTimetable)
    assert isinstance(make_timetable("PT6H", AMS, START_2026), DeltaTimetable)
    for schedule in ["0 2 * * *", "@daily", "PT6H", "P1D"]:
        tt = make_timetable(schedule, AMS, START_2026)
        assert tt.periodic and tt.summary == schedule


# ---------------------------------------------------------------------------------- durations

# (schedule, tz, start_date, count, expected starts, expected last end)
# fmt: off
DURATIONS = [
    # PT6H: real hours, so local wall times move by an hour across the switch
    ("PT6H", AMS, U(2026, 3, 27, 23), 6,
     [U(2026, 3, 27, 23) + i * 6 * HOUR for i in range(6)], U(2026, 3, 29, 11)),
    ("PT6H", NYC, U(2026, 10, 31, 4), 6,
     [U(2026, 10, 31, 4) + i * 6 * HOUR for i in range(6)], U(2026, 11, 1, 16)),
    # P1D: 24 real hours, as Airflow's timedelta(days=1): local midnight becomes 01:00 after spring forward
    ("P1D", AMS, U(2026, 3, 27, 23), 3, [U(2026, 3, 27, 23), U(2026, 3, 28, 23), U(2026, 3, 29, 23)], U(2026, 3, 30, 23)),
    ("P1D", NYC, U(2026, 10, 31, 4), 3, [U(2026, 10, 31, 4), U(2026, 11, 1, 4), U(2026, 11, 2, 4)], U(2026, 11, 3, 4)),
    ("PT24H", AMS, U(2026, 3, 27, 23), 3, [U(2026, 3, 27, 23), U(2026, 3, 28, 23), U(2026, 3, 29, 23)], U(2026, 3, 30, 23)),
    # PT36H and P1DT12H are the same real length
    ("PT36H", AMS, U(2026, 3, 28, 11), 2, [U(2026, 3, 28, 11), U(2026, 3, 29, 23)], U(2026, 3, 31, 11)),
    ("P1DT12H", AMS, U(2026, 3, 28, 11), 2, [U(2026, 3, 28, 11), U(2026, 3, 29, 23)], U(2026, 3, 31, 11)),
    # a local daily wall time is a cron's job: "0 0 * * *" keeps local midnight (23 h and 25 h days)
    # P1M from Jan 31: each point from start_date, so no end-of-month drift
    ("P1M", "UTC", U(2026, 1, 31), 3, [U(2026, 1, 31), U(2026, 2, 28), U(2026, 3, 31)], U(2026, 4, 30)),
    ("P1W", "UTC", U(2026, 1, 1, 12), 2, [U(2026, 1, 1, 12), U(2026, 1, 8, 12)], U(2026, 1, 15, 12)),
]
# fmt: on


@pytest.mark.parametrize("schedule,tz,start_date,count,expected,last_end", DURATIONS)
def test_durations(schedule, tz, start_date, count, expected, last_end):
    tt = make_timetable(schedule, tz, start_date)
    runs = chain(tt, count)
    assert starts(runs) == expected
    assert runs[-1].data_interval.end == last_end
    assert_well_formed(runs)
    assert tt.runs_between(expected[0], expected[-1]) == runs


# ----------------------------------------------------------------------------- manual_interval

# (schedule, tz, start_date, logical date, expected interval)
# fmt: off
MANUAL = [
    ("0 2 * * *", "UTC", START_2026, U(2026, 1, 5, 10), (U(2026, 1, 5, 2), U(2026, 1, 6, 2))),
    ("0 2 * * *", "UTC", START_2026, U(2026, 1, 5, 2), (U(2026, 1, 5, 2), U(2026, 1, 6, 2))),       # on a boundary
    ("0 2 * * *", "UTC", START_2026, U(2026, 1, 5, 1, 59), (U(2026, 1, 4, 2), U(2026, 1, 5, 2))),
    ("0 2 * * *", "UTC", START_2026, U(2025, 6, 1, 10), (U(2025, 6, 1, 2), U(2025, 6, 2, 2))),       # before start_date
    ("0 2 * * *", AMS, START_2026, U(2026, 3, 29, 1, 30), (U(2026, 3, 29, 1), U(2026, 3, 30, 0))),
    ("0 2 * * *", AMS, START_2026, U(2026, 3, 29, 0, 30), (U(2026, 3, 28, 1), U(2026, 3, 29, 1))),
    ("@hourly", AMS, START_2026, U(2026, 10, 25, 0, 30), (U(2026, 10, 25, 0), U(2026, 10, 25, 1))),  # 02:30 CEST
    ("@hourly", AMS, START_2026, U(2026, 10, 25, 1, 30), (U(2026, 10, 25, 1), U(2026, 10, 25, 2))),  # 02:30 CET
    ("*/15 * * * *", NYC, START_2026, U(2026, 3, 8, 6, 59), (U(2026, 3, 8, 6, 45), U(2026, 3, 8, 7))),
    ("PT6H", "UTC", U(2026, 1, 1, 3), U(2026, 1, 5, 10), (U(2026, 1, 5, 9), U(2026, 1, 5, 15))),
    ("PT6H", "UTC", U(2026, 1, 1, 3), U(2026, 1, 1, 3), (U(2026, 1, 1, 3), U(2026, 1, 1, 9))),
    ("PT6H", "UTC", U(2026, 1, 1, 3), U(2025, 12, 31, 23), (U(2025, 12, 31, 21), U(2026, 1, 1, 3))),
    ("P1M", "UTC", U(2026, 1, 31), U(2026, 3, 15), (U(2026, 2, 28), U(2026, 3, 31))),
    ("P1D", AMS, U(2026, 3, 27, 23), U(2026, 3, 29, 12), (U(2026, 3, 28, 23), U(2026, 3, 29, 23))),
    (None, "UTC", None, U(2026, 1, 5, 10, 11), (U(2026, 1, 5, 10, 11), U(2026, 1, 5, 10, 11))),
    ("@once", "UTC", START_2026, U(2026, 1, 5, 10), (U(2026, 1, 5, 10), U(2026, 1, 5, 10))),
]
# fmt: on


@pytest.mark.parametrize("schedule,tz,start_date,logical_date,expected", MANUAL)
def test_manual_interval(schedule, tz, start_date, logical_date, expected):
    interval = make_timetable(schedule, tz, start_date).manual_interval(logical_date)
    assert interval == DataInterval(*expected)


def test_inputs_in_other_zones_and_pendulum_are_normalised_to_utc():
    tt = make_timetable("0 2 * * *", "UTC", START_2026)
    interval = tt.manual_interval(pendulum.datetime(2026, 1, 5, 11, tz=AMS))  # 10:00Z
    assert interval == DataInterval(U(2026, 1, 5, 2), U(2026, 1, 6, 2))
    assert type(interval.start) is dt.datetime and interval.start.tzinfo is UTC
    tt = make_timetable("@daily", AMS, pendulum.datetime(2026, 1, 1, tz=AMS))
    run = tt.next_run(dt.datetime(2026, 1, 3, tzinfo=zoneinfo.ZoneInfo(AMS)))
    assert run.data_interval == DataInterval(U(2026, 1, 2, 23), U(2026, 1, 3, 23))
    assert type(run.logical_date) is dt.datetime and run.logical_date.tzinfo is UTC


# ------------------------------------------------------------------------------- runs_between

# (schedule, start_date, end_date, range, expected starts)
# fmt: off
RANGES = [
    ("@daily", START_2026, None, (U(2026, 1, 3), U(2026, 1, 6)),
     [U(2026, 1, 3), U(2026, 1, 4), U(2026, 1, 5), U(2026, 1, 6)]),                 # both ends included
    ("@daily", START_2026, None, (U(2025, 12, 25), U(2026, 1, 2)), [U(2026, 1, 1), U(2026, 1, 2)]),  # from start_date
    ("0 2 * * *", START_2026, None, (U(2026, 1, 3, 1), U(2026, 1, 6, 1)),
     [U(2026, 1, 3, 2), U(2026, 1, 4, 2), U(2026, 1, 5, 2)]),
    ("@daily", START_2026, U(2026, 1, 4, 12), (U(2026, 1, 3), U(2026, 1, 9)), [U(2026, 1, 3), U(2026, 1, 4)]),
    ("@daily", START_2026, None, (U(2026, 1, 6), U(2026, 1, 3)), []),                # empty range
    ("@daily", START_2026, None, (U(2026, 1, 3, 1), U(2026, 1, 3, 23)), []),        # no fire inside
    ("PT6H", U(2026, 1, 1, 3), None, (U(2026, 1, 2), U(2026, 1, 2, 15)), [U(2026, 1, 2, 3), U(2026, 1, 2, 9), U(2026, 1, 2, 15)]),
]
# fmt: on


@pytest.mark.parametrize("schedule,start_date,end_date,window,expected", RANGES)
def test_runs_between(schedule, start_date, end_date, window, expected):
    runs = make_timetable(schedule, "UTC", start_date, end_date).runs_between(*window)
    assert starts(runs) == expected
    assert_well_formed(runs)


@pytest.mark.parametrize("schedule,tz,count", [
    ("0 0 * * *", "UTC", 10_001),
    ("0 2 * * *", AMS, 10_001),   # the last, 2027-05-19 02:00 CEST, is exactly the range end 00:00Z
    ("30 6 * * *", NYC, 10_000),  # the first day's 06:30 is 11:30Z, the range ends at 00:00Z
    ("P1D", AMS, 10_001),
])
def test_runs_between_10000_days(schedule, tz, count):
    begin = U(2000, 1, 1)
    end = begin + 10_000 * DAY
    tt = make_timetable(schedule, tz, begin)
    runs = tt.runs_between(begin, end)
    assert len(runs) == count
    assert runs[0].logical_date >= begin and runs[-1].logical_date <= end
    assert_well_formed(runs)
    assert all(23 * HOUR <= r.data_interval.end - r.data_interval.start <= 25 * HOUR for r in runs)


# ---------------------------------------------------------------------------- validate_schedule

GOOD = [None, "0 2 * * *", "*/15 * * * *", "30 6 * * 1-5", "0 0 1,15 * *", "0 0 * * sun", " 0 2 * * * ",
        "@once", "@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually", "@Daily",
        "PT6H", "P1D", "P1DT12H", "PT15M", "P1M", "P1W", "pt6h"]
BAD = ["61 * * * *", "* * * *", "0 0 * * * *", "0 0 * * * * *", "every day", "@fortnightly", "PT0S",
       "P0D", "", "   ", "0 0 30 2 *", "0 25 * * *", "P", "PT", "P-1D", "1D", "H * * * *", 42]


@pytest.mark.parametrize("schedule", GOOD)
def test_validate_schedule_accepts(schedule):
    validate_schedule(schedule)


@pytest.mark.parametrize("schedule", BAD)
def test_validate_schedule_refuses_with_what_is_accepted(schedule):
    with pytest.raises(ValueError) as info:
        validate_schedule(schedule)
    message = str(info.value)
    assert "5-field cron" in message and "@daily" in message and "PT6H" in message
    with pytest.raises(ValueError):
        make_timetable(schedule, "UTC", START_2026)


def test_validate_schedule_says_why():
    with pytest.raises(ValueError, match="6 field"):
        validate_schedule("0 0 * * * *")
    with pytest.raises(ValueError, match="4 field"):
        validate_schedule("* * * *")
    with pytest.raises(ValueError, match="preset"):
        validate_schedule("@fortnightly")
    with pytest.raises(ValueError, match="zero duration"):
        validate_schedule("PT0S")


def test_make_timetable_errors():
    with pytest.raises(ValueError, match="start_date"):
        make_timetable("0 2 * * *", "UTC", None)
    with pytest.raises(ValueError, match="start_date"):
        make_timetable("@once", "UTC", None)
    with pytest.raises(ValueError, match="time zone"):
        make_timetable("0 2 * * *", "Mars/Olympus", START_2026)


# ------------------------------------------------------------------------------- bounded loops


# (the step broken, how it is broken, the search that must stop)
BROKEN_STEPS = [
    ("_get_prev", lambda x: U(2100, 1, 1), lambda tt: tt.next_run(None, catchup=False, now=U(2026, 3, 8, 12))),  # probes
    ("_get_next", lambda x: x, lambda tt: tt.next_run(None, catchup=False, now=U(2026, 3, 8, 12))),  # the skip
    ("_get_next", lambda x: x, lambda tt: tt.next_run(U(2026, 3, 5, 12), now=U(2026, 3, 8, 12))),  # a changed schedule
    ("_get_next", lambda x: x - DAY, lambda tt: tt.next_run(None, catchup=False, now=U(2026, 3, 8, 12))),
]


@pytest.mark.parametrize("step,broken,search", BROKEN_STEPS, ids=["prev_ahead", "next_stuck_skip",
                                                                  "next_stuck_after", "next_backwards"])
def test_a_step_that_never_moves_stops_with_an_error_naming_the_dag_and_the_instant(monkeypatch, step, broken, search):
    tt = make_timetable("30 2 * * *", NYC, START_2026, dag_id="nightly")
    monkeypatch.setattr(tt, step, broken)
    with pytest.raises(ScheduleLoopError) as info:
        search(tt)
    error = info.value
    assert isinstance(error, DaglineError) and error.exit_code == 1 and error.dag_id == "nightly"
    message = str(error)
    assert message.startswith("DAG nightly: schedule '30 2 * * *' in America/New_York: ")
    assert f"{MAX_STEPS:,} steps" in message or "20 steps" in message
    assert "2026-03-0" in message and "defect" in message


def test_a_duration_whose_points_never_pass_the_instant_stops_with_an_error(monkeypatch):
    tt = make_timetable("PT6H", "UTC", START_2026, dag_id="every_6h")
    monkeypatch.setattr(tt, "_point", lambda k: START_2026)
    with pytest.raises(ScheduleLoopError, match=r"DAG every_6h: schedule 'PT6H' in UTC: finding the first fire "
                                                r"at or after 2026-01-02T00:00:00\+00:00 took more than"):
        tt.next_run(None, earliest=U(2026, 1, 2))


def test_a_walk_that_stops_advancing_is_an_error_not_an_endless_walk(monkeypatch):
    tt = make_timetable("@daily", "UTC", START_2026)
    stuck = tt.next_run(None)
    monkeypatch.setattr(tt, "next_run", lambda *a, **k: stuck)
    with pytest.raises(ScheduleLoopError, match="schedule '@daily' in UTC: the run after the interval ending at "
                                                "2026-01-02T00:00:00\\+00:00 did not advance"):
        tt.runs_between(START_2026, U(2026, 2, 1))
