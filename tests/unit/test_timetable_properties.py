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

Fires inside spring-forward gaps (issue 30): in every zone, the daily crons at :15, :30, :45 and :59
whose wall time lies inside a 2026 spring-forward gap (not at its start) make the same checked
timeline across the gap, and with `catchup: false` the run at any instant from an hour before the
gap to a day after it (every 15 minutes, the gap's end and each shifted fire to the microsecond) is
the latest interval of that timeline complete at the instant, followed by the next ones. A
hypothesis test draws further instants, zones and crons, near a transition or anywhere in 2026.

Zones whose UTC offsets are the same at every instant of the window are the same timetable for any
cron (tzdata's links and zones with identical rules), so each such group is tested once, through
its first name; the test id lists how many zones it stands for. Every test has a few seconds
(`pytestmark`): a search that loops fails fast instead of hanging.
"""

from __future__ import annotations

import datetime as dt
import itertools
import zoneinfo
from functools import cache

import pytest
from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagline.domain.timetable import make_timetable

pytestmark = pytest.mark.timeout(20)

UTC = dt.timezone.utc
YEAR_START, YEAR_END = dt.datetime(2026, 1, 1, tzinfo=UTC), dt.datetime(2027, 1, 1, tzinfo=UTC)
WHOLE_YEAR = ["0 0 * * *", "30 0 * * *", "30 1 * * *", "0 2 * * *", "30 2 * * *", "0 3 * * *", "30 23 * * *",
              "0 0,12 * * *", "0 0 * * 0", "0 0 29 * *"]
AROUND_TRANSITIONS = ["0 * * * *", "*/15 * * * *"]
GAP_MINUTES = (15, 30, 45, 59)
MICROSECOND = dt.timedelta(microseconds=1)


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


def _check(cron: str, zone_name: str, begin: dt.datetime, end: dt.datetime) -> list:
    """The runs `upcoming` gives from `begin` up to `end`, after checking them against the cron's fields."""
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
    return runs


def _gaps(zone: zoneinfo.ZoneInfo) -> list[tuple[dt.datetime, dt.datetime, dt.datetime]]:
    """(instant, first skipped wall time, first valid wall time after) of each spring-forward gap in 2026."""
    return [(t, (t + before).replace(tzinfo=None), (t + after).replace(tzinfo=None))
            for t, before, after in _transitions(zone) if YEAR_START <= t < YEAR_END and after > before]


def _gap_crons(first: dt.datetime, end: dt.datetime) -> list[tuple[str, dt.datetime]]:
    """(cron, wall time) of the daily crons at GAP_MINUTES whose wall time lies inside the gap, not at its start."""
    hours = sorted({(first + dt.timedelta(minutes=m)).hour for m in range(int((end - first).total_seconds() // 60))})
    walls = [first.replace(hour=h, minute=m) for h in hours for m in GAP_MINUTES]
    return [(f"{w.minute} {w.hour} * * *", w) for w in walls if first < w < end]


def _check_catchup_off(cron: str, zone_name: str, runs: list, now: dt.datetime) -> None:
    """With catchup off, the runs from `now` are the latest of `runs` complete at `now`, then the next two."""
    latest = max(i for i, run in enumerate(runs) if run.data_interval.end <= now)
    table = make_timetable(cron, zone_name, runs[0].logical_date)
    got = list(itertools.islice(table.upcoming(None, catchup=False, now=now), 3))
    assert got == runs[latest:latest + 3], (
        f"{cron!r} in {zone_name} at {now}: {[str(r.data_interval) for r in got]}")


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


def _gap_groups() -> list:
    return [pytest.param(name, id=f"{name}(+{count - 1})") for name, count in zone_groups()
            if _gaps(zoneinfo.ZoneInfo(name))]


def test_gaps_of_the_issue_are_covered():
    crons = {name: [c for t, first, end in _gaps(zoneinfo.ZoneInfo(name)) for c, _ in _gap_crons(first, end)]
             for name in ["America/New_York", "Australia/Sydney", "America/Santiago", "Australia/Lord_Howe",
                          "Pacific/Chatham"]}
    assert crons["America/New_York"] == ["15 2 * * *", "30 2 * * *", "45 2 * * *", "59 2 * * *"]
    assert crons["America/Santiago"] == ["15 0 * * *", "30 0 * * *", "45 0 * * *", "59 0 * * *"]  # at midnight
    assert crons["Australia/Lord_Howe"] == ["15 2 * * *"]  # 02:00 -> 02:30
    assert crons["Pacific/Chatham"] == ["59 2 * * *", "15 3 * * *", "30 3 * * *"]  # 02:45 -> 03:45
    assert crons["Australia/Sydney"] == crons["America/New_York"]


@pytest.mark.parametrize("zone_name", _gap_groups())
def test_fires_inside_spring_forward_gaps_catchup_on_and_off(zone_name):
    for transition, first, end in _gaps(zoneinfo.ZoneInfo(zone_name)):
        shifted = [transition + (wall - end) + (end - first) for _, wall in _gap_crons(first, end)]
        around = [transition + k * dt.timedelta(minutes=15) for k in range(-4, 4 * 26)]
        edges = [i + d for i in [transition, *shifted] for d in (-MICROSECOND, dt.timedelta(0), MICROSECOND)]
        for cron, _ in _gap_crons(first, end):
            runs = _check(cron, zone_name, transition - dt.timedelta(days=3), transition + dt.timedelta(days=3))
            for now in sorted(set(around + edges)):
                _check_catchup_off(cron, zone_name, runs, now)


# (cron, how far before `now` its timeline starts, how far after it the timeline goes)
_KINDS = [("{m} {h} * * *", 3, 4), ("{m} {h} * * 0", 15, 25), ("{m} * * * *", 1, 1), ("*/15 * * * *", 1, 1),
          ("{m} {h},{h2} * * *", 3, 4)]


# A loop here must not be caught and replayed by hypothesis (the signal method's failure is, and the replay
# would hang past the timeout): the thread method dumps every stack and ends the run instead.
@pytest.mark.timeout(20, method="thread")
@settings(max_examples=100, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_catchup_off_at_any_instant_takes_the_latest_complete_interval(data):
    zone_name = data.draw(st.sampled_from([name for name, _ in zone_groups()]), label="zone")
    zone = zoneinfo.ZoneInfo(zone_name)
    pattern, back, ahead = data.draw(st.sampled_from(_KINDS), label="kind")
    hour = data.draw(st.integers(0, 23), label="hour")
    transitions = [t for t, _, _ in _transitions(zone) if YEAR_START <= t < YEAR_END]
    gaps = _gaps(zone)
    where = data.draw(st.sampled_from(["in a gap", "near a transition", "anywhere"]), label="where")
    if where == "in a gap" and gaps:
        transition, first, _ = data.draw(st.sampled_from(gaps), label="gap")
        hour = first.hour  # the cron's wall time in the gap's first hour: inside it for most minutes
        now = transition + data.draw(st.integers(-120, 26 * 60), label="minutes after it") * dt.timedelta(minutes=1)
    elif where == "near a transition" and transitions:
        now = data.draw(st.sampled_from(transitions)) + data.draw(
            st.integers(-120, 26 * 60), label="minutes after it") * dt.timedelta(minutes=1)
    else:
        now = YEAR_START + data.draw(st.integers(0, 365 * 24 * 60), label="minute of 2026") * dt.timedelta(minutes=1)
    now += data.draw(st.sampled_from((dt.timedelta(0), -MICROSECOND, MICROSECOND)), label="nudge")
    cron = pattern.format(m=data.draw(st.sampled_from((0, 1, *GAP_MINUTES)), label="minute"), h=hour,
                          h2=(hour + data.draw(st.integers(1, 23))) % 24)
    runs = _check(cron, zone_name, now - dt.timedelta(days=back), now + dt.timedelta(days=ahead))
    _check_catchup_off(cron, zone_name, runs, now)
