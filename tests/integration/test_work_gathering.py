"""New work gathers on the replica at work for longest (PostgreSQL, `replica.gathering`):
its peers leave it new runs and the next hops of their chains, unless these waited
`runs_left_to_peer_s` (then any replica takes them), and a replica always starts the runs it created
itself. Which replicas are at work is read from the notifications every replica already receives.

Replicas run in this process with frozen clocks, stepped one iteration at a time; a run or task
instance becomes "waited long enough" by moving a replica's clock, never by waiting. The window in
which a replica counts as at work is wall-clock time, so it is set to a minute here."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select

from dagline.clock import FixedClock
from dagline.db.models import dag_run_t, dag_t, ti_t
from dagline.db.notify import RUNS_ONLY, announce, announce_as_scoped
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.scheduler.replica.wakeup import Wakeup
from dagline.scheduler.settings import SchedulerSettings
from dagline.store.backfills import create_backfill
from dagline.store.runs import trigger_run
from tests.helpers.dags import dag, task, write
from tests.helpers.harness import apply, t
from tests.helpers.polling import wait_for

NOW = t("2026-03-01T00:00:00Z")
LEAVE_S = 30.0
SETTINGS = SchedulerSettings(peer_at_work_s=60.0, runs_left_to_peer_s=LEAVE_S)


def _state(db, run_pk: int) -> str:
    with db.begin() as conn:
        return conn.execute(select(dag_run_t.c.state).where(dag_run_t.c.id == run_pk)).scalar_one()


def _ti(db, run_pk: int, task_id: str):
    with db.begin() as conn:
        return conn.execute(select(ti_t).where(ti_t.c.dag_run_id == run_pk, ti_t.c.task_id == task_id)).one()


@pytest.fixture
def replicas(pg_db, tmp_path):
    """Two started replicas; the first has run a chain of its own to the end, so it is at work, and
    the second has seen so (its view of who is at work, read from the notifications)."""
    for document in (dag("busy", task("a"), task("b", "a")), dag("fresh", task("a"), task("b", "a"))):
        write(tmp_path, document)
    apply(pg_db, str(tmp_path))
    senior = Scheduler(pg_db, NoopExecutor(8, clock=FixedClock(NOW)), clock=FixedClock(NOW), settings=SETTINGS)
    peer = Scheduler(pg_db, NoopExecutor(8, clock=FixedClock(NOW)), clock=FixedClock(NOW), settings=SETTINGS)
    senior.start()
    peer.start()
    try:
        busy = trigger_run(pg_db, "busy", now=NOW)
        senior.iterate()
        assert _state(pg_db, busy.id) == "success"
        seen = wait_for(lambda: peer.wakeup.replicas_at_work(60.0), "the peer to see the first replica at work",
                        until=lambda at_work: senior.replica_id in at_work)
        assert min(seen, key=lambda replica: (seen[replica], replica)) == senior.replica_id
        yield senior, peer
    finally:
        peer.stop()
        senior.stop()


def test_a_listener_sees_which_replicas_are_at_work_since_when_without_consuming_wake_ups(pg_db):
    wakeup = Wakeup(pg_db, at_work_gap_s=60.0)
    wakeup.start()
    wakeup.ignore("scheduler:1")
    announce_as_scoped(pg_db.engine, "scheduler:3")  # a replica of one backfill (`dagline backfill run`)
    try:
        # the CLI's change before replica 1's: once replica 1 is seen at work, it has arrived too
        for payload in ("scheduler:3", "scheduler:2", RUNS_ONLY, "cli", "scheduler:1"):
            with pg_db.begin() as conn:
                announce(conn, payload)
        at_work = wait_for(lambda: wakeup.replicas_at_work(60.0), "both replicas' changes",
                           until=lambda seen: set(seen) == {1, 2})
        assert at_work[2] <= at_work[1]  # replica 2 was at work first; its own changes count too
        assert 3 not in at_work  # never one to leave new work to: it takes only its backfill's
        assert wakeup.wait(0) == "notified"  # looking did not consume the wake-up (the CLI's change)
        with pg_db.begin() as conn:
            announce(conn, "scheduler:2", urgent=True)  # e.g. its executor is full: leave it nothing
        wait_for(lambda: wakeup.replicas_at_work(60.0), "the urgent change", until=lambda seen: set(seen) == {1})
    finally:
        wakeup.close()


def test_new_runs_go_to_the_replica_at_work_and_to_any_replica_once_they_waited(pg_db, replicas):
    senior, peer = replicas
    left = trigger_run(pg_db, "fresh", now=NOW)
    peer.iterate()
    assert _state(pg_db, left.id) == "queued"  # left to the replica at work
    senior.iterate()
    assert _state(pg_db, left.id) == "success"

    waited = trigger_run(pg_db, "fresh", now=NOW + dt.timedelta(hours=1))
    peer.clock.advance(dt.timedelta(hours=1, seconds=LEAVE_S + 1))  # the replica at work left it that long
    peer.iterate()
    assert _state(pg_db, waited.id) == "running"  # taken in by the peer
    assert _ti(pg_db, waited.id, "a").queued_by_replica_id == peer.replica_id


def test_a_replica_starts_the_runs_it_creates_itself(pg_db, replicas, tmp_path):
    senior, peer = replicas
    write(tmp_path, dag("scheduled", schedule="@daily", startDate="2026-02-28T00:00:00Z"))
    apply(pg_db, str(tmp_path))
    peer.iterate()  # its pass creates the scheduled DAG's due run: it starts it, a replica at work or not
    with pg_db.begin() as conn:
        started = conn.execute(select(dag_run_t.c.state, ti_t.c.queued_by_replica_id)
                               .join(ti_t, ti_t.c.dag_run_id == dag_run_t.c.id)
                               .where(dag_run_t.c.dag_id == "scheduled")).all()
    assert started and {state for state, _ in started} == {"success"}
    assert {replica for _, replica in started} == {peer.replica_id}


def test_the_next_hop_of_a_peers_chain_goes_on_with_the_replica_at_work(pg_db, replicas):
    senior, peer = replicas
    run = trigger_run(pg_db, "fresh", now=NOW)
    peer.clock.advance(dt.timedelta(seconds=LEAVE_S + 1))  # left long enough: the peer takes the run in
    peer.iterate()
    assert _ti(pg_db, run.id, "a").queued_by_replica_id == peer.replica_id  # what it made runnable itself
    assert _ti(pg_db, run.id, "b").state == "scheduled"  # the next hop: left to the replica at work
    senior.iterate()
    assert _ti(pg_db, run.id, "b").queued_by_replica_id == senior.replica_id
    assert _state(pg_db, run.id) == "success"


def test_a_peers_chain_goes_on_where_it_is_when_the_replica_at_work_leaves_it_waiting(pg_db, replicas):
    senior, peer = replicas
    run = trigger_run(pg_db, "fresh", now=NOW)
    peer.clock.advance(dt.timedelta(seconds=LEAVE_S + 1))
    peer.iterate()
    assert _ti(pg_db, run.id, "b").state == "scheduled"
    peer.clock.advance(dt.timedelta(seconds=LEAVE_S + 1))  # the replica at work did not queue it meanwhile
    peer.iterate()
    assert _ti(pg_db, run.id, "b").queued_by_replica_id == peer.replica_id
    assert _state(pg_db, run.id) == "success"


def test_an_idle_replica_leaves_its_polling_pass_to_the_replica_at_work(pg_db, replicas):
    senior, peer = replicas
    assert peer._pass_left_to_peers()
    assert not senior._pass_left_to_peers()  # the replica at work keeps its passes



def test_a_replica_of_one_backfill_is_never_one_to_leave_new_work_to(pg_db, tmp_path):
    write(tmp_path, dag("daily", task("a"), task("b", "a"), schedule="@daily", startDate="2026-02-01",
                        endDate="2026-02-03"))
    apply(pg_db, str(tmp_path))
    backfill = create_backfill(pg_db, "daily", start=t("2026-02-01T00:00:00Z"), end=t("2026-02-03T00:00:00Z"),
                               now=NOW)
    watcher = Wakeup(pg_db, at_work_gap_s=60.0)
    watcher.start()
    watcher.ignore("scheduler:999999")
    clock = FixedClock(NOW)
    scoped = Scheduler(pg_db, NoopExecutor(8, clock=clock), clock=clock, settings=SETTINGS,
                       backfill_id=backfill.backfill_id)
    scoped.start()
    try:
        scoped.iterate()  # at work on its backfill: the two runs, one hop after another
        with pg_db.begin() as conn:
            assert set(conn.execute(select(dag_run_t.c.state)).scalars()) == {"success"}
            announce(conn, "cli")  # after its changes: once this arrives, so have they
        assert watcher.wait(30) == "notified"
        assert scoped.replica_id not in watcher.replicas_at_work(60.0)
    finally:
        scoped.stop()
        watcher.close()


def test_an_idle_replica_that_finds_the_runs_it_was_woken_for_taken_leaves_the_next_ones_a_moment(
        pg_db, tmp_path):
    """Before the replica that took them is even seen at work: as when idle replicas race for the
    first run of a burst. (`_start_alone` is what an idle replica woken by new runs does.)"""
    write(tmp_path, dag("first", task("a")))
    write(tmp_path, dag("second", task("a")))
    apply(pg_db, str(tmp_path))
    clock = FixedClock(NOW)
    idle = Scheduler(pg_db, NoopExecutor(8, clock=clock), clock=clock, settings=SETTINGS)
    idle.start()
    try:
        taken = trigger_run(pg_db, "first", now=NOW)
        with pg_db.begin() as conn:
            conn.execute(select(dag_t.c.dag_id).where(dag_t.c.dag_id == "first").with_for_update())
            idle._start_alone()  # a peer holds that DAG, taking the run in: nothing for this replica
        assert _state(pg_db, taken.id) == "queued"
        following = trigger_run(pg_db, "second", now=NOW)
        idle._start_alone()
        assert _state(pg_db, following.id) == "queued"  # left to the peer at work
        clock.advance(dt.timedelta(seconds=LEAVE_S + 1))
        idle._start_alone()
        assert _state(pg_db, following.id) == "running"  # the peer left it waiting: taken in
    finally:
        idle.stop()
