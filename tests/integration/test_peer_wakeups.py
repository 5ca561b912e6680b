"""Which of a scheduler replica's changes wake its idle peers on PostgreSQL (`db.notify`): its ordinary
changes wake no one, since it goes on with what they made possible itself; a stop request, a full
executor leaving task instances unqueued, a task end some rule listens to, and a replica leaving do
wake them. Changes by anyone else (the CLI, the API) wake every replica, as before."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select, update

from dagline.clock import FixedClock
from dagline.db.models import ti_t
from dagline.db.notify import announce
from dagline.db.transitions import request_stop
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.scheduler.replica.wakeup import Wakeup
from dagline.spec import load_dag_paths
from dagline.store.dags import apply_dags
from dagline.store.runs import trigger_run
from tests.helpers.dags import dag, task, write

NOW = dt.datetime(2026, 5, 1, 12, tzinfo=dt.timezone.utc)
QUIET_S = 0.3  # how long a peer listens for a wake-up that must not come


def _peer(pg_db) -> Wakeup:
    """An idle peer's wake-up, as `Scheduler` sets it up: its own changes and its peers' ordinary ones ignored."""
    wakeup = Wakeup(pg_db)
    wakeup.start()
    wakeup.ignore("scheduler:999999")
    return wakeup


def _apply(pg_db, tmp_path, *documents) -> None:
    for document in documents:
        write(tmp_path, document)
    apply_dags(pg_db, load_dag_paths([str(tmp_path)]), now=NOW)


def _replica(pg_db, slots: int = 8) -> Scheduler:
    clock = FixedClock(NOW)
    return Scheduler(pg_db, NoopExecutor(slots, clock=clock), clock=clock)


def test_a_peers_ordinary_change_wakes_no_replica_but_an_urgent_one_and_anyone_elses_do(pg_db):
    peer = _peer(pg_db)
    try:
        with pg_db.begin() as conn:
            announce(conn, "scheduler:2")  # a task it ran ended: it queues what follows itself
        assert peer.wait(QUIET_S) == "timeout"
        with pg_db.begin() as conn:
            announce(conn, "scheduler:999999", urgent=True)  # its own, urgent or not
        assert peer.wait(QUIET_S) == "timeout"
        with pg_db.begin() as conn:
            announce(conn, "scheduler:2", urgent=True)
            announce(conn, "scheduler:2")  # said by the urgent one already
        assert peer.wait(30) == "notified"
        with pg_db.begin() as conn:
            announce(conn, "cli")
        assert peer.wait(30) == "notified"
    finally:
        peer.close()


def test_a_stop_request_by_a_replica_wakes_the_peer_that_may_run_the_try(pg_db, tmp_path):
    _apply(pg_db, tmp_path, dag("long", task("a")))
    run = trigger_run(pg_db, "long", now=NOW)
    with pg_db.begin() as conn:
        conn.execute(update(ti_t).where(ti_t.c.dag_run_id == run.id).values(state="running", try_number=1))
    peer = _peer(pg_db)
    try:
        with pg_db.begin() as conn:
            ti_id = conn.execute(select(ti_t.c.id).where(ti_t.c.dag_run_id == run.id)).scalar_one()
            assert request_stop(conn, [ti_id], at=NOW, who="scheduler:2", detail="a restart signal")
        assert peer.wait(30) == "notified"
    finally:
        peer.close()


@pytest.mark.parametrize(("slots", "woken", "within_s"), [
    (1, "notified", 30),  # a full executor: its peers queue the other two
    (8, "timeout", QUIET_S),  # room for all three: it queues, launches and ends them itself
], ids=["full", "room-for-all"])
def test_a_replica_wakes_its_peers_only_when_its_executor_is_full(pg_db, tmp_path, slots, woken, within_s):
    _apply(pg_db, tmp_path, dag("wide", task("a"), task("b"), task("c")))
    trigger_run(pg_db, "wide", now=NOW)
    replica = _replica(pg_db, slots=slots)
    replica.start()
    peer = _peer(pg_db)
    try:
        replica.iterate()
        if slots >= 3:
            with pg_db.begin() as conn:
                assert set(conn.execute(select(ti_t.c.state)).scalars()) == {"success"}
        assert peer.wait(within_s) == woken
    finally:
        peer.close()
        replica.stop()


def test_a_task_end_some_rule_listens_to_wakes_idle_replicas_to_react(pg_db, tmp_path):
    _apply(pg_db, tmp_path, dag("upstream", task("load")),
           dag("downstream", task("use"), triggers=[{"signal": "dagline.task.upstream.load.success"}]))
    trigger_run(pg_db, "upstream", now=NOW)
    replica = _replica(pg_db)
    replica.start()
    peer = _peer(pg_db)
    try:
        replica.wakeup.ignore(replica.who)
        while True:  # until its task ends; the reaction itself is left to the woken peer
            replica.iterate()
            with pg_db.begin() as conn:
                if conn.execute(select(ti_t.c.state).where(ti_t.c.dag_id == "upstream")).scalar_one() == "success":
                    break
        assert peer.wait(30) == "signals"
    finally:
        peer.close()
        replica.stop()


def test_a_replica_leaving_wakes_its_peers(pg_db):
    leaving = _replica(pg_db)
    leaving.start()
    peer = _peer(pg_db)
    try:
        leaving.stop()
        assert peer.wait(30) == "notified"
    finally:
        peer.close()
