"""No claim of `dagline.db.claims` waits for another replica's lock unless it is meant to (PostgreSQL, two
real sessions). Session A holds rows in an open transaction; session B, with `lock_timeout = 2s`, then
claims: a SKIP LOCKED claim gets the other rows (or nothing) at once, a NOWAIT claim raises at once, a look
(no lock) reads the held rows at once, and the four claims that wait by design (`lock_dag`, `lock_pool`,
`lock_signal_key`, `lock_run_for_signal`) take another row at once and wait only for the held one. A claim
that lost its SKIP LOCKED or NOWAIT then fails here within seconds, naming itself, instead of hanging a
replica (or a test run) for good.

The test is parametrized over every public function of `dagline.db.claims`: a new claim without a case
here fails (`CASES`), and so does a case left for a claim that is gone. tests/integration/test_claims.py
checks what each claim takes (its order, its scope, its marks)."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable

import pytest
from sqlalchemy import insert, select, text, update
from sqlalchemy.exc import OperationalError

from dagline.db import claims, replicas
from dagline.db.models import callback_outbox_t, pool_t, replica_t, ti_t
from dagline.domain.states import OutboxState, ReplicaState, TIState
from dagline.scheduler.critical_section import queue_task_instances
from dagline.scheduler.examine import examine_runs
from dagline.scheduler.start_runs import start_queued_runs
from dagline.store.dags import DagCache
from dagline.store.runs import trigger_run
from dagline.store.signals import send_signal
from tests.helpers.dags import dag, task, write
from tests.helpers.harness import apply, t

NOW = t("2026-03-05T00:00:00Z")

# Public functions of `claims` that issue no statement of their own, with why they need no case.
NOT_STATEMENTS = {
    "startable_runs": "the conditions on a startable run, for the statements of `lock_dags_with_startable_runs` "
                      "and `start_runs._first_queued`; it reads nothing",
}
PUBLIC = sorted(name for name, function in inspect.getmembers(claims, inspect.isfunction)
                if function.__module__ == claims.__name__ and not name.startswith("_"))


@contextlib.contextmanager
def session(db, lock_timeout: str = "2s"):
    """A connection in an open transaction, rolled back at the end (its locks held until then)."""
    with db.engine.connect() as conn:
        with conn.begin() as transaction:
            conn.execute(text(f"SET LOCAL lock_timeout = '{lock_timeout}'"))
            yield conn
            transaction.rollback()


def waited(exc: BaseException | None) -> bool:
    """Whether a statement gave up waiting for a lock (its `lock_timeout`), not refused to wait (NOWAIT)."""
    orig = getattr(exc, "orig", None)
    return getattr(orig, "pgcode", None) == "55P03" and "lock timeout" in str(orig)


def at_once(conn, claim: Callable, name: str):
    """`claim(conn)`, which must not wait for session A: a lock timeout fails the test, naming the claim."""
    try:
        return claim(conn)
    except OperationalError as exc:
        if waited(exc):
            pytest.fail(f"claims.{name} waited for rows another session holds: it needs SKIP LOCKED or NOWAIT "
                        f"(or it is a waiting lock: say so in CASES)")
        raise


def waits_for_the_held_one(db, name: str, hold: Callable, held: Callable, other: Callable) -> None:
    """A claim that waits by design: with A holding (`hold`), B gets another row at once (`other`) and waits
    for the held one until its lock timeout (`held`)."""
    with session(db) as a:
        hold(a)
        with session(db) as b:
            assert at_once(b, other, name) is not None
        with session(db, lock_timeout="300ms") as b, pytest.raises(OperationalError) as timed_out:
            held(b)
        assert waited(timed_out.value)


# --- the scenes the claims work on -----------------------------------------------------------------

def _two_dags(db, tmp_path) -> None:
    """`d1` and `d2`, daily from 2026-03-01: both due at NOW."""
    for name in ("d1", "d2"):
        apply(db, write(tmp_path, dag(name, task("a"), task("b"), schedule="@daily", startDate="2026-03-01",
                                      maxActiveRuns=8)))


def _running_runs(db, tmp_path, count: int = 2) -> list[int]:
    _two_dags(db, tmp_path)
    ids = [trigger_run(db, "d1", now=NOW, logical_date=t(f"2026-03-0{i + 1}T12:00:00Z")).id for i in range(count)]
    with db.begin() as conn:
        start_queued_runs(conn, now=NOW, dags=DagCache(), who="test", limit=10)
    return ids


def _scheduled_tis(db, tmp_path) -> list[int]:
    """Two running runs of d1, their four task instances `scheduled`; their ids in claim order."""
    _running_runs(db, tmp_path)
    with db.begin() as conn:
        examine_runs(conn, claims.lock_running_runs(conn, 10), now=NOW, dags=DagCache(), who="test")
        return list(conn.execute(select(ti_t.c.id).where(ti_t.c.state == TIState.SCHEDULED).order_by(ti_t.c.id))
                    .scalars())


def _runs_of(db, ti_ids: list[int]) -> dict[int, int]:
    with db.begin() as conn:
        return dict(conn.execute(select(ti_t.c.id, ti_t.c.dag_run_id).where(ti_t.c.id.in_(ti_ids))).all())


def _replica(db, *, stale: bool) -> int:
    with db.begin() as conn:
        replica_id, _ = replicas.register(conn, executor="noop")
        if stale:
            conn.execute(update(replica_t).where(replica_t.c.id == replica_id)
                         .values(latest_heartbeat=t("2026-01-01T00:00:00Z")))
    return replica_id


def _spark_pool(db) -> None:
    with db.begin() as conn:
        conn.execute(insert(pool_t).values(name="spark", slots=4))


# --- one case per public function: name -> case(db, tmp_path) ----------------------------------------

CASES: dict[str, Callable] = {}


def case(*names: str):
    def register(function: Callable) -> Callable:
        for name in names:
            CASES[name] = function
        return function
    return register


@case("lock_dag")
def _lock_dag(db, tmp_path):
    _two_dags(db, tmp_path)
    waits_for_the_held_one(db, "lock_dag", lambda a: claims.lock_dag(a, "d1"),
                           lambda b: claims.lock_dag(b, "d1"), lambda b: claims.lock_dag(b, "d2"))


@case("lock_pool")
def _lock_pool(db, tmp_path):
    _spark_pool(db)
    waits_for_the_held_one(db, "lock_pool", lambda a: claims.lock_pool(a, "spark"),
                           lambda b: claims.lock_pool(b, "spark"), lambda b: claims.lock_pool(b, "default"))


@case("lock_signal_key")
def _lock_signal_key(db, tmp_path):
    def other(b):
        claims.lock_signal_key(b, "model.retired")
        return True
    waits_for_the_held_one(db, "lock_signal_key", lambda a: claims.lock_signal_key(a, "model.published"),
                           lambda b: claims.lock_signal_key(b, "model.published"), other)


@case("lock_run_for_signal")
def _lock_run_for_signal(db, tmp_path):
    first, second = _running_runs(db, tmp_path)
    waits_for_the_held_one(db, "lock_run_for_signal", lambda a: claims.lock_run_for_signal(a, first),
                           lambda b: claims.lock_run_for_signal(b, first),
                           lambda b: claims.lock_run_for_signal(b, second))


@case("lock_due_dags")
def _lock_due_dags(db, tmp_path):
    _two_dags(db, tmp_path)
    with session(db) as a:
        assert [r.dag_id for r in claims.lock_due_dags(a, NOW, 1)] == ["d1"]
        with session(db) as b:
            assert [r.dag_id for r in at_once(b, lambda b: claims.lock_due_dags(b, NOW, 10), "lock_due_dags")] == ["d2"]


@case("lock_scheduled_dags")
def _lock_scheduled_dags(db, tmp_path):
    _two_dags(db, tmp_path)
    with session(db) as a:
        assert [r.dag_id for r in claims.lock_due_dags(a, NOW, 1)] == ["d1"]  # a peer creating d1's runs
        with session(db) as b:
            claimed = at_once(b, claims.lock_scheduled_dags, "lock_scheduled_dags")
            assert [r.dag_id for r in claimed] == ["d2"]


@case("lock_dags_with_startable_runs")
def _lock_dags_with_startable_runs(db, tmp_path):
    _two_dags(db, tmp_path)
    for dag_id in ("d1", "d2"):
        trigger_run(db, dag_id, now=NOW, logical_date=t("2026-03-02T12:00:00Z"))
    with session(db) as a:
        assert claims.lock_dags_with_startable_runs(a, NOW, 1) == ["d1"]
        with session(db) as b:
            claimed = at_once(b, lambda b: claims.lock_dags_with_startable_runs(b, NOW, 10),
                              "lock_dags_with_startable_runs")
            assert claimed == ["d2"]


@case("lock_running_runs")
def _lock_running_runs(db, tmp_path):
    first, second = _running_runs(db, tmp_path)
    with session(db) as a:
        assert [r.id for r in claims.lock_running_runs(a, 1)] == [first]
        with session(db) as b:
            assert [r.id for r in at_once(b, lambda b: claims.lock_running_runs(b, 10), "lock_running_runs")] == [second]


@case("running_runs")
def _running_runs_look(db, tmp_path):
    ids = _running_runs(db, tmp_path)
    with session(db) as a:
        assert [r.id for r in claims.lock_running_runs(a, 10)] == ids
        with session(db) as b:  # a look: it sees the held runs, and locks nothing
            assert [r.id for r in at_once(b, lambda b: claims.running_runs(b, 10), "running_runs")] == ids


@case("lock_runs_by_id")
def _lock_runs_by_id(db, tmp_path):
    first, second = _running_runs(db, tmp_path)
    with session(db) as a:
        assert [r.id for r in claims.lock_runs_by_id(a, [first])] == [first]
        with session(db) as b:
            claimed = at_once(b, lambda b: claims.lock_runs_by_id(b, [first, second]), "lock_runs_by_id")
            assert [r.id for r in claimed] == [second]


@case("lock_pools_nowait")
def _lock_pools_nowait(db, tmp_path):
    with session(db) as a:
        assert claims.lock_pools_nowait(a) == {"default": 128}
        with session(db) as b, pytest.raises(claims.PoolsBusy) as busy:
            claims.lock_pools_nowait(b)
        assert not waited(busy.value.__cause__), "claims.lock_pools_nowait waited for the pools: it needs NOWAIT"


@case("lock_pools_if_free")
def _lock_pools_if_free(db, tmp_path):
    _spark_pool(db)
    with session(db) as a:
        assert claims.lock_pool(a, "spark") is not None  # a peer holds one pool row of two
        with session(db) as b:
            assert at_once(b, claims.lock_pools_if_free, "lock_pools_if_free") is None


@case("lock_schedulable_tis")
def _lock_schedulable_tis(db, tmp_path):
    ids = _scheduled_tis(db, tmp_path)
    with session(db) as a:
        assert [r.id for r in claims.lock_schedulable_tis(a, 1)] == ids[:1]
        with session(db) as b:
            claimed = at_once(b, lambda b: claims.lock_schedulable_tis(b, 10), "lock_schedulable_tis")
            assert [r.id for r in claimed] == ids[1:]
        runs = _runs_of(db, ids)
        with session(db) as b:  # a scope of its own (here `dags test`'s: one run): another statement
            claimed = at_once(b, lambda b: claims.lock_schedulable_tis(b, 10, test_run_id=runs[ids[0]]),
                              "lock_schedulable_tis")
            assert [r.id for r in claimed] == [i for i in ids[1:] if runs[i] == runs[ids[0]]] != []


@case("schedulable_tis")
def _schedulable_tis_look(db, tmp_path):
    ids = _scheduled_tis(db, tmp_path)
    with session(db) as a:
        assert [r.id for r in claims.lock_schedulable_tis(a, 10)] == ids
        with session(db) as b:  # a look: it sees the held task instances, and locks nothing
            seen = at_once(b, lambda b: claims.schedulable_tis(b, 10, pools=["default"], dag_id="d1"),
                           "schedulable_tis")
            assert [r.id for r in seen] == ids


@case("claim_stale_replicas")
def _claim_stale_replicas(db, tmp_path):
    me, beating, silent = _replica(db, stale=False), _replica(db, stale=True), _replica(db, stale=True)
    with session(db) as a:  # `beating` heartbeats right now: that UPDATE holds its row
        assert replicas.heartbeat(a, beating, gap_s=15).alive
        with session(db) as b:
            now = replicas.database_now(b)
            claimed = at_once(b, lambda b: claims.claim_stale_replicas(b, replica_id=me, now=now, timeout_s=30),
                              "claim_stale_replicas")
            assert [r.id for r in claimed] == [silent]


@case("claim_orphaned_tis")
def _claim_orphaned_tis(db, tmp_path):
    dead = _replica(db, stale=True)
    first, second = _scheduled_tis(db, tmp_path)[:2]
    with db.begin() as conn:
        queue_task_instances(conn, now=NOW, dags=DagCache(), who="test", replica_id=dead, executor_slots=2, limit=2)
        conn.execute(update(replica_t).where(replica_t.c.id == dead).values(state=ReplicaState.DEAD))
    one, two = _replica(db, stale=False), _replica(db, stale=False)
    with session(db) as a:
        assert [r.id for r in claims.claim_orphaned_tis(a, replica_id=one, limit=1)] == [first]
        with session(db) as b:
            claimed = at_once(b, lambda b: claims.claim_orphaned_tis(b, replica_id=two, limit=10), "claim_orphaned_tis")
            assert [r.id for r in claimed] == [second]


@case("claim_due_callbacks")
def _claim_due_callbacks(db, tmp_path):
    with db.begin() as conn:
        for n in (1, 2):
            conn.execute(insert(callback_outbox_t).values(
                delivery_id=f"00000000-0000-0000-0000-00000000000{n}", channel="webhook", event="failed",
                dag_id="d1", target={}, payload={}, state=OutboxState.PENDING, attempts=0, next_attempt_at=NOW,
                created_at=NOW))
    with session(db) as a:
        mine = claims.claim_due_callbacks(a, now=NOW, limit=1, channels=["webhook"], replica_id=None, lease_s=60)
        assert [r.delivery_id[-1] for r in mine] == ["1"]
        with session(db) as b:
            claimed = at_once(b, lambda b: claims.claim_due_callbacks(b, now=NOW, limit=10, channels=["webhook"],
                                                                      replica_id=None, lease_s=60),
                              "claim_due_callbacks")
            assert [r.delivery_id[-1] for r in claimed] == ["2"]


@case("claim_unhandled_signals")
def _claim_unhandled_signals(db, tmp_path):
    apply(db, write(tmp_path, dag("listens", task("a", on=[{"signal": "model.published", "action": "start"}]),
                                  task("b", on=[{"signal": "model.retired", "action": "start"}]))))
    with db.begin() as conn:  # keys some DAG listens to: stored unhandled
        first, _ = send_signal(conn, "model.published", 1, source="test", now=NOW)
        second, _ = send_signal(conn, "model.retired", 2, source="test", now=NOW)
    with session(db) as a:
        assert [r.seq for r in claims.claim_unhandled_signals(a, 1, now=NOW)] == [first]
        with session(db) as b:
            claimed = at_once(b, lambda b: claims.claim_unhandled_signals(b, 10, now=NOW), "claim_unhandled_signals")
            assert [r.seq for r in claimed] == [second]


# --- the tests -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", [name for name in PUBLIC if name not in NOT_STATEMENTS])
def test_no_claim_waits_for_another_sessions_rows_unless_it_is_meant_to(name, pg_db, tmp_path):
    assert name in CASES, (f"claims.{name} has no case in tests/integration/test_claims_never_wait.py: add one "
                           f"(or, if it issues no statement, name it in NOT_STATEMENTS with why)")
    CASES[name](pg_db, tmp_path)


def test_every_case_and_exception_names_a_function_of_claims():
    assert sorted(set(CASES) | set(NOT_STATEMENTS)) == PUBLIC
    assert not set(CASES) & set(NOT_STATEMENTS)
