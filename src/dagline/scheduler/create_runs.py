"""Loop step 1: create scheduled runs for due DAGs and advance their `next_dagrun`.

Set-based first (issue 32): the claimed DAGs whose new runs come after every run on their timeline (the
usual tick) are planned in Python from their cached timetables and written together
(`store.run_batches`: a few statements for the whole batch, in one savepoint). The others (a manual
run at or after a due date, a version not cached, a timetable that raises), and the whole batch if its
writes fail for a DAG's fault, go DAG by DAG, each in its own savepoint: one whose version cannot be
read or whose timetable raises is recorded as an import error (`isolation`) and the others' runs are
created all the same. Both paths create the same runs with the same `previous` links.

With `catchup: false`, what is due depends on the clock (the latest complete interval at that time), and
the stored `next_dagrun` was planned at the clock of the last apply, unpause or run end. A starting
scheduler plans those DAGs again at its own clock (`plan_at_this_clock`), so `scheduler --now T` creates
what `dags next-runs --now T` lists (ADR 0066)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy.engine import Connection

from dagline.db.claims import lock_due_dags, lock_scheduled_dags
from dagline.domain.states import RunType
from dagline.scheduler.isolation import DagFailed, is_dags_fault, isolated
from dagline.store.dags import DagCache
from dagline.store.run_batches import (
    Planned,
    Position,
    insert_scheduled_batch,
    next_change,
    next_values,
    plan_dag,
    schedule_positions,
    set_next_dagruns,
)
from dagline.store.timeline import (
    NewRun,
    active_scheduled_runs,
    insert_runs,
    latest_schedule_end,
    live_run_at,
    refresh_next_dagrun,
    timetable_for,
)


def create_scheduled_runs(
    conn: Connection, *, now: dt.datetime, dags: DagCache, who: str, limit: int, per_dag: int,
    dag_ids: list[str] | None = None,
) -> int:
    """Create the due runs of up to `limit` claimed DAGs, each within its `maxActiveRuns`; returns how many."""
    rows = lock_due_dags(conn, now, limit, dag_ids)
    if not rows:
        return 0
    dags.prefetch(conn, [row.current_version_id for row in rows])
    positions = schedule_positions(conn, [row.dag_id for row in rows])
    planned: list[Planned] = []
    one_by_one = []
    for row in rows:
        plan = _plan(row, positions.get(row.dag_id), now=now, dags=dags, per_dag=per_dag)
        if plan is None:
            one_by_one.append(row)
        else:
            planned.append(plan)
    created = 0
    if planned:
        try:
            with conn.begin_nested():  # a savepoint: on a DAG's fault, nothing of the batch stays
                created += insert_scheduled_batch(conn, planned, now=now, who=who)
        except Exception as exc:
            if not is_dags_fault(exc):
                raise
            one_by_one = rows  # DAG by DAG: the faulty one is found and recorded, the others created
    for row in one_by_one:
        try:
            with isolated(conn, row.dag_id, "creating runs", at=now, who=who):
                created += _create_runs_of(conn, row, now=now, dags=dags, who=who, per_dag=per_dag)
        except DagFailed:
            continue  # recorded; the other DAGs go on
    return created


def _plan(row, position: Position | None, *, now: dt.datetime, dags: DagCache, per_dag: int) -> Planned | None:
    """A DAG's part of the batch: the walk of `_create_runs_of` and `refresh_next_dagrun`, from the
    cached version and timetable and the batch's read of where its timeline stands. None when the DAG
    must go DAG by DAG: its version is not cached, its timetable raises, or a live run sits at or after
    a date the walk meets (it may hold that date, and later runs would need relinking)."""
    dag = dags.cached(row.current_version_id) if row.current_version_id is not None else None
    if dag is None or position is None:
        return None
    try:
        return plan_dag(dag, row.current_version_id, position, now=now, per_dag=per_dag)
    except Exception as exc:
        if not is_dags_fault(exc):
            raise
        return None  # DAG by DAG, where `isolated` records why


def _create_runs_of(conn: Connection, row, *, now: dt.datetime, dags: DagCache, who: str, per_dag: int) -> int:
    version_id, dag = row.current_version_id, dags.get(conn, row.current_version_id)
    table = timetable_for(dag)
    active = active_scheduled_runs(conn, row.dag_id)
    room = min(per_dag, dag.spec.max_active_runs - active)
    after = latest_schedule_end(conn, row.dag_id)
    new_runs: list[NewRun] = []
    # The same walk as `upcoming_scheduled_runs`, with the held-date query only for due runs.
    for info in table.upcoming(after, catchup=dag.spec.catchup, now=now):
        if info.run_after > now or len(new_runs) >= room:
            break
        if live_run_at(conn, row.dag_id, info.logical_date) is None:  # a manual run may hold the date
            new_runs.append(NewRun(info.logical_date, info.data_interval, info.run_after))
    if new_runs:
        insert_runs(conn, dag=dag, version_id=version_id, run_type=RunType.SCHEDULED, runs=new_runs, now=now, who=who)
        # the new runs follow every earlier scheduled or backfill run (the walk started after them)
        after, active = new_runs[-1].data_interval.end, active + len(new_runs)
    refresh_next_dagrun(conn, row.dag_id, dag, now=now, schedule_end=after, active=active)
    return len(new_runs)


def plan_at_this_clock(conn: Connection, *, now: dt.datetime, dags: DagCache) -> int:
    """Plan the next run of every claimable scheduled DAG with `catchup: false` again at `now`
    (`refresh_next_dagrun`): the scheduler's clock, not the one of the last apply, decides what is due.
    DAGs with catch-up do not depend on the clock and are left as they are. A DAG whose version or
    timetable fails is left as it is, without a word: the run-creation step records its import error.
    Returns how many were planned."""
    rows = lock_scheduled_dags(conn)
    dags.prefetch(conn, [row.current_version_id for row in rows])
    rows = [row for row in rows if (dag := dags.cached(row.current_version_id)) is None
            or not (dag.spec.catchup or dag.spec.schedule is None)]
    return refresh_next_runs(conn, rows, now=now, dags=dags, who=None)


def refresh_next_runs(conn: Connection, rows, *, now: dt.datetime, dags: DagCache, who: str | None) -> int:
    """`refresh_next_dagrun` of many DAGs (`rows`: dag_id, current_version_id and the DAG row's next-run
    fields), set-based: one read of where their timelines stand, one UPDATE of those whose next run
    changed (the others are not written). A DAG the batch cannot plan (see `_plan`) is refreshed alone
    in a savepoint; if that fails for the DAG's fault, its import error is recorded when `who` is given,
    else it is left as it was. Returns how many DAGs were planned."""
    if not rows:
        return 0
    positions = schedule_positions(conn, [row.dag_id for row in rows])
    changed, one_by_one, planned = [], [], 0
    for row in rows:
        if row.current_version_id is None:
            continue
        plan = _plan(row, positions.get(row.dag_id), now=now, dags=dags, per_dag=0)  # no run: the next one only
        if plan is None:
            one_by_one.append(row)
            continue
        planned += 1
        if next_values(plan) != (row.next_dagrun, row.next_dagrun_data_interval_start,
                                 row.next_dagrun_data_interval_end, row.next_dagrun_create_after):
            changed.append(plan)
    set_next_dagruns(conn, [next_change(plan) for plan in changed])
    for row in one_by_one:
        try:
            if who is None:
                dag = dags.get(conn, row.current_version_id)
                with conn.begin_nested():  # a savepoint: a failing timetable leaves the DAG's row as it was
                    refresh_next_dagrun(conn, row.dag_id, dag, now=now)
            else:
                with isolated(conn, row.dag_id, "planning the next run", at=now, who=who):
                    refresh_next_dagrun(conn, row.dag_id, dags.get(conn, row.current_version_id), now=now)
            planned += 1
        except DagFailed:
            continue
        except Exception as exc:
            if not is_dags_fault(exc):
                raise
    return planned
