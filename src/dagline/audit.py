"""Invariant checks over the tables and the append-only event log, for tests, benchmarks and auditors.

Each check returns the violations it found (an empty list when the invariant holds):
- `duplicate_runs`: two live (not overridden) runs of one DAG at one logical date;
- `duplicate_launches`: a task instance queued more than once for the same try;
- `pool_violations`: replaying the log, a pool holding more slots than it has;
- `unfinished_queued_tis`: a TI that was queued but is not finished although its run is;
- `broken_timeline`: a live run whose `previous` is not the live run just before it.
"""

from __future__ import annotations

import collections

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from dagline.db.models import dag_run_t, event_t, pool_t, ti_t
from dagline.deps import RunState, TIState


def duplicate_runs(conn: Connection) -> list[tuple]:
    rows = conn.execute(
        select(dag_run_t.c.dag_id, dag_run_t.c.logical_date, func.count())
        .where(dag_run_t.c.state != RunState.OVERRIDDEN)
        .group_by(dag_run_t.c.dag_id, dag_run_t.c.logical_date).having(func.count() > 1)
    ).all()
    return [tuple(r) for r in rows]


def duplicate_launches(conn: Connection) -> list[tuple]:
    rows = conn.execute(
        select(event_t.c.ti_id, event_t.c.try_number, func.count())
        .where(event_t.c.entity == "task_instance", event_t.c.to_state == TIState.QUEUED)
        .group_by(event_t.c.ti_id, event_t.c.try_number).having(func.count() > 1)
    ).all()
    return [tuple(r) for r in rows]


def pool_violations(conn: Connection) -> list[dict]:
    slots = dict(conn.execute(select(pool_t.c.name, pool_t.c.slots)).all())
    ti_pool = {r.id: (r.pool, r.pool_slots) for r in conn.execute(select(ti_t.c.id, ti_t.c.pool, ti_t.c.pool_slots))}
    used: collections.Counter = collections.Counter()
    violations = []
    for ev in conn.execute(
        select(event_t.c.id, event_t.c.ti_id, event_t.c.from_state, event_t.c.to_state)
        .where(event_t.c.entity == "task_instance").order_by(event_t.c.id)
    ):
        pool, n = ti_pool[ev.ti_id]
        was, now = ev.from_state in TIState.ACTIVE, ev.to_state in TIState.ACTIVE
        if now and not was:
            used[pool] += n
            if used[pool] > slots.get(pool, 0):
                violations.append({"event": ev.id, "pool": pool, "used": used[pool], "slots": slots.get(pool, 0)})
        elif was and not now:
            used[pool] -= n
    return violations


def unfinished_queued_tis(conn: Connection) -> list[int]:
    queued = select(event_t.c.ti_id).where(event_t.c.entity == "task_instance", event_t.c.to_state == TIState.QUEUED)
    rows = conn.execute(
        select(ti_t.c.id).join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
        .where(ti_t.c.id.in_(queued), dag_run_t.c.state.in_(RunState.FINISHED),
               ti_t.c.state.not_in(TIState.FINISHED))
    ).scalars()
    return list(rows)


def broken_timeline(conn: Connection) -> list[int]:
    by_dag = collections.defaultdict(list)
    for r in conn.execute(
        select(dag_run_t.c.id, dag_run_t.c.dag_id, dag_run_t.c.previous_run_id)
        .where(dag_run_t.c.state != RunState.OVERRIDDEN).order_by(dag_run_t.c.logical_date, dag_run_t.c.id)
    ):
        by_dag[r.dag_id].append(r)
    broken = []
    for runs in by_dag.values():
        previous = None
        for r in runs:
            if r.previous_run_id != previous:
                broken.append(r.id)
            previous = r.id
    return broken


def all_violations(conn: Connection) -> dict[str, list]:
    return {
        "duplicate_runs": duplicate_runs(conn),
        "duplicate_launches": duplicate_launches(conn),
        "pool_violations": pool_violations(conn),
        "unfinished_queued_tis": unfinished_queued_tis(conn),
        "broken_timeline": broken_timeline(conn),
    }
