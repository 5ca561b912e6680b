"""Loop step 6 (on intervals): execution timeouts and finishing backfills.

The rest of housekeeping has modules of its own: heartbeats in `replica.liveness`, orphaned and zombie
task instances in `replica.adoption`. `executionTimeout` is global: whichever replica notices first
fails (or retries) the try; the replica running the job notices the change and stops it
(`replica.adoption.reconcile_own_tries`).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy.engine import Connection

from dagline.db.transitions import fail_running_tries, record_events
from dagline.domain.states import BackfillState
from dagline.executors.base import TaskKey
from dagline.scheduler.isolation import describe, is_dags_fault, record_import_error
from dagline.store.backfills import complete_finished_backfills
from dagline.store.dags import DagCache
from dagline.store.tries import running_tries


def time_out_tasks(conn: Connection, *, now: dt.datetime, dags: DagCache, who: str,
                   test_run_id: int | None = None) -> list[TaskKey]:
    """Fail (or retry) running tries past their task's `executionTimeout`, whichever executor runs them;
    returns their keys so the loop can ask the executor to stop the jobs. Tries of test runs are their
    `dags test` process's to time out: with `test_run_id`, only that run's; without, none."""
    rows = running_tries(conn, test_run_id=test_run_id)
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
    done = complete_finished_backfills(conn, now=now)
    record_events(conn, [{"at": now, "who": who, "entity": "backfill", "dag_id": r.dag_id,
                          "detail": f"backfill {r.id}", "from_state": BackfillState.RUNNING,
                          "to_state": BackfillState.COMPLETED}
                         for r in done])
    return len(done)
