"""A replica following up a chain of quick tasks (`Scheduler._follow_up`) takes in a run triggered
meanwhile, so the new run does not wait for the whole chain to end; one that finds the pools held by
a peer looks again rather than leave the hop to its next full pass; and on
SQLite, writers take turns through the writer lock (`db.writer_lock`) without losing a write."""

from __future__ import annotations

import threading

from sqlalchemy import func, select

from dagline import metrics
from dagline.clock import SystemClock
from dagline.db.engine import Database
from dagline.db.models import dag_run_t, event_t, ti_t
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.scheduler.settings import SchedulerSettings
from dagline.spec import load_dag_paths
from dagline.store.dags import apply_dags
from dagline.store.runs import trigger_run
from tests.helpers.dags import dag, task, write
from tests.helpers.polling import wait_for

CHAIN = 8


class TriggersMidChain(NoopExecutor):
    """A noop executor whose third sync is when someone else (another connection, as `dagline dags
    trigger` would be) triggers the DAG `other`: in the middle of the chain's follow-up."""

    def __init__(self, url: str):
        super().__init__(parallelism=64)
        self.url = url
        self.syncs = 0

    def sync(self):
        self.syncs += 1
        if self.syncs == 3:
            other = Database(self.url)
            try:
                trigger_run(other, "other", now=SystemClock().now(), who="cli")
            finally:
                other.dispose()
        return super().sync()


def _states(db, dag_id):
    with db.begin() as conn:
        return dict(conn.execute(select(ti_t.c.task_id, ti_t.c.state).where(ti_t.c.dag_id == dag_id)).all())


def test_a_run_triggered_during_a_chains_follow_up_runs_before_the_chain_ends(db, tmp_path):
    tasks = [task("t0")] + [task(f"t{i}", f"t{i - 1}") for i in range(1, CHAIN)]
    write(tmp_path, dag("chain", *tasks))
    write(tmp_path, dag("other", task("only")))
    apply_dags(db, load_dag_paths([str(tmp_path)]), now=SystemClock().now())
    trigger_run(db, "chain", now=SystemClock().now())
    scheduler = Scheduler(db, TriggersMidChain(db.url), settings=SchedulerSettings(follow_up_s=600))
    scheduler.start()
    try:
        scheduler.iterate()  # the chain's hops; the trigger comes during them and is taken in on the way
        assert set(_states(db, "chain").values()) == {"success"}
        assert _states(db, "other") == {"only": "success"}  # not left for the next iteration
        with db.begin() as conn:  # the new run's task was queued before the chain's last task ended
            queued_at = conn.execute(select(func.min(event_t.c.at)).where(
                event_t.c.dag_id == "other", event_t.c.to_state == "queued")).scalar_one()
            chain_end = conn.execute(select(func.max(ti_t.c.end_date)).where(ti_t.c.dag_id == "chain")).scalar_one()
        assert queued_at < chain_end
    finally:
        scheduler.stop()


def test_a_run_that_cannot_start_does_not_interrupt_every_follow_up(db, tmp_path):
    """A queued run that waits (here: its DAG is paused) was seen by the full pass: the chain is followed
    up to its end in one iteration, not given way to at every hop."""
    tasks = [task("t0")] + [task(f"t{i}", f"t{i - 1}") for i in range(1, CHAIN)]
    write(tmp_path, dag("chain", *tasks))
    write(tmp_path, dag("held", task("only"), paused=True))
    apply_dags(db, load_dag_paths([str(tmp_path)]), now=SystemClock().now())
    trigger_run(db, "held", now=SystemClock().now())
    trigger_run(db, "chain", now=SystemClock().now())
    scheduler = Scheduler(db, NoopExecutor(parallelism=64), settings=SchedulerSettings(follow_up_s=600))
    scheduler.start()
    try:
        scheduler.iterate()
        assert set(_states(db, "chain").values()) == {"success"}
        assert set(_states(db, "held").values()) == {"none"}
    finally:
        scheduler.stop()


def test_sqlite_writers_take_turns_through_the_writer_lock(sqlite_db, tmp_path):
    import fcntl
    import os

    write(tmp_path, dag("turns", task("a")))
    apply_dags(sqlite_db, load_dag_paths([str(tmp_path)]), now=SystemClock().now())
    lock = sqlite_db.writer_lock
    assert lock is not None and lock.path == os.path.abspath(sqlite_db.sqlite_path) + ".writer.lock"
    # another writer (here: another open file description of the lock) holds the turn
    holder = os.open(lock.path, os.O_RDWR | os.O_CREAT)
    fcntl.flock(holder, fcntl.LOCK_EX)
    done = threading.Event()
    errors = []

    def writer():
        try:
            trigger_run(sqlite_db, "turns", now=SystemClock().now())
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        done.set()

    thread = threading.Thread(target=writer)
    try:
        thread.start()
        wait_for(lambda: lock.waits == 1, "the writer to wait for its turn")
        assert not done.is_set()  # nothing written while the other holds the turn
        with sqlite_db.engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(dag_run_t)).scalar_one() == 0
    finally:
        fcntl.flock(holder, fcntl.LOCK_UN)
        os.close(holder)
    thread.join(30)
    assert done.is_set() and not errors, errors
    with sqlite_db.begin() as conn:
        assert conn.execute(select(func.count()).select_from(ti_t)).scalar_one() == 1
    assert lock.waits == 1  # the writer's own later transactions found the turn free


def _critical_sections_skipped() -> float:
    return metrics.REGISTRY.get_sample_value("dagline_scheduler_critical_section_busy_total") or 0


class HoldsPoolsOnce(NoopExecutor):
    """A noop executor whose first sync (the one storing `a`'s end) is when a peer takes the pools, as
    a peer's critical section would, and whose second (right after this replica found them busy) is
    when it lets them go."""

    def __init__(self, url: str):
        super().__init__(parallelism=8)
        self.peer = Database(url)
        self.held = None
        self.syncs = 0

    def sync(self):
        self.syncs += 1
        if self.syncs == 1:
            self.held = self.peer.engine.connect()
            self.held.begin()
            self.held.exec_driver_sql("SELECT name FROM pool FOR UPDATE")
        elif self.held is not None:
            self.held.rollback()
            self.held.close()
            self.held = None
        return super().sync()


def test_a_follow_up_that_finds_the_pools_held_looks_again_instead_of_leaving_the_hop_to_a_full_pass(pg_db, tmp_path):
    write(tmp_path, dag("pair", task("a"), task("b", "a")))
    apply_dags(pg_db, load_dag_paths([str(tmp_path)]), now=SystemClock().now())
    trigger_run(pg_db, "pair", now=SystemClock().now())
    executor = HoldsPoolsOnce(pg_db.url)
    scheduler = Scheduler(pg_db, executor, settings=SchedulerSettings(follow_up_s=600))
    scheduler.start()
    busy_before = _critical_sections_skipped()
    try:
        scheduler.iterate()  # one pass: a, then b in its follow-up, the pools busy once in between
        assert _critical_sections_skipped() == busy_before + 1
        assert _states(pg_db, "pair") == {"a": "success", "b": "success"}  # not left to the next pass
    finally:
        scheduler.stop()
        executor.peer.dispose()
