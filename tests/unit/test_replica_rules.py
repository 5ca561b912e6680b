"""The work-sharing rules of a replica (`dagline.scheduler.replica`), on fake clocks, without a database:
who is at work and whom new work is left to (`gathering`), for how long and what is never left
(`left_to_peer`), the lost race for a burst's first run (`lost_race`), the idle pass left to the
replica at work (`idle_pass`), and the idle wait's timers (`timers`). The integration tests
(`test_work_gathering.py`) show the same rules between real replicas on PostgreSQL."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from dagline.clock import FixedClock, FixedMonotonic
from dagline.scheduler.replica.gathering import AtWork, at_work_longest, leaves_new_work
from dagline.scheduler.replica.idle_pass import pass_left_to_peers
from dagline.scheduler.replica.left_to_peer import LeftToPeer, runs_waited_since, task_instance_left
from dagline.scheduler.replica.lost_race import LostRace, queued_by
from dagline.scheduler.replica.timers import IdleTimers, Timer

EPSILON = 1 / 1024  # "just before" and "just after" a boundary, exact in binary floating point
GAP = 0.25  # peer_at_work_s
WINDOW = 0.25  # runs_left_to_peer_s
POLL = 0.5  # poll_interval_s
NOW = dt.datetime(2026, 3, 1, tzinfo=dt.timezone.utc)
MICROSECOND = dt.timedelta(microseconds=1)


@pytest.fixture
def ticks() -> FixedMonotonic:
    return FixedMonotonic()


@pytest.fixture
def at_work(ticks) -> AtWork:
    return AtWork(gap_s=GAP, monotonic=ticks)


class Asked:
    """A `leaving` fact that counts how often it was asked."""

    def __init__(self, answer: bool):
        self.answer = answer
        self.times = 0

    def __call__(self) -> bool:
        self.times += 1
        return self.answer


# -- gathering: who is at work, whom new work is left to ---------------------------------------------------


def test_a_replica_stays_at_work_while_its_changes_come_at_most_the_gap_apart(at_work, ticks):
    began = ticks()
    at_work.saw("scheduler:2")
    ticks.advance(GAP)  # exactly the gap: still the same stretch of work
    at_work.saw("scheduler:2")
    assert at_work.replicas(GAP) == {2: began}
    ticks.advance(GAP + EPSILON)  # just over the gap: a new stretch begins now
    at_work.saw("scheduler:2")
    assert at_work.replicas(GAP) == {2: ticks()}


def test_a_replica_counts_as_at_work_for_the_window_after_its_last_change(at_work, ticks):
    at_work.saw("scheduler:2")
    ticks.advance(GAP)
    assert 2 in at_work.replicas(GAP)  # its last change exactly the window ago
    ticks.advance(EPSILON)
    assert at_work.replicas(GAP) == {}


def test_new_work_goes_to_the_replica_at_work_for_longest_ties_to_the_lowest_id(at_work, ticks):
    at_work.saw("scheduler:3")
    at_work.saw("scheduler:2")  # at the same moment: a tie
    ticks.advance(EPSILON)
    at_work.saw("scheduler:1")  # at work since later
    seen = at_work.replicas(GAP)
    assert at_work_longest(seen) == 2
    assert at_work_longest({}) is None
    assert leaves_new_work(3, seen, lost_race=False)
    assert leaves_new_work(1, seen, lost_race=False)
    assert not leaves_new_work(2, seen, lost_race=True)  # the one at work keeps new work


def test_a_replica_of_one_backfill_is_never_chosen(at_work):
    at_work.saw("scheduler:3/scoped")  # `announce_as_scoped`: it takes only its backfill's runs
    at_work.saw("!scheduler:3/scoped")
    assert at_work.replicas(GAP) == {}
    at_work.saw("scheduler:4")
    assert at_work_longest(at_work.replicas(GAP)) == 4


def test_an_urgent_announcement_removes_a_replica_until_its_next_ordinary_change(at_work, ticks):
    at_work.saw("scheduler:2")
    ticks.advance(EPSILON)
    at_work.saw("scheduler:5")
    at_work.saw("!scheduler:2")  # its executor is full, or it is leaving: not one to leave work to
    assert at_work.replicas(GAP) == {5: ticks()}
    ticks.advance(EPSILON)
    at_work.saw("scheduler:2")  # at work again, since now: the other has been for longer
    assert at_work_longest(at_work.replicas(GAP)) == 5


def test_changes_of_anyone_but_scheduler_replicas_say_nothing_about_work(at_work):
    for payload in ("cli", "!cli", "runs", "signal", "dags-test:123", "scheduler:web"):
        at_work.saw(payload)
    assert at_work.replicas(GAP) == {}


def test_with_no_replica_at_work_new_work_is_left_only_after_a_lost_race():
    assert not leaves_new_work(1, {}, lost_race=False)
    assert leaves_new_work(1, {}, lost_race=True)


# -- lost race: the first run of a burst ---------------------------------------------------------------


def test_a_lost_race_leaves_the_next_runs_to_the_winner_for_the_window(ticks):
    race = LostRace(window_s=GAP, monotonic=ticks)
    assert not race.recent()  # never lost
    race.lost()
    ticks.advance(GAP - EPSILON)
    assert race.recent()
    ticks.advance(EPSILON)  # exactly the window later: over
    assert not race.recent()


def test_a_replica_woken_by_new_runs_takes_only_those_queued_by_its_look_where_wake_ups_exist():
    assert queued_by(NOW, listens=True) == NOW
    assert queued_by(NOW, listens=False) is None  # SQLite: nothing announces them, nothing to race for


# -- left to peer: the window for runs and next hops ------------------------------------------------------


def test_runs_are_taken_in_once_they_waited_the_window():
    assert runs_waited_since(NOW, WINDOW) == NOW - dt.timedelta(seconds=WINDOW)


def test_a_task_instance_made_runnable_within_the_window_is_left_to_the_peer():
    clock = FixedClock(NOW)
    since = runs_waited_since(clock.now(), WINDOW)
    assert not task_instance_left(1, since, own=set(), waited_since=since)  # waited exactly the window
    assert task_instance_left(1, since + MICROSECOND, own=set(), waited_since=since)
    assert not task_instance_left(1, since + MICROSECOND, own={1}, waited_since=since)  # made runnable here
    assert not task_instance_left(1, None, own=set(), waited_since=since)


@dataclasses.dataclass
class Scheduled:
    id: int
    scheduled_at: dt.datetime | None


def test_the_first_task_instance_left_starts_the_timer_to_come_back_for_it(ticks):
    left = LeftToPeer(window_s=WINDOW, monotonic=ticks)
    left.own_tis.add(7)
    leave = left.task_instances(NOW)
    assert not leave(Scheduled(7, NOW))  # its own next hop
    assert not leave(Scheduled(8, NOW - dt.timedelta(seconds=WINDOW)))  # waited long enough
    assert left.tasks_left.at is None
    assert leave(Scheduled(9, NOW))
    started = left.tasks_left.at
    assert started == ticks() + WINDOW
    ticks.advance(EPSILON)
    assert leave(Scheduled(10, NOW))
    assert left.tasks_left.at == started  # a later one does not put the look off


def test_a_replica_starts_the_runs_it_created_itself_whoever_is_at_work():
    left = LeftToPeer(window_s=WINDOW)
    leaving = Asked(True)
    left.created_runs = True
    assert left.runs_waited_since(NOW, leaving=leaving, queued_by=None) is None  # all of them
    assert leaving.times == 0
    assert left.runs_waited_since(NOW, leaving=leaving) == NOW - dt.timedelta(seconds=WINDOW)  # once
    assert left.runs_waited_since(NOW, leaving=Asked(False), queued_by=NOW) == NOW  # leaving nothing


def test_the_next_hop_of_a_chain_is_the_replicas_own_unless_it_leaves_new_work_to_a_peer():
    left = LeftToPeer(window_s=WINDOW)
    leaving = Asked(True)
    left.made_runnable([1], hop=False, leaving=leaving)  # runs it started or examined: its own
    left.made_runnable([2], hop=True, leaving=leaving)  # the next hop: goes on with the peer's chains
    left.made_runnable([3], hop=True, leaving=Asked(False))
    left.made_runnable([], hop=True, leaving=leaving)
    assert left.own_tis == {1, 3}
    assert leaving.times == 1


# -- idle pass: left to the replica at work ---------------------------------------------------------------


@pytest.mark.parametrize("own_work", [
    {"tries_in_flight": 1}, {"reports_pending": 2}, {"executor_busy": True}, {"deliveries_busy": True},
], ids=["tries in flight", "reports pending", "executor busy", "deliveries busy"])
def test_a_replica_with_work_of_its_own_keeps_its_polling_pass(own_work):
    leaving = Asked(True)
    facts = {"tries_in_flight": 0, "reports_pending": 0, "executor_busy": False, "deliveries_busy": False}
    assert not pass_left_to_peers(**{**facts, **own_work}, leaving=leaving)
    assert leaving.times == 0  # who is at work is not even looked at


def test_an_idle_replica_leaves_its_polling_pass_to_the_replica_at_work_only():
    facts = {"tries_in_flight": 0, "reports_pending": 0, "executor_busy": False, "deliveries_busy": False}
    assert pass_left_to_peers(**facts, leaving=Asked(True))
    assert not pass_left_to_peers(**facts, leaving=Asked(False))  # it is the one at work, or none is


# -- timers: they fire on a timeout only ------------------------------------------------------------------


@pytest.mark.parametrize("why", ["notified", "runs", "signals", "interrupted", "reconnected"])
def test_a_due_timer_never_takes_a_wake_up(ticks, why):
    timer = Timer(WINDOW, monotonic=ticks)
    timer.start()
    ticks.advance(WINDOW)
    assert not timer.fires(why)  # the wake-up is the caller's to act on
    assert timer.fires("timeout")  # the next timeout, at once


def test_a_timer_fires_once_at_its_moment_and_a_later_start_does_not_move_it(ticks):
    timer = Timer(WINDOW, monotonic=ticks)
    assert not timer.fires("timeout") and timer.at is None  # never started
    timer.start()
    at = timer.at
    ticks.advance(WINDOW - EPSILON)
    timer.start()
    assert timer.at == at
    assert not timer.fires("timeout")
    ticks.advance(EPSILON)
    assert timer.fires("timeout")
    assert not timer.fires("timeout") and timer.at is None


def test_an_idle_wait_lasts_until_its_earliest_timer(ticks):
    tasks_left = Timer(WINDOW, monotonic=ticks)
    timers = IdleTimers(poll_s=POLL, left_s=WINDOW, tasks_left=tasks_left, monotonic=ticks)
    assert timers.wait_s() == POLL
    ticks.advance(EPSILON)
    timers.runs_left()
    assert timers.wait_s() == WINDOW
    ticks.advance(EPSILON)
    tasks_left.start()
    assert timers.wait_s() == WINDOW - EPSILON  # the runs' window ends first
    ticks.advance(POLL)
    assert timers.wait_s() == 0.0


def test_the_poll_is_due_at_its_deadline_on_a_timeout_only(ticks):
    timers = IdleTimers(poll_s=POLL, left_s=WINDOW, tasks_left=Timer(WINDOW, monotonic=ticks), monotonic=ticks)
    ticks.advance(POLL - EPSILON)
    assert not timers.poll_due("timeout")
    ticks.advance(EPSILON)
    assert not timers.poll_due("notified")
    assert timers.poll_due("timeout")
    timers.restart_poll()
    assert not timers.poll_due("timeout")
    assert timers.wait_s() == POLL


def test_runs_left_to_a_peer_are_looked_at_once_they_waited_and_the_window_moves_on(ticks):
    timers = IdleTimers(poll_s=POLL, left_s=WINDOW, tasks_left=Timer(WINDOW, monotonic=ticks), monotonic=ticks)
    assert not timers.runs_waited("timeout")  # none left
    timers.runs_left()
    ticks.advance(WINDOW / 2)
    timers.runs_left()  # announced later: not yet covered by the first look
    ticks.advance(WINDOW / 2)
    assert not timers.runs_waited("runs")  # a wake-up is not the timer
    assert timers.runs_waited("timeout")  # the first ones waited: look
    assert timers.wait_s() == WINDOW / 2  # then again for the later ones
    ticks.advance(WINDOW / 2)
    assert timers.runs_waited("timeout")
    assert timers.runs_first is None  # all looked after
    assert timers.wait_s() == POLL - 3 * WINDOW / 2  # until the poll


def test_runs_left_to_a_peer_wait_for_the_poll_once_it_is_due(ticks):
    timers = IdleTimers(poll_s=WINDOW, left_s=WINDOW, tasks_left=Timer(WINDOW, monotonic=ticks), monotonic=ticks)
    timers.runs_left()
    ticks.advance(WINDOW)
    assert not timers.runs_waited("timeout")  # the poll's pass (or the look it leads to) takes them
    assert timers.poll_due("timeout")
