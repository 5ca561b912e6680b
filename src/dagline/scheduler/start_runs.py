"""Loop step 2: start queued runs whose time has come, within `maxActiveRuns` of the DAG and of their
backfill. Scheduled and manual runs go first, so a large backfill never delays the present."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from dagline.admission import max_active_runs_reason
from dagline.dagstore import DagCache
from dagline.db.claims import lock_dags_with_startable_runs
from dagline.db.models import backfill_t, dag_run_t
from dagline.db.transitions import change_runs
from dagline.scheduler.isolation import describe, is_dags_fault, record_import_error
from dagline.states import RunState


def start_queued_runs(
    conn: Connection, *, now: dt.datetime, dags: DagCache, who: str, limit: int, backfill_id: int | None = None
) -> int:
    started = 0
    dag_ids = lock_dags_with_startable_runs(conn, now, limit, backfill_id)
    for dag_id in dag_ids:
        try:
            _, dag = dags.current(conn, dag_id)
        except Exception as exc:  # its runs wait; the other DAGs' start (see `isolation`)
            if not is_dags_fault(exc):
                raise
            record_import_error(conn, dag_id, describe(exc, "starting runs"), at=now, who=who)
            continue
        running = _running_counts(conn, dag_id)
        if max_active_runs_reason(sum(running.values()), dag.spec.max_active_runs) is not None:
            continue  # `dagline tasks list` gives the same reason
        room = dag.spec.max_active_runs - sum(running.values())
        chosen: list[int] = []
        if backfill_id is None:
            chosen += _queued(conn, dag_id, now, room, backfill=None)
        for bf in _backfills_with_queued_runs(conn, dag_id, now, backfill_id):
            free = room - len(chosen)
            if bf.max_active_runs is not None:
                free = min(free, bf.max_active_runs - running.get(bf.id, 0))
            if free <= 0:
                continue
            chosen += _queued(conn, dag_id, now, free, backfill=bf)
        if chosen:
            started += len(change_runs(conn, chosen, expected=RunState.QUEUED, to=RunState.RUNNING, at=now, who=who,
                                       values={"start_date": now}))
    return started


def _running_counts(conn: Connection, dag_id: str) -> dict[int | None, int]:
    """Running runs of a DAG by backfill id (None for scheduled and manual runs); test runs do not count."""
    rows = conn.execute(
        select(dag_run_t.c.backfill_id, func.count())
        .where(dag_run_t.c.dag_id == dag_id, dag_run_t.c.state == RunState.RUNNING, ~dag_run_t.c.is_test)
        .group_by(dag_run_t.c.backfill_id)
    )
    return {row[0]: row[1] for row in rows}


def _backfills_with_queued_runs(conn: Connection, dag_id: str, now: dt.datetime, only: int | None):
    stmt = (
        select(backfill_t.c.id, backfill_t.c.max_active_runs, backfill_t.c.run_backwards)
        .where(backfill_t.c.dag_id == dag_id, backfill_t.c.state == "running", backfill_t.c.is_paused.is_(False))
        .order_by(backfill_t.c.id)
    )
    if only is not None:
        stmt = stmt.where(backfill_t.c.id == only)
    return conn.execute(stmt).all()


def _queued(conn: Connection, dag_id: str, now: dt.datetime, n: int, *, backfill) -> list[int]:
    stmt = select(dag_run_t.c.id).where(
        dag_run_t.c.dag_id == dag_id, dag_run_t.c.state == RunState.QUEUED, dag_run_t.c.run_after <= now
    )
    if backfill is None:
        stmt = stmt.where(dag_run_t.c.backfill_id.is_(None)).order_by(dag_run_t.c.logical_date, dag_run_t.c.id)
    else:
        order = dag_run_t.c.logical_date.desc() if backfill.run_backwards else dag_run_t.c.logical_date
        stmt = stmt.where(dag_run_t.c.backfill_id == backfill.id).order_by(order, dag_run_t.c.id)
    return list(conn.execute(stmt.limit(n)).scalars())
