"""Pools within namespaces (issue 38): a task's `pool: NAME` in a DAG of namespace NS takes the platform's
pool NAME when there is one, else NS's own pool `NS/NAME`, decided when its task instance is created
(`dagline.store.pools.resolve_pool`). Two namespaces' pools of one name limit each its own tasks; a
platform pool limits every namespace's tasks together, and no namespace can make its own of that name."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from dagline.clock import FixedClock
from dagline.db.models import dag_run_t, ti_t
from dagline.errors import InvalidInput
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.spec import Dag, LoadedDag, parse_dag_document
from dagline.store.dags import apply_dags
from dagline.store.pools import PlatformPool, list_pools, remove_pool, set_pool
from dagline.store.runs import trigger_run
from dagline.store.waiting import task_reasons
from tests.helpers.dags import dag, task
from tests.helpers.harness import t

NOW = "2026-03-01T00:00:00Z"
A, B = "a-team", "team-b"


def apply_in(db, namespace: str, document: dict) -> list:
    """Apply a DAG document as a DAG of `namespace` (as its DAG object there would)."""
    loaded = Dag.from_document(parse_dag_document(document), namespace=namespace)
    return apply_dags(db, [LoadedDag(loaded, f"k8s://{namespace}/{loaded.name}")], now=t(NOW))


def pools_of(db, run_pk: int) -> dict[str, str]:
    with db.begin() as conn:
        return dict(conn.execute(select(ti_t.c.task_id, ti_t.c.pool).where(ti_t.c.dag_run_id == run_pk)).all())


def states_of(db, run_pk: int) -> dict[str, str]:
    with db.begin() as conn:
        return dict(conn.execute(select(ti_t.c.task_id, ti_t.c.state).where(ti_t.c.dag_run_id == run_pk)).all())


JOB = dag("job", task("e1", pool="etl"), task("e2", pool="etl"), task("e3", pool="etl"), task("s1", pool="spark"),
          task("m1", pool="nowhere"))


def test_a_task_takes_the_platform_pool_of_its_name_else_its_own_namespaces(db):
    set_pool(db, "spark", 1, now=t(NOW))                 # the platform's: shared by every namespace
    set_pool(db, "etl", 1, now=t(NOW), namespace=A)      # a-team's own `etl`
    set_pool(db, "etl", 3, now=t(NOW), namespace=B)      # team-b's own `etl`: another pool
    for namespace in (A, B):
        apply_in(db, namespace, JOB)
    a_run = trigger_run(db, f"{A}/job", now=t(NOW), logical_date=t("2026-02-28T00:00:00Z"))
    b_run = trigger_run(db, f"{B}/job", now=t(NOW), logical_date=t("2026-02-28T00:00:00Z"))
    assert pools_of(db, a_run.id) == {"e1": "a-team/etl", "e2": "a-team/etl", "e3": "a-team/etl", "s1": "spark",
                                      "m1": "a-team/nowhere"}
    assert pools_of(db, b_run.id)["e1"] == "team-b/etl" and pools_of(db, b_run.id)["s1"] == "spark"

    clock = FixedClock(t(NOW))
    sched = Scheduler(db, NoopExecutor(parallelism=16, clock=clock, duration_s=3600), clock=clock)
    sched.start()
    try:
        for _ in range(4):
            sched.iterate()
    finally:
        sched.stop()
    a_states, b_states = states_of(db, a_run.id), states_of(db, b_run.id)
    # each namespace's `etl` limits its own tasks only: 1 of a-team's, 3 of team-b's
    assert sorted(a_states[x] for x in ("e1", "e2", "e3")) == ["running", "scheduled", "scheduled"]
    assert sorted(b_states[x] for x in ("e1", "e2", "e3")) == ["running"] * 3
    # the platform's `spark` limits both together: one slot
    assert sorted((a_states["s1"], b_states["s1"])) == ["running", "scheduled"]
    assert a_states["m1"] == b_states["m1"] == "scheduled"  # their namespaces have no `nowhere`
    with db.begin() as conn:
        shown = {p["key"]: p for p in list_pools(conn)}
    assert {k: (p["name"], p["namespace"], p["used_slots"]) for k, p in shown.items()} == {
        "default": ("default", None, 0), "spark": ("spark", None, 1),
        "a-team/etl": ("etl", A, 1), "team-b/etl": ("etl", B, 3)}


def test_no_namespace_pool_can_shadow_a_platform_pool(db):
    set_pool(db, "spark", 4, now=t(NOW))
    with pytest.raises(PlatformPool) as refused:
        set_pool(db, "spark", 100, now=t(NOW), namespace=A)
    assert "platform pool" in str(refused.value)
    with pytest.raises(InvalidInput) as reserved:
        set_pool(db, "default", 100, now=t(NOW), namespace=A)
    assert "platform's" in reserved.value.reason
    with db.begin() as conn:
        assert sorted(p["key"] for p in list_pools(conn)) == ["default", "spark"]
    # a task of a-team naming `spark` takes the platform's pool
    apply_in(db, A, dag("job", task("s1", pool="spark")))
    run = trigger_run(db, f"{A}/job", now=t(NOW), logical_date=t("2026-02-28T00:00:00Z"))
    assert pools_of(db, run.id) == {"s1": "spark"}


def test_a_platform_pool_made_later_takes_the_task_instances_waiting_for_a_missing_pool(db):
    apply_in(db, "default", dag("job", task("x", pool="later"), task("y", pool="own")))
    apply_in(db, A, dag("job", task("x", pool="later"), task("y", pool="own")))
    set_pool(db, "own", 2, now=t(NOW), namespace=A)
    plain = trigger_run(db, "job", now=t(NOW), logical_date=t("2026-02-28T00:00:00Z"))
    team = trigger_run(db, f"{A}/job", now=t(NOW), logical_date=t("2026-02-28T00:00:00Z"))
    assert pools_of(db, plain.id) == {"x": "default/later", "y": "default/own"}
    assert pools_of(db, team.id) == {"x": "a-team/later", "y": "a-team/own"}
    set_pool(db, "later", 2, now=t(NOW))
    set_pool(db, "own", 2, now=t(NOW))
    # what waited for a pool that does not exist takes the platform's; a-team's own `own` keeps its tasks
    assert pools_of(db, plain.id) == {"x": "later", "y": "own"}
    assert pools_of(db, team.id) == {"x": "later", "y": "a-team/own"}
    # removing a namespace's pool leaves the platform's of its name, and the other way round
    assert remove_pool(db, "own", now=t(NOW), namespace=A) and not remove_pool(db, "own", now=t(NOW), namespace=A)
    with db.begin() as conn:
        assert sorted(p["key"] for p in list_pools(conn)) == ["default", "later", "own"]
        assert [p["key"] for p in list_pools(conn, namespaces=[A])] == ["default", "later", "own"]


def test_a_missing_pools_reason_names_it_as_written_and_what_makes_it(db):
    apply_in(db, A, dag("job", task("x", pool="gpu")))
    run = trigger_run(db, f"{A}/job", now=t(NOW), logical_date=t("2026-02-28T00:00:00Z"))
    clock = FixedClock(t(NOW))
    sched = Scheduler(db, NoopExecutor(parallelism=4, clock=clock), clock=clock)
    sched.start()
    try:
        sched.iterate()
        sched.iterate()
    finally:
        sched.stop()
    with db.begin() as conn:
        row = conn.execute(select(dag_run_t).where(dag_run_t.c.id == run.id)).one()
        why = task_reasons(conn, row, now=t(NOW))["x"]
    assert why == ("pool gpu does not exist (`dagline pools set gpu N` makes the platform's, or a-team's own: a "
                   "Pool object 'gpu' in namespace 'a-team' or `dagline pools set gpu N --namespace a-team`)")
