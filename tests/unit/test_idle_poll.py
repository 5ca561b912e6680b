"""An idle replica's poll (`replica.idle_poll`): stretched while nothing happens on PostgreSQL, never
past the next due time, never on SQLite, and back to the plain poll at the first work."""

import pytest

from dagline.errors import InvalidInput
from dagline.scheduler.replica.idle_poll import MIN_WAIT_S, idle_poll_s, stretched
from dagline.scheduler.settings import SchedulerSettings

POLL = 0.5


def test_a_replica_that_listens_stretches_its_poll_only_after_two_quiet_passes_with_nothing_of_its_own():
    quiet = {"stretch": 4.0, "listens": True, "own_work": False}
    assert [stretched(**quiet, quiet_passes=n) for n in (0, 1, 2, 10)] == [False, False, True, True]
    assert not stretched(**{**quiet, "own_work": True}, quiet_passes=10)  # tries in flight: their ends are polled
    assert not stretched(**{**quiet, "listens": False}, quiet_passes=10)  # SQLite: the poll is how changes are seen
    assert not stretched(**{**quiet, "stretch": 1.0}, quiet_passes=10)  # the setting turned off


def test_the_stretched_poll_doubles_up_to_its_limit():
    waits = [idle_poll_s(poll_s=POLL, stretch=4.0, quiet_passes=n, due_in_s=None) for n in (2, 3, 4, 20)]
    assert waits == [1.0, 2.0, 2.0, 2.0]


def test_a_due_time_ends_the_wait_when_it_comes_and_a_past_one_keeps_the_plain_poll():
    assert idle_poll_s(poll_s=POLL, stretch=4.0, quiet_passes=5, due_in_s=0.7) == 0.7  # a DAG's tick, met on time
    assert idle_poll_s(poll_s=POLL, stretch=4.0, quiet_passes=5, due_in_s=30.0) == 2.0
    assert idle_poll_s(poll_s=POLL, stretch=4.0, quiet_passes=5, due_in_s=-3.0) == POLL  # due, or a peer holds it
    assert idle_poll_s(poll_s=POLL, stretch=4.0, quiet_passes=5, due_in_s=1e-9) == MIN_WAIT_S  # never a busy loop



def test_a_stretch_below_one_is_refused_naming_the_variable():
    with pytest.raises(InvalidInput) as refused:
        SchedulerSettings(idle_poll_stretch=0.5)
    assert "DAGLINE_SCHEDULER_IDLE_POLL_STRETCH" in str(refused.value) and "at least 1" in str(refused.value)
    assert SchedulerSettings(idle_poll_stretch=1.0).idle_poll_stretch == 1.0  # 1: never stretched
