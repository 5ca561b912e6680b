"""`maxActiveRuns` is a hard limit, checked at its exact boundary on both databases: with one place left,
starting queued runs starts exactly one and creating scheduled runs creates exactly one; at the limit,
neither starts nor creates any until a run ends. The loop's two steps are called as the loop calls them
(`start_queued_runs`, `create_scheduled_runs`), with a frozen time."""

from __future__ import annotations

from sqlalchemy import select

from dagline.db.claims import lock_runs_by_id
from dagline.db.models import dag_run_t, dag_t, ti_t
from dagline.db.transitions import change_runs, change_tis
from dagline.domain.states import RunState, TIState
from dagline.scheduler.create_runs import create_scheduled_runs
from dagline.scheduler.examine import examine_runs
from dagline.scheduler.start_runs import start_queued_runs
from dagline.store.dags import DagCache
from dagline.store.runs import trigger_run
from tests.helpers.dags import dag, task, write
from tests.helpers.harness import apply, t

NOW = t("2026-03-20T00:00:00Z")
LIMIT = 3


def _states(db, dag_id: str) -> dict[str, int]:
    with db.begin() as conn:
        states = conn.execute(select(dag_run_t.c.state).where(dag_run_t.c.dag_id == dag_id)).scalars().all()
    return {state: states.count(state) for state in sorted(set(states))}


def _start(db) -> list[int]:
    with db.begin() as conn:
        return start_queued_runs(conn, now=NOW, dags=DagCache(), who="test", limit=10)


def _create(db) -> int:
    with db.begin() as conn:
        return create_scheduled_runs(conn, now=NOW, dags=DagCache(), who="test", limit=10, per_dag=50)


def _end(db, run_ids: list[int], state: str) -> None:
    with db.begin() as conn:
        assert len(change_runs(conn, run_ids, expected=state, to=RunState.SUCCESS, at=NOW, who="test")) == len(run_ids)


def _manual_runs(db, count: int) -> list[int]:
    """`count` queued manual runs of `manual`, all due."""
    return [trigger_run(db, "manual", now=NOW, logical_date=t(f"2026-03-{day:02d}T12:00:00Z")).id
            for day in range(1, count + 1)]


def test_starting_runs_with_one_place_left_starts_exactly_one_and_at_the_limit_none(db, tmp_path):
    apply(db, write(tmp_path, dag("manual", task("a"), maxActiveRuns=LIMIT)))
    first = _manual_runs(db, LIMIT - 1)
    assert sorted(_start(db)) == sorted(first)  # LIMIT - 1 running
    waiting = [trigger_run(db, "manual", now=NOW, logical_date=t(f"2026-03-1{i}T12:00:00Z")).id for i in range(3)]
    assert _start(db) == [waiting[0]]  # one place left: exactly one starts, the oldest
    assert _states(db, "manual") == {"queued": 2, "running": LIMIT}
    assert _start(db) == []  # at the limit: none starts
    assert _states(db, "manual") == {"queued": 2, "running": LIMIT}
    _end(db, [first[0]], RunState.RUNNING)
    assert _start(db) == [waiting[1]]  # a run ended: one place, one start
    assert _start(db) == []
    assert _states(db, "manual") == {"queued": 1, "running": LIMIT, "success": 1}


def test_a_limit_of_one_starts_one_run_and_no_second(db, tmp_path):
    apply(db, write(tmp_path, dag("manual", task("a"), maxActiveRuns=1)))
    first, second = _manual_runs(db, 2)
    assert _start(db) == [first]
    assert _start(db) == []
    assert _states(db, "manual") == {"queued": 1, "running": 1}


def _scheduled(db, tmp_path, *, max_active_runs: int = LIMIT) -> None:
    """`hourly`: due every hour since 2026-03-01 (hundreds of intervals behind NOW, catchup)."""
    apply(db, write(tmp_path, dag("hourly", task("a"), schedule="@hourly", startDate="2026-03-01",
                                  maxActiveRuns=max_active_runs)))


def _run_ids(db, state: str) -> list[int]:
    with db.begin() as conn:
        return list(conn.execute(select(dag_run_t.c.id).where(dag_run_t.c.dag_id == "hourly", dag_run_t.c.state == state)
                                 .order_by(dag_run_t.c.logical_date)).scalars())


def _create_after(db):
    """When the DAG's next run may be created (None: not while it is at its limit); the web's DAG page shows it."""
    with db.begin() as conn:
        return conn.execute(select(dag_t.c.next_dagrun_create_after).where(dag_t.c.dag_id == "hourly")).scalar_one()


def _finish(db, run_id: int) -> None:
    """The run's task instances succeed and the loop's examination ends the run, as it does every run
    (freeing its `maxActiveRuns` place: `next_dagrun_create_after` is set again)."""
    with db.begin() as conn:
        for ti_id, state in conn.execute(select(ti_t.c.id, ti_t.c.state).where(ti_t.c.dag_run_id == run_id)).all():
            change_tis(conn, [ti_id], expected=state, to=TIState.SUCCESS, at=NOW, who="test")
        examine_runs(conn, lock_runs_by_id(conn, [run_id]), now=NOW, dags=DagCache(), who="test")
    assert _states(db, "hourly")["success"] >= 1


def test_creating_runs_stops_at_max_active_runs_until_one_ends(db, tmp_path):
    _scheduled(db, tmp_path)
    assert _create(db) == LIMIT  # hundreds due: only LIMIT created
    assert _create(db) == 0  # at the limit: no new scheduled run
    assert _states(db, "hourly") == {"queued": LIMIT}
    assert _create_after(db) is None  # at the limit the creation step does not even claim the DAG
    assert len(_start(db)) == LIMIT
    assert _create(db) == 0  # running runs count as queued ones do
    _finish(db, _run_ids(db, RunState.RUNNING)[0])
    assert _create_after(db) == t("2026-03-01T04:00:00Z")  # the next interval, 03:00-04:00, may be created
    assert _create(db) == 1  # one ended: one place, exactly one more
    assert _create(db) == 0
    assert _states(db, "hourly") == {"queued": 1, "running": LIMIT - 1, "success": 1}


def test_with_one_place_left_exactly_one_run_is_created(db, tmp_path):
    _scheduled(db, tmp_path, max_active_runs=LIMIT - 1)
    assert _create(db) == LIMIT - 1
    _scheduled(db, tmp_path, max_active_runs=LIMIT)  # the limit raised by one: one place left
    assert _create(db) == 1
    assert _create(db) == 0
    assert _states(db, "hourly") == {"queued": LIMIT}


def test_a_manual_run_takes_a_place_of_the_scheduled_runs(db, tmp_path):
    _scheduled(db, tmp_path)
    trigger_run(db, "hourly", now=NOW, logical_date=t("2026-03-19T12:30:00Z"))
    assert _create(db) == LIMIT - 1  # the manual run is active: one place fewer
    assert _create(db) == 0
