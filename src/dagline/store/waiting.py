"""Why a task instance is not running: the scheduler's own decisions, on its own facts, in words.

`task_reasons` explains every task instance of a run that is neither running nor finished, for
`dagline tasks list` (`reason`), `dagline runs show` and the web run page. It gathers what the scheduler
gathers (`dagline.store.facts`, the same functions) and hands it to the same pure decisions, asking for
their words: a running run's task instances in `none` or `up_for_retry` to `run_decision.decide_run`
(`waiting for upstream extract`, `depends on past (...)`, `retry at ...`, `waiting for its start signal
model.published`), its `scheduled` ones, with the scheduled task instances they compete with in the
critical section's order, to `admission.admit` (`pool spark full (3/3 slots, needs 1)`, `DAG at
maxActiveTasks (16 queued or running)`...), a queued run's to the start step's limits (`DAG at
maxActiveRuns (2/2 running)`, `not yet (the run starts after ...)`). A task instance the scheduler
would move at its next look says so (`ready: next to be scheduled`). Only the executor's free slots are
not known here: an explanation never says a task instance waits for them.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select
from sqlalchemy.engine import Connection

from dagline.db.claims import schedulable_tis
from dagline.db.models import dag_run_t, dag_t, ti_t
from dagline.domain.admission import admit, max_active_runs_reason
from dagline.domain.states import RunState, TIState
from dagline.store.dags import DagCache
from dagline.store.facts import (
    gather_queueing,
    gather_runs,
    pool_sizes,
    running_backfills,
    running_run_counts,
)

COMPETITORS_MAX = 5000  # scheduled task instances read ahead of a run's own, to explain its pool and limit waits


def task_reasons(conn: Connection, run, *, now: dt.datetime, dags: DagCache | None = None) -> dict[str, str]:
    """task id -> why its TI in this run (a `dag_run` row) is not running, for each TI neither running
    nor finished."""
    dags = dags or DagCache()
    tis = conn.execute(select(ti_t).where(ti_t.c.dag_run_id == run.id).order_by(ti_t.c.id)).all()
    waiting = [ti for ti in tis if ti.state not in TIState.FINISHED and ti.state != TIState.RUNNING]
    if not waiting:
        return {}
    dag_row = conn.execute(select(dag_t).where(dag_t.c.dag_id == run.dag_id)).one()
    if dag_row.is_paused:
        return {ti.task_id: "DAG paused (`dagline dags unpause " + run.dag_id + "`)" for ti in waiting}
    try:
        dags.get(conn, run.dag_version_id)
    except Exception as exc:  # noqa: BLE001 - the scheduler records it as an import error; say so here too
        return {ti.task_id: _unreadable(exc) for ti in waiting}
    if run.state == RunState.QUEUED:
        return {ti.task_id: _queued_run_reason(conn, run, dags, now) for ti in waiting}
    if run.state != RunState.RUNNING:
        return {}

    facts = gather_runs(conn, [run], dags=dags, on_fault=_raise, tis=tis)[run.id]
    previous_name = None
    if run.previous_run_id is not None:
        previous_name = conn.execute(select(dag_run_t.c.run_id).where(dag_run_t.c.id == run.previous_run_id)).scalar()
    decision = facts.decide(now=now, reasons=True, previous_run=previous_name)
    by_id = {ti.id: ti.task_id for ti in tis}
    reasons = {by_id[ti_id]: why for ti_id, why in decision.waiting.items()}
    for change in decision.changes:
        if change.from_state == TIState.UP_FOR_RETRY:
            reasons[by_id[change.ti_id]] = "retry due: next to be scheduled"
        elif change.from_state == TIState.NONE:
            reasons[by_id[change.ti_id]] = _NEXT.get(change.to_state, "ready: next to be scheduled")
    reasons.update(_queueing_reasons(conn, run, [ti for ti in tis if ti.state == TIState.SCHEDULED], dags))
    for ti in tis:
        if ti.state == TIState.QUEUED:
            reasons[ti.task_id] = "queued: handed to the executor, not started yet"
    return reasons


_NEXT = {  # a `none` TI the scheduler moves at its next look, by where it goes
    TIState.SKIPPED: "next to be skipped: its trigger rule cannot be met",
    TIState.UPSTREAM_FAILED: "next to be upstream_failed: an upstream task failed",
}


def _queueing_reasons(conn: Connection, run, scheduled: list, dags: DagCache) -> dict[str, str]:
    """task id -> why each of the run's `scheduled` TIs is not queued yet, as the critical section would
    decide now: the scheduled TIs that compete with them (their pools, their DAG) in its order, what is
    queued or running, the pools and the limits."""
    if not scheduled:
        return {}
    rows = schedulable_tis(conn, COMPETITORS_MAX, pools=sorted({ti.pool for ti in scheduled}), dag_id=run.dag_id,
                           test_run_id=run.id if run.is_test else None)
    faults: dict[str, Exception] = {}
    facts = gather_queueing(conn, rows, pools=pool_sizes(conn), dags=dags, executor_slots=len(rows),
                            on_fault=lambda dag_id, exc: faults.setdefault(dag_id, exc))
    if run.dag_id in faults:
        return {ti.task_id: _unreadable(faults[run.dag_id]) for ti in scheduled}
    admission = admit(facts.candidates, facts.load, facts.limits)
    looked_at = {row.id for row in rows}
    reasons = {}
    for ti in scheduled:
        if ti.id in looked_at or len(rows) < COMPETITORS_MAX:
            reasons[ti.task_id] = admission.waiting.get(ti.id, "scheduled: next to be queued")
        else:
            reasons[ti.task_id] = f"scheduled: behind {COMPETITORS_MAX} or more scheduled task instances"
    return reasons


def _queued_run_reason(conn: Connection, run, dags: DagCache, now: dt.datetime) -> str:
    """Why a queued run has not started, by the start step's facts and limits (`scheduler.start_runs`)."""
    if run.run_after > now:
        return f"not yet (the run starts after {run.run_after.isoformat()})"
    backfill = None
    if run.backfill_id is not None:
        backfill = next((bf for bf in running_backfills(conn, [run.dag_id], run.backfill_id)[run.dag_id]), None)
        if backfill is not None and backfill.is_paused:
            return f"backfill {run.backfill_id} paused"
    try:
        max_active_runs = dags.current(conn, run.dag_id)[1].spec.max_active_runs
    except Exception as exc:  # noqa: BLE001 - as for the run's own version
        return _unreadable(exc)
    running = running_run_counts(conn, [run.dag_id])[run.dag_id]
    why = max_active_runs_reason(sum(running.values()), max_active_runs)
    if why is None and backfill is not None and backfill.max_active_runs is not None:
        why = max_active_runs_reason(running.get(backfill.id, 0), backfill.max_active_runs,
                                     of=f"backfill {backfill.id}")
    return why or "queued run: starts at the scheduler's next loop"


def _unreadable(exc: Exception) -> str:
    return f"its DAG version cannot be read: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"


def _raise(dag_id: str, exc: Exception) -> None:
    raise exc
