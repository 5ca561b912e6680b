"""Housekeeping: find missed deadlines at the deadline, record each once, fire its callbacks.

Runs and task instances carry `deadline_at`, fixed when the run was created (`dagline.domain.deadlines`).
At every housekeeping pass (and so within `housekeeping_interval_s` of the deadline), one indexed
statement per table sets `deadline_missed_at` on the rows whose deadline has passed and which are not
done yet, as a compare-and-set (`... AND deadline_missed_at IS NULL AND state IN <open states>`): with
several replicas, whichever notices first records the miss, the other's UPDATE finds the row changed
and does nothing. In the same transaction: an `event` row (entity `deadline`), the outbox rows of the
`deadline_miss` callbacks, and later (after commit) the `dagline_deadline_misses_total` counter. A run
or task instance that finished before its deadline is not in the partial index and fires nothing.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from sqlalchemy.engine import Connection

from dagline.db.outbox import enqueue_deadline_misses
from dagline.db.transitions import record_events
from dagline.store.deadlines import mark_missed_run_deadlines, mark_missed_task_deadlines


@dataclasses.dataclass(frozen=True)
class Misses:
    runs: int = 0
    tasks: int = 0


def record_missed_deadlines(conn: Connection, *, now: dt.datetime, who: str, limit: int = 500) -> Misses:
    """Record every deadline passed at `now` of a run or task instance that is not done (at most
    `limit` of each per call, earliest deadline first)."""
    runs = mark_missed_run_deadlines(conn, now=now, limit=limit)
    tis = mark_missed_task_deadlines(conn, now=now, limit=limit)
    record_events(conn, [  # the same keys in every row: one executemany
        {"at": now, "who": who, "entity": "deadline", "dag_id": r.dag_id, "dag_run_id": r.id,
         "ti_id": None, "task_id": None, "try_number": None, "from_state": r.state, "to_state": r.state,
         "detail": f"run deadline {r.deadline_at.isoformat()} missed"}
        for r in runs
    ] + [
        {"at": now, "who": who, "entity": "deadline", "dag_id": r.dag_id, "dag_run_id": r.dag_run_id,
         "ti_id": r.id, "task_id": r.task_id, "try_number": r.try_number, "from_state": r.state,
         "to_state": r.state, "detail": f"task deadline {r.deadline_at.isoformat()} missed"}
        for r in tis
    ])
    enqueue_deadline_misses(conn, "run", runs, at=now)
    enqueue_deadline_misses(conn, "task", tis, at=now)
    return Misses(runs=len(runs), tasks=len(tis))

