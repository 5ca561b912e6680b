"""Properties of cron timetables in every IANA zone that has had a DST rule since 2020, over 2026.

For each zone and each cron of the issue's set (daily at 00:00, 00:30, 01:30, 02:00, 02:30, 03:00
and 23:30; twice daily; weekly on Sunday; monthly on the 29th, over the whole year; hourly and
every 15 minutes in the two days around each transition), the intervals the scheduler would create
one after another (`Timetable.upcoming`, the path of run creation, `dags next-runs` and backfills):

- are contiguous (one's end is the next's start), never empty, never repeated;
- start exactly at the fire times the cron's fields name in local time, none missing and none
  extra, as worked out here independently with `zoneinfo`: a wall time that happens twice fires at
  its second occurrence (an hourly or quarter-hourly cron: at both), one skipped by a
  spring-forward gap fires shifted forward by the length of the gap (for a fire on the hour and a
  one-hour gap: the first valid time after it), as Airflow's timetable does.

Zones whose UTC offsets are the same at every instant of the window are the same timetable for any
cron (tzdata's links and zones with identical rules), so each such group is tested once, through
its first name; the test id lists how many zones it stands for.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from functools import cache

import pytest
from croniter import croniter

from dagline.domain.timetable import make_timetable

UTC = dt.timezone.utc
YEAR_START, YEAR_END = dt.datetime(2026, 1, 1, tzinfo=UTC), dt.datetime(2027, 1, 1, tzinfo=UTC)
WHOLE_YEAR = ["0 0 * * *", "30 0 * * *", "30 1 * * *", "0 2 * * *", "30 2 * * *", "0 3 * * *", "30 23 * * *",
              "0 0,12 * * *", "0 0 * * 0", "0 0 29 * *"]
AROUND_TRANSITIONS = ["0 * * * *", "*/15 * * * *"]


def _had_dst_since_2020(zone: zoneinfo.ZoneInfo) -> bool:
    start = dt.datetime(2020, 1, 1, tzinfo=UTC)
    offsets = {(start + dt.timedelta(weeks=w)).astimezone(zone).utcoffset() for w in range(7 * 53)}
    return len(offsets) > 1


def _transitions(zone: zoneinfo.ZoneInfo) -> list[tuple[dt.datetime, dt.timedelta, dt.timedelta]]:
    """(instant, offset before, offset after) of each offset change between late 2025 and early 2027."""
    found = []
    step = dt.timedelta(hours=6)
    t = YEAR_START - dt.timedelta(days=3)
    while t < YEAR_END + dt.timedelta(days=3):
        before, after = t.astimezone(zone).utcoffset(), (t + step).astimezone(zone).utcoffset()
        if before != after:
            lo, hi = t, t + step  # offset(lo) == before, offset(hi) == after: bisect to the minute
            while hi - lo > dt.timedelta(minutes=1):
                mid = lo + (hi - lo) / 2
                lo, hi = (mid, hi) if mid.astimezone(zone).utcoffset() == before else (lo, mid)
            found.append((hi.replace(second=0, microsecond=0), before, after))
        t += step
    return found


@cache
def zone_groups() -> list[tuple[str, int]]:
    """(first zone name, how many zones) per group of zones with the same offsets over the window."""
    groups: dict[tuple, list[str]] = {}
    for name in sorted(zoneinfo.available_timezones()):
        zone = zoneinfo.ZoneInfo(name)
        if not _had_dst_since_2020(zone):
            continue
        signature = (YEAR_START.astimezone(zone).utcoffset(), tuple(_transitions(zone)))
        groups.setdefault(signature, []).append(name)
    return [(names[0], len(names)) for names in groups.values()]


def _wall(instant: dt.datetime, zone: zoneinfo.ZoneInfo) -> dt.datetime:
    return instant.astimezone(zone).replace(tzinfo=None, fold=0)


def _expected_fires(cron: str, zone: zoneinfo.ZoneInfo, begin: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """The fire instants in [begin, end) the cron's fields name, worked out without dagline.

    Each wall time the fields name fires at the instant(s) the local clock shows it: a cron with
    hour `*` at every such instant (both passes of a fall-back hour), any other cron at the second
    one only. A wall time inside a spring-forward gap fires shifted forward by the gap (zoneinfo's
    fold=0 reading, with the offset from before the change); fires that land on the same instant
    are one fire.
    """
    every_hour = croniter(cron).expanded[1] == ["*"]
    fires: set[dt.datetime] = set()
    it = croniter(cron, _wall(begin, zone) - dt.timedelta(days=2))
    while True:
        naive = it.get_next(dt.datetime)
        candidates = sorted({naive.replace(tzinfo=zone, fold=f).astimezone(UTC) for f in (0, 1)})
        shown = [c for c in candidates if _wall(c, zone) == naive]
        if not shown:
            shown = [naive.replace(tzinfo=zone, fold=0).astimezone(UTC)]
        elif not every_hour:
            shown = shown[-1:]
        if min(shown) >= end + dt.timedelta(days=1):
            return sorted(f for f in fires if begin <= f < end)
        fires.update(shown)


def _check(cron: str, zone_name: str, begin: dt.datetime, end: dt.datetime) -> None:
    zone = zoneinfo.ZoneInfo(zone_name)
    table = make_timetable(cron, zone_name, begin)
    runs = []
    for info in table.upcoming(None):
        if info.logical_date >= end:
            break
        runs.append(info)
    for run in runs:
        assert run.data_interval.start < run.data_interval.end, f"empty interval {run}"
    for earlier, later in zip(runs, runs[1:]):
        assert earlier.data_interval.end == later.data_interval.start, f"gap or overlap after {earlier}"
    starts = [run.logical_date for run in runs]
    expected = _expected_fires(cron, zone, begin, end)
    missing, extra = sorted(set(expected) - set(starts)), sorted(set(starts) - set(expected))
    assert not missing and not extra, (
        f"{cron!r} in {zone_name}: missing {[str(_wall(m, zone)) for m in missing[:5]]}, "
        f"extra {[str(_wall(e, zone)) for e in extra[:5]]}")
    assert len(starts) == len(set(starts)), "a repeated interval"


def _group_ids() -> list:
    return [pytest.param(name, id=f"{name}(+{count - 1})") for name, count in zone_groups()]


def test_the_zones_are_the_ones_that_matter():
    names = {name for name, _ in zone_groups()}
    total = sum(count for _, count in zone_groups())
    assert total >= 100  # every zone with a DST rule since 2020, counted through its group
    for zone in ["America/New_York", "Europe/Amsterdam", "Australia/Sydney", "America/Santiago",
                 "Australia/Lord_Howe", "Pacific/Chatham", "Asia/Beirut"]:
        group = next(n for n in names if _transitions(zoneinfo.ZoneInfo(n)) == _transitions(zoneinfo.ZoneInfo(zone))
                     and YEAR_START.astimezone(zoneinfo.ZoneInfo(n)).utcoffset()
                     == YEAR_START.astimezone(zoneinfo.ZoneInfo(zone)).utcoffset())
        assert group


@pytest.mark.parametrize("zone_name", _group_ids())
def test_whole_year_crons(zone_name):
    for cron in WHOLE_YEAR:
        _check(cron, zone_name, YEAR_START, YEAR_END)


@pytest.mark.parametrize("zone_name", _group_ids())
def test_sub_daily_crons_around_each_transition(zone_name):
    transitions = [t for t, _, _ in _transitions(zoneinfo.ZoneInfo(zone_name)) if YEAR_START <= t < YEAR_END]
    for instant in transitions:
        for cron in AROUND_TRANSITIONS:
            _check(cron, zone_name, instant - dt.timedelta(days=1), instant + dt.timedelta(days=1))
