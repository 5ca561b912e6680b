"""Database faults a replica lives through (real PostgreSQL, real loop): its connections terminated in
the middle of a step, a serialization failure or a deadlock, the database unreachable for a while,
the transaction storing executor reports failing once, the LISTEN connection lost. The loop carries
on, nothing is half done, and the audit of the event log finds no violation.

Faults are injected by wrapping one phase of the loop (a callback at a chosen call), never by
restarting the shared PostgreSQL server (the chaos harness restarts a server of its own)."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError

import dagline.db.engine as engine_module
import dagline.scheduler.phases.hops as hops_module
import dagline.scheduler.phases.mini_scheduler as mini_scheduler_module
import dagline.scheduler.phases.take_in as take_in_module
from dagline.clock import FixedClock
from dagline.db.engine import Database
from dagline.db.faults import is_conflict, is_transient
from dagline.errors import OperationFailed
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.examine import examine_running_runs
from dagline.scheduler.loop import Scheduler
from dagline.scheduler.replica.wakeup import Wakeup
from dagline.scheduler.settings import SchedulerSettings
from dagline.scheduler.start_runs import start_queued_runs
from dagline.store.runs import trigger_run
from tests.helpers.dags import dag, task, write
from tests.helpers.harness import apply, assert_invariants, runs, t

NOW = "2026-03-01T00:00:00Z"
CHAIN = (task("a"), task("b", "a"), task("c", "b"))
SETTINGS = SchedulerSettings(poll_interval_s=0.05, backoff_max_s=0.2)


@pytest.fixture
def chains(pg_db, tmp_path):
    for i in range(4):
        apply(pg_db, write(tmp_path, dag(f"chain-{i}", *CHAIN)))
        trigger_run(pg_db, f"chain-{i}", now=t(NOW))
    return pg_db


def _scheduler(db) -> Scheduler:
    clock = FixedClock(t(NOW))
    return Scheduler(db, NoopExecutor(parallelism=8, clock=clock), clock=clock, settings=SETTINGS)


def _all_succeeded(db) -> bool:
    return all(r["state"] == "success" for i in range(4) for r in runs(db, f"chain-{i}"))


PHASES = {  # a step of the loop -> the module that calls it
    "examine_runs": mini_scheduler_module, "queue_task_instances": hops_module, "apply_reports": hops_module,
    "start_queued_runs": take_in_module}


def _fail_once_at(monkeypatch, name: str, call: int, fault):
    """Wrap the loop's step `name` so that its `call`-th call runs `fault(conn)` first."""
    module = PHASES[name]
    real = getattr(module, name)
    calls = {"n": 0}

    def wrapped(conn, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == call:
            fault(conn)
        return real(conn, *args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)
    return calls


def _terminate_every_connection_of(db):
    """From outside: end every server process of the database (what `pg_terminate_backend` does to a
    replica when an administrator, a failover or a proxy cuts its connections), this one last."""
    def fault(conn):
        admin = create_engine(db.url, isolation_level="AUTOCOMMIT")
        with admin.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                               "current_database() AND pid <> pg_backend_pid()"))
        admin.dispose()
    return fault


@pytest.mark.parametrize("phase", ["examine_runs", "queue_task_instances", "apply_reports"])
def test_connections_terminated_in_the_middle_of_a_step_the_loop_carries_on(chains, monkeypatch, phase):
    calls = _fail_once_at(monkeypatch, phase, 3, _terminate_every_connection_of(chains))
    sched = _scheduler(chains)
    sched.run(until_idle=True)
    assert calls["n"] > 3  # the phase ran again after the fault
    assert sched.failed_loops == 1  # one iteration ended by the error, then it carried on
    assert _all_succeeded(chains)
    assert_invariants(chains)


def test_reports_whose_transaction_fails_are_stored_in_a_later_loop(chains, monkeypatch):
    stored = []
    real = hops_module.apply_reports

    def apply_then_fail_once(conn, reports, **kwargs):
        affected = real(conn, reports, **kwargs)
        if not stored:
            stored.append(len(reports))
            conn.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))  # the commit never happens
        return affected

    monkeypatch.setattr(hops_module, "apply_reports", apply_then_fail_once)
    sched = _scheduler(chains)
    sched.run(until_idle=True)
    assert stored and stored[0] > 0
    assert sched.failed_loops == 1
    assert _all_succeeded(chains)  # the reports of the failed transaction were applied again, not lost
    assert_invariants(chains)


@pytest.mark.parametrize("errcode", ["serialization_failure", "deadlock_detected"])
def test_a_serialization_failure_or_deadlock_runs_the_transaction_again_at_once(chains, monkeypatch, errcode):
    def conflict(conn):
        conn.execute(text(f"DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '{errcode}'; END $$"))

    _fail_once_at(monkeypatch, "start_queued_runs", 1, conflict)
    sched = _scheduler(chains)
    sched.start()
    try:
        stats = sched.iterate()
    finally:
        sched.stop()
    assert sched.tx.conflicts == 1
    assert stats.runs_started == 4  # the same iteration did the step, on its second attempt
    assert sched.failed_loops == 0
    assert_invariants(chains)


