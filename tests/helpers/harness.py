"""Helpers for scenario tests: write DAG files, run the scheduler with a frozen clock, read state back."""

from __future__ import annotations

import datetime as dt
import textwrap

from sqlalchemy import select

from dagline.clock import FixedClock
from dagline.db.models import dag_run_t, event_t, ti_t
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.spec import load_dag_paths
from dagline.store.backfills import create_backfill
from dagline.store.dags import apply_dags
from dagline.store.read_models import list_runs
from dagline.testing import audit
from dagline.times import parse_instant
from tests.helpers.dags import dag, task


def t(text: str) -> dt.datetime:
    """An instant from ISO text (UTC unless it has an offset)."""
    return parse_instant(text)


def write_dag(folder, body: str, name: str = "dag.yaml") -> str:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def apply(db, path: str, now: str = "2026-01-01T00:00:00+00:00"):
    return apply_dags(db, load_dag_paths([path]), now=t(now))


def schedule(db, now: str, *, executor=None, backfill_id=None) -> Scheduler:
    """Run one scheduler replica with a frozen clock until nothing more can happen at `now`."""
    clock = FixedClock(t(now))
    sched = Scheduler(db, executor or NoopExecutor(parallelism=64, clock=clock), clock=clock,
                      backfill_id=backfill_id)
    sched.run(until_idle=True)
    return sched


def backfill(db, dag_id: str, start: str, end: str, now: str, **options):
    return create_backfill(db, dag_id, start=t(start), end=t(end), now=t(now), **options)


def runs(db, dag_id: str, *, include_overridden: bool = True) -> list[dict]:
    with db.begin() as conn:
        rows = list_runs(conn, dag_id)
    return rows if include_overridden else [r for r in rows if r["state"] != "overridden"]


def ti_states(db, run_pk: int) -> dict[str, str]:
    with db.begin() as conn:
        return dict(conn.execute(select(ti_t.c.task_id, ti_t.c.state).where(ti_t.c.dag_run_id == run_pk)).all())


def tis(db, run_pk: int) -> dict[str, object]:
    with db.begin() as conn:
        return {r.task_id: r for r in conn.execute(select(ti_t).where(ti_t.c.dag_run_id == run_pk))}


def events(db, **where) -> list:
    with db.begin() as conn:
        stmt = select(event_t).order_by(event_t.c.id)
        for column, value in where.items():
            stmt = stmt.where(event_t.c[column] == value)
        return conn.execute(stmt).all()


def run_row(db, run_pk: int):
    with db.begin() as conn:
        return conn.execute(select(dag_run_t).where(dag_run_t.c.id == run_pk)).one()


def assert_invariants(db) -> None:
    with db.begin() as conn:
        violations = audit.all_violations(conn)
    assert violations == {k: [] for k in violations}, violations


# One task, one retry, a job file `slow.py` beside it: for tests where a real job outlives its scheduler.
SLOW_DAG = dag("slow", task("slow", retries=1, retryDelay="PT1S"))
