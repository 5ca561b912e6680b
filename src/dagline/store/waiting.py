"""Why a task instance is not running: the facts the scheduler decides with, gathered once for both.

The critical section and `dagline tasks list` read the load the same way (`admission_load`: slots
taken per pool, TIs queued or running per DAG and per task) and the same previous-run states
(`previous_states`), and hand them to the same pure decisions (`run_decision.decide_run`,
`admission.admit`, `admission.max_active_runs_reason`). `task_reasons` is the listing's side: for every
TI of a run that is neither running nor finished, the words the decision gave (`waiting for upstream
extract`, `pool spark full (3/3 slots, needs 1)`, `DAG at maxActiveRuns (2/2 running)`, `retry at
...`, `DAG paused`, `not yet (runs after ...)`).
"""

from __future__ import annotations

import collections
import datetime as dt
from collections.abc import Iterable

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from dagline.db.models import backfill_t, dag_run_t, dag_t, pool_t, ti_t
from dagline.domain.admission import Candidate, Limits, Load, admit, max_active_runs_reason
from dagline.domain.run_decision import TaskFacts, TIFacts, decide_run
from dagline.domain.states import RunState, TIState
from dagline.store.dags import DagCache


def admission_load(conn: Connection, dag_ids: Iterable[str]) -> Load:
    """What is taken now: slots per pool (all DAGs), TIs queued or running per DAG and per (DAG, task)
    of `dag_ids`; in one read of the queued and running TIs, grouped."""
    wanted = set(dag_ids)
    pool_used: collections.Counter = collections.Counter()
    dag_active: collections.Counter = collections.Counter()
    task_active: collections.Counter = collections.Counter()
    for pool, dag_id, task_id, count, slots in conn.execute(_ACTIVE_LOAD):
        pool_used[pool] += slots or 0
        if dag_id in wanted:
            dag_active[dag_id] += count
            task_active[(dag_id, task_id)] += count
    return Load(pool_used=pool_used, dag_active=dag_active, task_active=task_active)


_ACTIVE_LOAD = (  # built once: the critical section reads it at every queueing (no rebuilding, no cache key)
    select(ti_t.c.pool, ti_t.c.dag_id, ti_t.c.task_id, func.count(), func.sum(ti_t.c.pool_slots))
    .where(ti_t.c.state.in_(TIState.ACTIVE)).group_by(ti_t.c.pool, ti_t.c.dag_id, ti_t.c.task_id))


def previous_states(conn: Connection, previous_run_ids: Iterable[int]) -> dict[int, dict[str, str]]:
    """previous run id -> {task id: state} (for `dependsOnPast`)."""
    wanted = sorted(set(previous_run_ids))
    if not wanted:
        return {}
    found: dict[int, dict[str, str]] = collections.defaultdict(dict)
    for row in conn.execute(select(ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.state)
                            .where(ti_t.c.dag_run_id.in_(wanted))):
        found[row.dag_run_id][row.task_id] = row.state
    return found


def running_runs(conn: Connection, dag_id: str) -> int:
    return conn.execute(select(func.count()).select_from(dag_run_t).where(
        dag_run_t.c.dag_id == dag_id, dag_run_t.c.state == RunState.RUNNING)).scalar_one()


def task_reasons(conn: Connection, run, *, now: dt.datetime, dags: DagCache | None = None) -> dict[str, str]:
    """task id -> why its TI in this run is not running, for each TI neither running nor finished."""
    dags = dags or DagCache()
    tis = conn.execute(select(ti_t).where(ti_t.c.dag_run_id == run.id).order_by(ti_t.c.id)).all()
    waiting = [ti for ti in tis if ti.state not in TIState.FINISHED and ti.state != TIState.RUNNING]
    if not waiting:
        return {}
    dag_row = conn.execute(select(dag_t).where(dag_t.c.dag_id == run.dag_id)).one()
    if dag_row.is_paused:
        return {ti.task_id: "DAG paused (`dagline dags unpause " + run.dag_id + "`)" for ti in waiting}
    try:
        dag = dags.get(conn, run.dag_version_id)
    except Exception as exc:  # noqa: BLE001 - the scheduler records it as an import error; say so here too
        return {ti.task_id: f"its DAG version cannot be read: {str(exc).splitlines()[0]}" for ti in waiting}
    if run.state == RunState.QUEUED:
        return {ti.task_id: _queued_run_reason(conn, run, dag, now) for ti in waiting}
    if run.state != RunState.RUNNING:
        return {}

    previous = previous_states(conn, [run.previous_run_id] if run.previous_run_id is not None else [])
    previous_name = None
    if run.previous_run_id is not None:
        previous_name = conn.execute(select(dag_run_t.c.run_id).where(dag_run_t.c.id == run.previous_run_id)).scalar()
    decision = decide_run(
        [TaskFacts(task_id, task.upstream, task.trigger_rule, task.depends_on_past)
         for task_id, task in dag.tasks.items()],
        {ti.task_id: TIFacts(ti.id, ti.state, ti.next_retry_at) for ti in tis},
        leaves=dag.leaves, previous_states=previous.get(run.previous_run_id, {}), now=now, previous_run=previous_name,
    )
    by_id = {ti.id: ti.task_id for ti in tis}
    reasons = {by_id[ti_id]: why for ti_id, why in decision.waiting.items()}

    scheduled = [ti for ti in tis if ti.state == TIState.SCHEDULED]
    if scheduled:
        pools = dict(conn.execute(select(pool_t.c.name, pool_t.c.slots)).all())
        current = dags.current(conn, run.dag_id)[1]
        admission = admit(
            [Candidate(ti.id, run.dag_id, ti.task_id, ti.pool, ti.pool_slots,
                       dag.tasks[ti.task_id].max_active_tis_per_dag if ti.task_id in dag.tasks else None)
             for ti in sorted(scheduled, key=lambda ti: (-ti.priority_weight, ti.id))],
            admission_load(conn, [run.dag_id]),
            Limits(pool_slots=pools, max_active_tasks={run.dag_id: current.spec.max_active_tasks},
                   executor_slots=len(scheduled)),
        )
        for ti in scheduled:
            reasons[ti.task_id] = admission.waiting.get(ti.id, "scheduled: next to be queued")
    for ti in tis:
        if ti.state == TIState.QUEUED:
            reasons[ti.task_id] = "queued: handed to the executor, not started yet"
        elif ti.state == TIState.UP_FOR_RETRY and ti.task_id not in reasons:
            reasons[ti.task_id] = "retry due: next to be scheduled"
        elif ti.state == TIState.NONE and ti.task_id not in reasons:
            reasons[ti.task_id] = "ready: next to be scheduled"
    return reasons


def _queued_run_reason(conn: Connection, run, dag, now: dt.datetime) -> str:
    if run.run_after > now:
        return f"not yet (the run starts after {run.run_after.isoformat()})"
    if run.backfill_id is not None:
        paused = conn.execute(select(backfill_t.c.is_paused).where(backfill_t.c.id == run.backfill_id)).scalar()
        if paused:
            return f"backfill {run.backfill_id} paused"
    why = max_active_runs_reason(running_runs(conn, run.dag_id), dag.spec.max_active_runs)
    return why or "queued run: starts at the scheduler's next loop"
