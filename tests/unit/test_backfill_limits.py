"""A backfill's range is bounded (MAX_BACKFILL_RUNS intervals): counted in growing windows, so even a
minutely schedule over seven thousand years is refused without listing its intervals."""

from __future__ import annotations

import datetime as dt

import pytest

from dagline import limits
from dagline.domain.timetable import make_timetable
from dagline.errors import InvalidInput
from dagline.store import backfills as backfill
from dagline.store.backfills import plan_backfill
from dagline.times import UTC

pytestmark = pytest.mark.timeout(60)

START = dt.datetime(2026, 1, 1, tzinfo=UTC)
FIRST, LAST = dt.datetime(limits.MIN_YEAR, 1, 1, tzinfo=UTC), dt.datetime(limits.MAX_YEAR, 12, 31, tzinfo=UTC)


def plan(schedule: str, start: dt.datetime, end: dt.datetime):
    table = make_timetable(schedule, "UTC", FIRST)
    return plan_backfill(table, {}, start=start, end=end, reprocess="none", now=START)


def test_the_whole_calendar_of_a_daily_schedule_is_refused_naming_the_limit():
    with pytest.raises(InvalidInput) as caught:
        plan("@daily", FIRST, LAST)  # 2.6 million intervals
    assert caught.value.field == "--end"
    assert f"the limit is {limits.MAX_BACKFILL_RUNS:,} per backfill" in caught.value.reason
    assert "holds about 2,59" in caught.value.reason  # 2.59 million, estimated from the first intervals


def test_exactly_the_limit_is_planned_and_one_more_is_refused(monkeypatch):
    monkeypatch.setattr(backfill, "MAX_BACKFILL_RUNS", 1_000)  # the counting, at a size a unit test affords
    last = START + dt.timedelta(hours=999)
    assert len(plan("@hourly", START, last).entries) == 1_000
    with pytest.raises(InvalidInput, match="holds more than 1,000 intervals"):
        plan("@hourly", START, last + dt.timedelta(hours=1))


@pytest.mark.parametrize("schedule", ["* * * * *", "PT1M", "@hourly"])
def test_dense_schedules_over_the_calendar_are_refused_without_listing_it(monkeypatch, schedule):
    monkeypatch.setattr(backfill, "MAX_BACKFILL_RUNS", 5_000)
    with pytest.raises(InvalidInput, match="split the range"):
        plan(schedule, FIRST, LAST)  # billions of minutes: listing them would never end


def test_a_sparse_schedule_over_two_centuries_is_planned():
    assert len(plan("@yearly", dt.datetime(1900, 1, 1, tzinfo=UTC), dt.datetime(2100, 1, 1, tzinfo=UTC)).entries) == 201
