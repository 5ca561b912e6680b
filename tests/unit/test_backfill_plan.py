"""Backfill planning is pure: which intervals to create, replace or leave, for each `reprocess` mode."""

from __future__ import annotations

import datetime as dt

import pytest

from dagline.domain.timetable import make_timetable
from dagline.store.backfills import plan_backfill
from dagline.times import UTC


def day(d: int, h: int = 0) -> dt.datetime:
    return dt.datetime(2026, 3, d, h, tzinfo=UTC)


TABLE = make_timetable("@daily", "UTC", day(1))
NOW = day(20)
EXISTING = {day(2): (2, "success"), day(3): (3, "failed"), day(4): (4, "running"), day(5): (5, "queued")}


@pytest.mark.parametrize("reprocess, expected", [
    ("none", ["create", "keep_existing", "keep_existing", "keep_active", "keep_active", "create"]),
    ("failed", ["create", "keep_existing", "replace", "keep_active", "keep_active", "create"]),
    ("completed", ["create", "replace", "replace", "keep_active", "keep_active", "create"]),
])
def test_reprocess_decides_what_happens_to_existing_runs(reprocess, expected):
    plan = plan_backfill(TABLE, EXISTING, start=day(1), end=day(6), reprocess=reprocess, now=NOW)
    assert [e.action for e in plan.entries] == expected
    assert [e.logical_date for e in plan.entries] == [day(d) for d in range(1, 7)]


def test_both_ends_are_included_and_unaligned_bounds_take_the_intervals_inside():
    plan = plan_backfill(TABLE, {}, start=day(1, 1), end=day(4, 0), reprocess="none", now=NOW)
    assert [e.logical_date for e in plan.entries] == [day(2), day(3), day(4)]
    assert plan.entries[0].data_interval.end == day(3)


def test_intervals_that_have_not_ended_are_not_due():
    plan = plan_backfill(TABLE, {}, start=day(18), end=day(25), reprocess="none", now=NOW)
    # the 19th's interval ends exactly at `now`: due; the 20th's has not ended
    assert [e.action for e in plan.entries] == ["create", "create"] + ["not_due"] * 6
    assert len(plan.to_run) == 2


def test_nothing_before_the_dags_start_date():
    table = make_timetable("@daily", "UTC", day(10))
    plan = plan_backfill(table, {}, start=day(1), end=day(11), reprocess="none", now=NOW)
    assert [e.logical_date for e in plan.entries] == [day(10), day(11)]


def test_ten_thousand_days_plan_quickly():
    table = make_timetable("@daily", "UTC", dt.datetime(1990, 1, 1, tzinfo=UTC))
    start = dt.datetime(1990, 1, 1, tzinfo=UTC)
    plan = plan_backfill(table, {}, start=start, end=start + dt.timedelta(days=9999), reprocess="none",
                         now=dt.datetime(2030, 1, 1, tzinfo=UTC))
    assert len(plan.to_run) == 10_000
