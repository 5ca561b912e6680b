"""Missed deadlines: marking the runs and task instances whose `deadline_at` has passed while they are
not done (`deadline_missed_at`), each once, whichever replica notices first. The events and callbacks
of a miss are the caller's (`dagline.scheduler.deadlines`), in the same transaction."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from dagline.db.models import RUN_DEADLINE_OPEN_STATES, TI_DEADLINE_OPEN_STATES, dag_run_t, ti_t


def mark_missed_run_deadlines(conn: Connection, *, now: dt.datetime, limit: int) -> list:
    """Set `deadline_missed_at` = `now` on the runs (at most `limit`, earliest deadline first) whose
    deadline passed while open; returns their (id, dag_id, state, deadline_at), in id order. A
    compare-and-set: a run another replica marked first, or which finished meanwhile, is left alone."""
    return _mark(conn, dag_run_t, RUN_DEADLINE_OPEN_STATES, now, limit,
                 (dag_run_t.c.id, dag_run_t.c.dag_id, dag_run_t.c.state, dag_run_t.c.deadline_at))


def mark_missed_task_deadlines(conn: Connection, *, now: dt.datetime, limit: int) -> list:
    """As `mark_missed_run_deadlines`, for task instances; returns their (id, dag_id, dag_run_id,
    task_id, try_number, state, deadline_at), in id order."""
    return _mark(conn, ti_t, TI_DEADLINE_OPEN_STATES, now, limit,
                 (ti_t.c.id, ti_t.c.dag_id, ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.try_number, ti_t.c.state,
                  ti_t.c.deadline_at))


def _mark(conn: Connection, table, open_states, now: dt.datetime, limit: int, returning) -> list:
    still_open = (table.c.deadline_at.is_not(None), table.c.deadline_missed_at.is_(None),
                  table.c.state.in_(open_states))  # the partial index's predicate, so the index is used
    due = (select(table.c.id).where(*still_open, table.c.deadline_at <= now)
           .order_by(table.c.deadline_at, table.c.id).limit(limit))
    ids = list(conn.execute(due).scalars())
    if not ids:
        return []
    rows = conn.execute(update(table).where(table.c.id.in_(ids), *still_open, table.c.deadline_at <= now)
                        .values(deadline_missed_at=now).returning(*returning)).all()
    return sorted(rows, key=lambda row: row.id)
