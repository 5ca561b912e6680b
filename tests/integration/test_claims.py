"""Every claim in `dagline.db.claims`, with two real PostgreSQL sessions: while session A holds its
rows (an open transaction), session B skips them (SKIP LOCKED), gets `PoolsBusy` at once (NOWAIT),
or waits (the waiting locks: B runs out of its `lock_timeout`, and gets other rows at once)."""

from __future__ import annotations

import contextlib
import datetime as dt
import time

import pytest
from sqlalchemy import insert, select, text, update
from sqlalchemy.exc import OperationalError

from dagline.db import claims, replicas
from dagline.db.models import pool_t, replica_t, ti_t
from dagline.scheduler.critical_section import queue_task_instances
from dagline.scheduler.examine import examine_runs
from dagline.scheduler.start_runs import start_queued_runs
from dagline.store.dags import DagCache
from dagline.store.runs import trigger_run
from tests.helpers.dags import dag, task, write
from tests.helpers.harness import apply, t

NOW = t("2026-03-05T00:00:00Z")
def daily(name: str) -> dict:
    return dag(name, task("a"), task("b"), schedule="@daily", startDate="2026-03-01", maxActiveRuns=8)


@contextlib.contextmanager
def session(db, *, lock_timeout_ms: int = 3000):
    """A connection inside an open transaction; rolled back at the end (its locks held until then).
    A claim that forgot SKIP LOCKED would wait for the other session: the lock timeout fails it."""
    with db.engine.connect() as conn:
        with conn.begin() as txn:
            conn.execute(text(f"SET LOCAL lock_timeout = '{lock_timeout_ms}ms'"))
            yield conn
            txn.rollback()


@pytest.fixture
def two_dags(pg_db, tmp_path):
    for name in ("d1", "d2"):
        apply(pg_db, write(tmp_path, daily(name)))
    return pg_db


def _running_runs(db, count: int) -> list[int]:
    """`count` manual runs of d1, started."""
    ids = [trigger_run(db, "d1", now=NOW, logical_date=t(f"2026-03-0{i + 1}T12:00:00Z")).id for i in range(count)]
    with db.begin() as conn:
        start_queued_runs(conn, now=NOW, dags=DagCache(), who="test", limit=10)
    return ids


def _scheduled_tis(db) -> list[int]:
    _running_runs(db, 2)
    with db.begin() as conn:
        runs = claims.lock_running_runs(conn, 10)
        examine_runs(conn, runs, now=NOW, dags=DagCache(), who="test")
        return list(conn.execute(select(ti_t.c.id).where(ti_t.c.state == "scheduled").order_by(ti_t.c.id)).scalars())


def test_lock_dag_waits_for_the_holder_and_never_blocks_other_dags(two_dags):
    with session(two_dags) as a:
        assert claims.lock_dag(a, "d1").dag_id == "d1"
        with session(two_dags, lock_timeout_ms=200) as b:
            assert claims.lock_dag(b, "d2").dag_id == "d2"
        with session(two_dags, lock_timeout_ms=200) as b, pytest.raises(OperationalError) as waited:
            claims.lock_dag(b, "d1")
        assert waited.value.orig.pgcode == "55P03"  # it waited for A's lock until its timeout
    with session(two_dags, lock_timeout_ms=200) as b:
        assert claims.lock_dag(b, "d1").dag_id == "d1"  # A is done: free again


def test_lock_pool_waits_for_the_holder(pg_db):
    with pg_db.begin() as conn:
        conn.execute(text("INSERT INTO pool (name, slots) VALUES ('spark', 2)"))
    with session(pg_db) as a:
        assert claims.lock_pool(a, "spark").slots == 2
        with session(pg_db, lock_timeout_ms=200) as b:
            assert claims.lock_pool(b, "default").slots == 128
            assert claims.lock_pool(b, "missing") is None
        with session(pg_db, lock_timeout_ms=200) as b, pytest.raises(OperationalError) as waited:
            claims.lock_pool(b, "spark")
        assert waited.value.orig.pgcode == "55P03"


