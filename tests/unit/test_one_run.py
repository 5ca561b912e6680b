"""When a `dags test` run can never move again (`scheduler.one_run.blocked_for_good`): a table of cases."""

from __future__ import annotations

import datetime as dt

import pytest

from dagline.scheduler.one_run import TaskView, blocked_for_good

NOW = dt.datetime(2026, 3, 10, tzinfo=dt.timezone.utc)
LATER = NOW + dt.timedelta(minutes=5)


def ti(task_id, state, pool="default", slots=1, retry_at=None):
    return TaskView(task_id, state, 1, 2, pool, slots, None, None, retry_at)


@pytest.mark.parametrize("tasks, pools, wait, expected", [
    ([ti("a", "running"), ti("b", "scheduled", pool="gone")], {"default": 1}, True, []),  # a try is in flight
    ([ti("a", "queued")], {}, False, []),
    ([ti("a", "scheduled")], {"default": 1}, True, []),  # slots may free, the critical section may have been busy
    ([ti("a", "scheduled", pool="gone"), ti("b", "none")], {"default": 1}, True,
     ["a: pool 'gone' does not exist (`dagline pools set gone N`)"]),
    ([ti("a", "scheduled", slots=3)], {"default": 2}, True, ["a: needs 3 slots of pool 'default', which has 2"]),
    ([ti("a", "scheduled", pool="gone"), ti("b", "scheduled")], {"default": 1}, True, []),  # b can still run
    ([ti("a", "up_for_retry", retry_at=LATER)], {"default": 1}, True, []),  # the wall clock gets there
    ([ti("a", "up_for_retry", retry_at=LATER)], {"default": 1}, False,
     [f"a: its retry is due at {LATER.isoformat()}, after the frozen --now {NOW.isoformat()}"]),
    ([ti("a", "up_for_retry", retry_at=NOW)], {"default": 1}, False, []),  # due now
    ([ti("a", "success"), ti("b", "none")], {"default": 1}, True, ["b: none"]),  # nothing left that can move it
])
def test_blocked_for_good(tasks, pools, wait, expected):
    assert blocked_for_good(tasks, pools, now=NOW, wait_for_time=wait) == expected
