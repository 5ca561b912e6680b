"""Every row-lock statement dagline issues, each a named function (the procrastinate way).

On PostgreSQL these are `FOR UPDATE SKIP LOCKED` / `NOWAIT` claims: two replicas never hold the same
rows, and each caller re-checks its caps (max active runs, pool slots...) while holding them. Every
ORDER BY ends in the primary key so claims are deterministic. On SQLite, SQLAlchemy drops the lock
clauses; there, `BEGIN IMMEDIATE` (see `engine`) serialises the one scheduler with the CLI instead.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from dagline.db.models import dag_run_t, dag_t, pool_t, ti_t


def lock_dag(conn: Connection, dag_id: str) -> Any | None:
    """Wait for and hold one DAG row. Protects the DAG's timeline while runs are inserted or replaced
    (manual triggers, backfills, DAG updates), so `previous` links and `next_dagrun` stay consistent."""
    return conn.execute(select(dag_t).where(dag_t.c.dag_id == dag_id).with_for_update()).first()


def lock_due_dags(conn: Connection, now: dt.datetime, limit: int, dag_ids: Sequence[str] | None = None) -> list[Any]:
    """Claim active, unpaused DAGs whose next run may be created (`next_dagrun_create_after <= now`).
    Protects: one run per interval (only the holder creates it) and the DAG's `maxActiveRuns`,
    counted by the holder before each creation."""
    stmt = (
        select(dag_t)
        .where(dag_t.c.is_active.is_(True), dag_t.c.is_paused.is_(False), dag_t.c.next_dagrun_create_after <= now)
        .order_by(dag_t.c.next_dagrun_create_after, dag_t.c.dag_id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    if dag_ids is not None:
        stmt = stmt.where(dag_t.c.dag_id.in_(dag_ids))
    return conn.execute(stmt).all()


def lock_dags_with_startable_runs(
    conn: Connection, now: dt.datetime, limit: int, backfill_id: int | None = None
) -> list[Any]:
    """Claim unpaused DAGs that have queued runs due to start (`run_after <= now`).
    Protects `maxActiveRuns` (per DAG and per backfill): only the holder of a DAG row promotes its
    queued runs, after counting its running ones."""
    startable = select(dag_run_t.c.dag_id).where(dag_run_t.c.state == "queued", dag_run_t.c.run_after <= now)
    if backfill_id is not None:
        startable = startable.where(dag_run_t.c.backfill_id == backfill_id)
    stmt = (
        select(dag_t.c.dag_id)
        .where(dag_t.c.is_paused.is_(False), dag_t.c.dag_id.in_(startable.distinct()))
        .order_by(dag_t.c.dag_id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return [row.dag_id for row in conn.execute(stmt)]


def lock_running_runs(conn: Connection, limit: int, backfill_id: int | None = None) -> list[Any]:
    """Claim running runs of unpaused DAGs, least recently examined first.
    Protects: one replica at a time decides a run's task instances and finishes the run."""
    stmt = (
        select(dag_run_t)
        .join(dag_t, dag_t.c.dag_id == dag_run_t.c.dag_id)
        .where(dag_run_t.c.state == "running", dag_t.c.is_paused.is_(False))
        .order_by(dag_run_t.c.last_scheduling_decision.asc().nulls_first(), dag_run_t.c.id)
        .limit(limit)
        .with_for_update(of=dag_run_t, skip_locked=True)
    )
    if backfill_id is not None:
        stmt = stmt.where(dag_run_t.c.backfill_id == backfill_id)
    return conn.execute(stmt).all()


def lock_runs_by_id(conn: Connection, run_ids: Sequence[int]) -> list[Any]:
    """Claim specific running runs, skipping those another replica holds (the mini-scheduler: a
    replica that records a task's end schedules its downstream tasks at once, if it can get the run)."""
    if not run_ids:
        return []
    stmt = (
        select(dag_run_t)
        .where(dag_run_t.c.id.in_(list(run_ids)), dag_run_t.c.state == "running")
        .order_by(dag_run_t.c.id)
        .with_for_update(skip_locked=True)
    )
    return conn.execute(stmt).all()


class PoolsBusy(Exception):
    """Another replica holds the pool rows: it is in the critical section."""


def lock_pools_nowait(conn: Connection) -> dict[str, int]:
    """Hold every pool row, or raise `PoolsBusy` at once (SQLSTATE 55P03) if another replica does.
    Protects pool slots, `maxActiveTasks`, `maxActiveTisPerDag`: the critical section that counts and
    queues task instances runs in one replica at a time."""
    stmt = select(pool_t.c.name, pool_t.c.slots).order_by(pool_t.c.name).with_for_update(nowait=True)
    try:
        return {row.name: row.slots for row in conn.execute(stmt)}
    except DBAPIError as exc:
        if getattr(exc.orig, "pgcode", None) == "55P03":
            raise PoolsBusy() from exc
        raise


def lock_schedulable_tis(conn: Connection, limit: int, backfill_id: int | None = None) -> list[Any]:
    """Claim `scheduled` task instances of running runs of unpaused DAGs, by priority (highest first),
    then logical date (oldest first), then id. Called inside the critical section; SKIP LOCKED keeps
    it safe against a mini-scheduler touching the same rows."""
    stmt = (
        select(
            ti_t.c.id, ti_t.c.dag_id, ti_t.c.task_id, ti_t.c.pool, ti_t.c.pool_slots, ti_t.c.priority_weight,
            ti_t.c.try_number, ti_t.c.dag_run_id, dag_run_t.c.dag_version_id, dag_run_t.c.logical_date,
        )
        .join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
        .join(dag_t, dag_t.c.dag_id == ti_t.c.dag_id)
        .where(and_(ti_t.c.state == "scheduled", dag_run_t.c.state == "running", dag_t.c.is_paused.is_(False)))
        .order_by(ti_t.c.priority_weight.desc(), dag_run_t.c.logical_date, ti_t.c.id)
        .limit(limit)
        .with_for_update(of=ti_t, skip_locked=True)
    )
    if backfill_id is not None:
        stmt = stmt.where(dag_run_t.c.backfill_id == backfill_id)
    return conn.execute(stmt).all()