def test_lock_due_dags_gives_two_replicas_disjoint_dags(two_dags):
    with session(two_dags) as a:
        assert [r.dag_id for r in claims.lock_due_dags(a, NOW, 1)] == ["d1"]  # oldest due first, then by id
        with session(two_dags) as b:
            assert [r.dag_id for r in claims.lock_due_dags(b, NOW, 10)] == ["d2"]
        with session(two_dags) as b:
            assert claims.lock_due_dags(b, NOW, 10, dag_ids=["d1"]) == []


def test_lock_dags_with_startable_runs_skips_a_dag_another_replica_starts(two_dags):
    for dag_id in ("d1", "d2"):
        trigger_run(two_dags, dag_id, now=NOW, logical_date=t("2026-03-02T12:00:00Z"))
    with session(two_dags) as a:
        assert claims.lock_dags_with_startable_runs(a, NOW, 1) == ["d1"]
        with session(two_dags) as b:
            assert claims.lock_dags_with_startable_runs(b, NOW, 10) == ["d2"]


def test_lock_running_runs_gives_two_replicas_disjoint_runs(two_dags):
    first, second = _running_runs(two_dags, 2)
    with session(two_dags) as a:
        assert [r.id for r in claims.lock_running_runs(a, 1)] == [first]
        with session(two_dags) as b:
            assert [r.id for r in claims.lock_running_runs(b, 10)] == [second]


def test_lock_runs_by_id_skips_a_run_another_replica_decides(two_dags):
    first, second = _running_runs(two_dags, 2)
    with session(two_dags) as a:
        assert [r.id for r in claims.lock_runs_by_id(a, [first])] == [first]
        with session(two_dags) as b:
            assert [r.id for r in claims.lock_runs_by_id(b, [first, second])] == [second]


def test_lock_pools_nowait_raises_pools_busy_at_once_while_another_replica_holds_them(pg_db):
    with session(pg_db) as a:
        assert claims.lock_pools_nowait(a) == {"default": 128}
        with session(pg_db) as b:
            started = time.monotonic()
            with pytest.raises(claims.PoolsBusy):
                claims.lock_pools_nowait(b)
            assert time.monotonic() - started < 1.0  # NOWAIT: no waiting for A
    with session(pg_db) as b:
        assert claims.lock_pools_nowait(b) == {"default": 128}


def test_lock_pools_if_free_holds_all_or_says_none_and_leaves_the_transaction_usable(pg_db):
    with pg_db.begin() as conn:
        conn.execute(insert(pool_t).values(name="spark", slots=4))
    with session(pg_db) as a:
        assert claims.lock_pool(a, "spark") is not None  # a peer holds one pool row of two
        with session(pg_db) as b:
            started = time.monotonic()
            assert claims.lock_pools_if_free(b) is None
            assert time.monotonic() - started < 1.0  # SKIP LOCKED: no waiting for A
            assert b.execute(select(pool_t.c.slots).where(pool_t.c.name == "default")).scalar_one() == 128
    with session(pg_db) as a:
        assert claims.lock_pools_if_free(a) == {"default": 128, "spark": 4}
        with session(pg_db) as b:
            with pytest.raises(claims.PoolsBusy):  # held as after a NOWAIT
                claims.lock_pools_nowait(b)


def test_lock_schedulable_tis_gives_two_sessions_disjoint_task_instances(two_dags):
    ids = _scheduled_tis(two_dags)
    assert len(ids) == 4
    with session(two_dags) as a:
        assert [r.id for r in claims.lock_schedulable_tis(a, 1)] == [ids[0]]
        with session(two_dags) as b:
            assert [r.id for r in claims.lock_schedulable_tis(b, 10)] == ids[1:]


def _replica(db, *, stale: bool) -> int:
    with db.begin() as conn:
        replica_id, _ = replicas.register(conn, executor="noop")
        if stale:
            conn.execute(update(replica_t).where(replica_t.c.id == replica_id)
                         .values(latest_heartbeat=replicas.database_now(conn) - dt.timedelta(hours=1)))
    return replica_id


def _replica_states(db) -> dict[int, str]:
    with db.begin() as conn:
        return dict(conn.execute(select(replica_t.c.id, replica_t.c.state)).all())


