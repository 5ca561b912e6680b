"""Loop step 6 (on intervals): execution timeouts and finishing backfills.

The rest of housekeeping has modules of its own: heartbeats in `replica.liveness`, orphaned and zombie
task instances in `replica.adoption`. `executionTimeout` is global: whichever replica notices first
fails (or retries) the try; the replica running the job notices the change and stops it
(`replica.adoption.reconcile_own_tries`).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import and_, exists, select, update
from sqlalchemy.engine import Connection

from dagline.db.models import backfill_t, dag_run_t, ti_t
from dagline.db.transitions import fail_running_tries, record_events
from dagline.domain.states import BackfillState, RunState, TIState
from dagline.executors.base import TaskKey
from dagline.scheduler.isolation import describe, is_dags_fault, record_import_error
from dagline.store.dags import DagCache


def time_out_tasks(conn: Connection, *, now: dt.datetime, dags: DagCache, who: str,
                   test_run_id: int | None = None) -> list[TaskKey]:
    """Fail (or retry) running tries past their task's `executionTimeout`, whichever executor runs them;
    returns their keys so the loop can ask the executor to stop the jobs. Tries of test runs are their
    `dags test` process's to time out: with `test_run_id`, only that run's; without, none."""
    scope = dag_run_t.c.id == test_run_id if test_run_id is not None else ~dag_run_t.c.is_test
    rows = conn.execute(
        select(ti_t.c.id, ti_t.c.task_id, ti_t.c.try_number, ti_t.c.max_tries, ti_t.c.start_date,
               dag_run_t.c.dag_version_id, dag_run_t.c.run_id, dag_run_t.c.dag_id)
        .join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
        .where(ti_t.c.state == TIState.RUNNING, ti_t.c.start_date.is_not(None), scope)
    ).all()
    overdue = {}
    for row in rows:
        try:
            timeout = dags.get(conn, row.dag_version_id).tasks[row.task_id].execution_timeout
        except Exception as exc:  # its DAG's fault: the others' timeouts still hold (see `isolation`)
            if not is_dags_fault(exc):
                raise
            record_import_error(conn, row.dag_id, describe(exc, "timing out tasks"), at=now, who=who)
            continue
        if timeout is not None and row.start_date + timeout.as_timedelta() <= now:
            overdue[row.id] = row
    changed = fail_running_tries(conn, list(overdue.values()), at=now, who=who,
                                 detail="timed out: running longer than its executionTimeout")
    return [TaskKey(r.dag_id, overdue[r.id].run_id, r.task_id, r.try_number) for r in changed]


def finish_backfills(conn: Connection, *, now: dt.datetime, who: str) -> int:
    """Mark running backfills whose runs have all finished as completed."""
    unfinished = exists().where(and_(dag_run_t.c.backfill_id == backfill_t.c.id,
                                     dag_run_t.c.state.in_(RunState.ACTIVE)))
    done = conn.execute(
        update(backfill_t).where(backfill_t.c.state == BackfillState.RUNNING, ~unfinished)
        .values(state=BackfillState.COMPLETED, completed_at=now).returning(backfill_t.c.id, backfill_t.c.dag_id)
    ).all()
    record_events(conn, [{"at": now, "who": who, "entity": "backfill", "dag_id": r.dag_id,
                          "detail": f"backfill {r.id}", "from_state": BackfillState.RUNNING,
                          "to_state": BackfillState.COMPLETED}
                         for r in done])
    return len(done)