def test_an_unreachable_database_is_waited_out(chains):
    sched = _scheduler(chains)
    sched.start()
    real_engine = chains.engine
    unreachable = Database("postgresql://postgres@127.0.0.1:1/nowhere").engine
    try:
        sched.iterate()
        chains.engine = unreachable  # the server is gone for a while
        for _ in range(3):
            assert sched.iterate_safely() is None  # a warning and a backoff, no crash
        assert sched.failed_loops == 3 and sched.backoff.failures == 3
        chains.engine = real_engine
        for _ in range(20):
            if sched.iterate_safely() is not None and _all_succeeded(chains):
                break
        assert sched.backoff.failures == 0  # a clean loop resets the backoff
    finally:
        chains.engine = real_engine
        sched.stop()
        unreachable.dispose()
    assert _all_succeeded(chains)
    assert_invariants(chains)


def test_tries_a_replica_queued_but_lost_track_of_are_launched_once_by_its_own_reconciliation(chains):
    """The commit of a queueing transaction succeeded, but its outcome never reached the replica (the
    connection broke as the server acknowledged it): its task instances are queued and its own, yet its
    executor never heard of them. Housekeeping finds them and launches each as the same try."""
    clock = FixedClock(t(NOW))
    settings = SchedulerSettings(housekeeping_interval_s=1e-6)  # housekeeping at every iteration
    sched = Scheduler(chains, NoopExecutor(parallelism=8, clock=clock), clock=clock, settings=settings)
    sched.start()
    try:
        sched.tx.run(lambda conn: (  # runs started, their first tasks scheduled, as the replica would
            start_queued_runs(conn, now=t(NOW), dags=sched.dags, who=sched.who, limit=10),
            examine_running_runs(conn, limit=10, backfill_id=None, test_run_id=None, now=t(NOW), dags=sched.dags,
                                 who=sched.who)), what="start the runs")
        lost = sched.tx.run(lambda conn: hops_module.queue_task_instances(
            conn, now=t(NOW), dags=sched.dags, who=sched.who, replica_id=sched.replica_id, executor_slots=8, limit=8),
            what="queue behind the replica's back")
        assert lost and not any((q.ti_id, q.try_number) in sched.in_flight for q in lost)
        for _ in range(20):
            sched.iterate()
    finally:
        sched.stop()
    assert _all_succeeded(chains)
    assert_invariants(chains)  # no try queued (launched) twice, none lost


def test_the_listen_connection_reconnects_and_wakes_again(pg_db):
    wakeup = Wakeup(pg_db)
    wakeup.start()
    wakeup.ignore("scheduler:1")
    try:
        admin = create_engine(pg_db.url, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                              "current_database() AND query LIKE 'LISTEN%'"))
        assert wakeup.wait(30) == "reconnected"  # at once: changes may have been missed meanwhile
        assert wakeup.reconnects == 1
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_notify('dagline', 'scheduler:1')"))  # its own: ignored
            conn.execute(text("SELECT pg_notify('dagline', 'cli')"))
        assert wakeup.wait(30) == "notified"
        admin.dispose()
    finally:
        wakeup.close()


def test_what_counts_as_transient(pg_db):
    with pytest.raises(OperationFailed) as unreachable:
        with Database("postgresql://postgres@127.0.0.1:1/nowhere").begin():
            pass
    assert is_transient(unreachable.value)
    with pytest.raises(Exception) as conflict:
        with pg_db.begin() as conn:
            conn.execute(text("DO $$ BEGIN RAISE EXCEPTION 'x' USING ERRCODE = 'serialization_failure'; END $$"))
    assert is_conflict(conflict.value) and is_transient(conflict.value)
    with pytest.raises(IntegrityError) as broken:
        with pg_db.begin() as conn:
            conn.execute(text("INSERT INTO pool (name, slots) VALUES ('default', 1)"))
    assert not is_transient(broken.value)  # a bug or bad data: the replica must not hide it


def _terminate_pooled_connection(db) -> None:
    """End, from the server side, the one connection `db`'s pool holds (as a restart would)."""
    with db.begin() as conn:
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
    killer = create_engine(db.url, isolation_level="AUTOCOMMIT")
    with killer.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    killer.dispose()


def test_a_pooled_connection_idle_for_a_while_is_checked_and_replaced_before_use(pg_db, monkeypatch):
    _terminate_pooled_connection(pg_db)
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 0.0)  # as if it had sat unused long enough
    with pg_db.begin() as conn:  # the dead connection is found at checkout: a new one serves
        assert conn.execute(text("SELECT 1")).scalar_one() == 1


def test_a_connection_used_a_moment_ago_goes_out_unchecked_and_a_lost_one_fails_once(pg_db, monkeypatch):
    """No round trip per transaction in a busy loop: a connection returned a moment ago is not pinged.
    If the server ended it meanwhile, that transaction fails as a lost connection (transient: the loop
    carries on), the pool is emptied, and the next one connects afresh."""
    _terminate_pooled_connection(pg_db)
    monkeypatch.setattr(engine_module, "PING_AFTER_IDLE_S", 3600.0)
    with pytest.raises(Exception) as lost:
        with pg_db.begin() as conn:
            conn.execute(text("SELECT 1"))
    assert is_transient(lost.value)
    with pg_db.begin() as conn:
        assert conn.execute(text("SELECT 1")).scalar_one() == 1