def test_claim_stale_replicas_skips_a_replica_heartbeating_right_now_and_declares_each_once(pg_db):
    me, beating, silent = _replica(pg_db, stale=False), _replica(pg_db, stale=True), _replica(pg_db, stale=True)
    with session(pg_db) as a:  # `beating` is heartbeating right now: its row is locked by that UPDATE
        assert replicas.heartbeat(a, beating, gap_s=15).alive
        with session(pg_db) as b:
            now = replicas.database_now(b)
            assert [r.id for r in claims.claim_stale_replicas(b, replica_id=me, now=now, timeout_s=30)] == [silent]
    with session(pg_db) as a:
        now = replicas.database_now(a)
        assert [r.id for r in claims.claim_stale_replicas(a, replica_id=me, now=now, timeout_s=30)] == [beating, silent]
        with session(pg_db) as b:  # a second replica judging at the same moment gets nothing
            assert claims.claim_stale_replicas(b, replica_id=_replica(pg_db, stale=False), now=now, timeout_s=30) == []
    assert _replica_states(pg_db)[me] == "running"


def test_claim_stale_replicas_never_declares_a_fresh_replica_or_itself(pg_db):
    me, fresh = _replica(pg_db, stale=True), _replica(pg_db, stale=False)
    with pg_db.begin() as conn:
        now = replicas.database_now(conn)
        assert claims.claim_stale_replicas(conn, replica_id=me, now=now, timeout_s=30) == []
    assert _replica_states(pg_db) == {me: "running", fresh: "running"}


def _orphans(db, count: int) -> tuple[int, list[int]]:
    """`count` task instances queued by a replica that is now dead; returns (dead id, ti ids)."""
    dead = _replica(db, stale=True)
    ids = _scheduled_tis(db)[:count]
    with db.begin() as conn:
        queue_task_instances(conn, now=NOW, dags=DagCache(), who="test", replica_id=dead, executor_slots=count,
                             limit=count)
        conn.execute(update(replica_t).where(replica_t.c.id == dead).values(state="dead"))
    return dead, ids


def test_claim_orphaned_tis_gives_each_orphan_to_one_replica(pg_db, tmp_path):
    apply(pg_db, write(tmp_path, daily("d1")))
    dead, (first, second) = _orphans(pg_db, 2)
    one, two = _replica(pg_db, stale=False), _replica(pg_db, stale=False)
    with session(pg_db) as a:
        claimed = claims.claim_orphaned_tis(a, replica_id=one, limit=1)
        assert [(r.id, r.state, r.try_number, r.previous_replica_id) for r in claimed] == [(first, "queued", 1, dead)]
        with session(pg_db) as b:
            assert [r.id for r in claims.claim_orphaned_tis(b, replica_id=two, limit=10)] == [second]
            owners = dict(b.execute(select(ti_t.c.id, ti_t.c.queued_by_replica_id).where(ti_t.c.id.in_([first, second]))).all())
            assert owners == {first: dead, second: two}  # A's claim is not committed: B sees the old owner


def test_claim_orphaned_tis_takes_only_what_this_replica_can_follow(pg_db, tmp_path):
    apply(pg_db, write(tmp_path, daily("d1")))
    dead, ids = _orphans(pg_db, 2)
    me = _replica(pg_db, stale=False)
    with pg_db.begin() as conn:
        assert claims.claim_orphaned_tis(conn, replica_id=me, limit=10, executor="local") == []  # theirs was noop
        assert claims.claim_orphaned_tis(conn, replica_id=me, limit=10, executor="noop", hostname="elsewhere") == []
        taken = claims.claim_orphaned_tis(conn, replica_id=me, limit=10, executor="noop", hostname=replicas.HOSTNAME)
        assert [r.id for r in taken] == ids
    with pg_db.begin() as conn:
        assert claims.claim_orphaned_tis(conn, replica_id=me, limit=10) == []  # they are its own now, not orphans


def test_a_live_replicas_task_instances_are_not_orphans(pg_db, tmp_path):
    apply(pg_db, write(tmp_path, daily("d1")))
    owner, _ = _orphans(pg_db, 2)
    with pg_db.begin() as conn:
        conn.execute(update(replica_t).where(replica_t.c.id == owner).values(state="running"))
        assert claims.claim_orphaned_tis(conn, replica_id=_replica(pg_db, stale=False), limit=10) == []
