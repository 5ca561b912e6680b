"""Scheduled runs of many DAGs at once: the set-based writes of run creation at a tick (issue 32).

A tick with thousands of due DAGs is paid for in statements, not rows: the DAG-by-DAG path
(`timeline.insert_runs`, `timeline.refresh_next_dagrun`) costs about 20 statements per run created.
Here a batch of claimed DAGs costs a fixed handful: one read of where each DAG's timeline stands
(`schedule_positions`), one multi-row INSERT of the runs, one of their task instances, one of their
events, at most one UPDATE of `previous` links (a DAG catching up several intervals) and one UPDATE of
the DAGs' next-run fields (`set_next_dagruns`).

It covers the common case only, and the caller (`scheduler.create_runs`) decides which DAGs are in it:
the new runs are the latest on their DAG's timeline (every live run is earlier than the first of
them), so no date is held by a manual run, nothing after them needs relinking, and each one's
`previous` is the run before it. Every other DAG goes the DAG-by-DAG path. The caller holds the DAG
rows (`claims.lock_due_dags`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, func, select, text, update
from sqlalchemy.engine import Connection

from dagline.db.bulk import insert_rows, json_document
from dagline.db.models import dag_run_t, dag_t, ti_t
from dagline.db.observe import at_commit
from dagline.db.transitions import record_events
from dagline.domain.states import RunState, RunType
from dagline.domain.timetable import DagRunInfo
from dagline.spec import Dag
from dagline.store.timeline import (
    SCHEDULE_DRIVING_TYPES,
    NewRun,
    count_created,
    make_run_id,
    platform_pool_names,
    refresh_next_dagrun,
    run_row,
    set_previous,
    ti_rows_of,
    timetable_for,
)


@dataclasses.dataclass(frozen=True)
class Position:
    """Where a DAG's timeline stands: its latest live run (id, logical date), the end of its latest
    scheduled or backfill run's interval (where the schedule continues), its active scheduled runs."""
    last_id: int | None
    last_date: dt.datetime | None
    schedule_end: dt.datetime | None
    active: int


def schedule_positions(conn: Connection, dag_ids: Sequence[str]) -> dict[str, Position]:
    """The `Position` of each DAG: one statement per thousand DAGs (four index probes per DAG)."""
    found = {}
    for start in range(0, len(dag_ids), 1000):
        for row in conn.execute(_POSITIONS, {"dag_ids": list(dag_ids[start:start + 1000])}):
            found[row.dag_id] = Position(row.last_id, row.last_date, row.schedule_end, row.active)
    return found


def _positions_statement():
    r = dag_run_t.alias("r")
    live = (r.c.state != RunState.OVERRIDDEN) & ~r.c.is_test
    latest = (r.c.logical_date.desc(), r.c.id.desc())
    mine = r.c.dag_id == dag_t.c.dag_id

    def newest(col, *where):
        return select(col).where(mine, live, *where).order_by(*latest).limit(1).scalar_subquery()

    active = (select(func.count()).select_from(r)
              .where(mine, r.c.state.in_(RunState.ACTIVE), r.c.run_type != RunType.BACKFILL, ~r.c.is_test)
              .scalar_subquery())
    return select(
        dag_t.c.dag_id, newest(r.c.id).label("last_id"), newest(r.c.logical_date).label("last_date"),
        newest(r.c.data_interval_end, r.c.run_type.in_(SCHEDULE_DRIVING_TYPES)).label("schedule_end"),
        active.label("active"),
    ).where(dag_t.c.dag_id.in_(bindparam("dag_ids", expanding=True)))


_POSITIONS = _positions_statement()  # _PREBUILT


@dataclasses.dataclass
class Planned:
    """A DAG's share of a batch: the runs to create (in order, all later than `position.last_date`)
    and its next interval afterwards (None: none), which run creation may act on only while
    `create_after` is set."""
    dag: Dag
    version_id: int
    position: Position
    runs: list[DagRunInfo]
    next_info: DagRunInfo | None
    create_after: dt.datetime | None


def plan_dag(dag: Dag, version_id: int, position: Position, *, now: dt.datetime, per_dag: int) -> Planned | None:
    """A DAG's part of a batch: the walk of run creation (up to `per_dag` due runs, within
    `maxActiveRuns`) and of `timeline.refresh_next_dagrun`, from its (cached) timetable and `position`.
    None when the DAG must go DAG by DAG: a live run sits at or after a date the walk meets (it may
    hold that date, and later runs would need relinking). A timetable's error raises."""
    table = timetable_for(dag)
    room = min(per_dag, dag.spec.max_active_runs - position.active)
    due = []
    for info in table.upcoming(position.schedule_end, catchup=dag.spec.catchup, now=now):
        if info.run_after > now or len(due) >= room:
            break
        due.append(info)
    after = due[-1].data_interval.end if due else position.schedule_end
    next_info = next(iter(table.upcoming(after, catchup=dag.spec.catchup, now=now)), None)
    first = due[0] if due else next_info
    if first is not None and position.last_date is not None and position.last_date >= first.logical_date:
        return None
    active = position.active + len(due)
    create_after = next_info.run_after if next_info is not None and active < dag.spec.max_active_runs else None
    return Planned(dag, version_id, position, due, next_info, create_after)


def refresh_next_dagruns(conn: Connection, dags: Sequence[Dag], *, now: dt.datetime) -> None:
    """`timeline.refresh_next_dagrun` of many DAGs (the caller holds their rows): one read of where
    their timelines stand, one UPDATE; a DAG the batch cannot plan is refreshed alone (`plan_dag`)."""
    positions = schedule_positions(conn, [dag.dag_id for dag in dags])
    changes = []
    for dag in dags:
        plan = plan_dag(dag, 0, positions[dag.dag_id], now=now, per_dag=0)  # no run: the next one only
        if plan is None:
            refresh_next_dagrun(conn, dag.dag_id, dag, now=now)
        else:
            changes.append(next_change(plan))
    set_next_dagruns(conn, changes)


def insert_scheduled_batch(conn: Connection, planned: Sequence[Planned], *, now: dt.datetime, who: str) -> int:
    """Create the planned scheduled runs, their task instances and events, link them, and store every
    planned DAG's next interval; returns how many runs. A few statements whatever the batch's size."""
    run_rows, new_runs = [], []
    for plan in planned:
        for info in plan.runs:
            new = NewRun(info.logical_date, info.data_interval, info.run_after)
            row = run_row(plan.dag, plan.version_id, RunType.SCHEDULED, new,
                          make_run_id(RunType.SCHEDULED, info.logical_date), now=now)
            if info is plan.runs[0]:
                row["previous_run_id"] = plan.position.last_id
            run_rows.append(row)
            new_runs.append((plan, new, row["run_id"]))
    if run_rows:
        ids = {(row.dag_id, row.run_id): row.id
               for row in insert_rows(conn, dag_run_t, run_rows, returning=("id", "dag_id", "run_id"))}
        pks = [ids[(plan.dag.dag_id, run_id)] for plan, _, run_id in new_runs]
        links = [{"b_id": pk, "b_prev": pks[i - 1]} for i, pk in enumerate(pks)
                 if i and new_runs[i][0] is new_runs[i - 1][0]]  # a DAG's second run and on follow its first
        set_previous(conn, links)
        platform = platform_pool_names(conn)  # a task's pool resolves in its DAG's namespace (store.pools)
        ti_rows = [ti for pk, (plan, new, _) in zip(pks, new_runs, strict=True)
                   for ti in ti_rows_of(plan.dag, RunType.SCHEDULED, pk, new, now=now, platform_pools=platform)]
        insert_rows(conn, ti_t, ti_rows)
        record_events(conn, [
            {"at": now, "who": who, "entity": "dag_run", "dag_id": plan.dag.dag_id, "dag_run_id": pk,
             "from_state": None, "to_state": RunState.QUEUED, "detail": f"{RunType.SCHEDULED} run created"}
            for pk, (plan, _, _) in zip(pks, new_runs, strict=True)])
        delays = [(now - new.run_after).total_seconds() for _, new, _ in new_runs]
        at_commit(conn, lambda: count_created(RunType.SCHEDULED, len(pks), delays))
    set_next_dagruns(conn, [next_change(plan) for plan in planned])
    return len(run_rows)


def next_values(plan: Planned) -> tuple:
    """(next_dagrun, its interval's start and end, next_dagrun_create_after) as the DAG row holds them."""
    info = plan.next_info
    if info is None:
        return (None, None, None, plan.create_after)
    return (info.logical_date, info.data_interval.start, info.data_interval.end, plan.create_after)


def next_change(plan: Planned) -> dict[str, Any]:
    """A `set_next_dagruns` change storing the plan's next interval."""
    nxt, start, end, after = next_values(plan)
    return {"b_dag_id": plan.dag.dag_id, "b_next": nxt, "b_start": start, "b_end": end, "b_after": after}


def set_next_dagruns(conn: Connection, changes: list[dict[str, Any]]) -> None:
    """Store the next interval of several DAGs (`b_dag_id`, `b_next`, `b_start`, `b_end`, `b_after`):
    on PostgreSQL one `UPDATE ... FROM json_to_recordset(...)` (the rows as one JSON document, as
    `db.bulk.insert_rows` sends them), on SQLite an executemany (its driver runs it in C)."""
    if not changes:
        return
    d = dag_t.c
    if conn.dialect.name != "postgresql":
        conn.execute(update(dag_t).where(d.dag_id == bindparam("b_dag_id")).values(
            next_dagrun=bindparam("b_next"), next_dagrun_data_interval_start=bindparam("b_start"),
            next_dagrun_data_interval_end=bindparam("b_end"), next_dagrun_create_after=bindparam("b_after")),
            changes)
        return
    conn.execute(_SET_NEXT_PG, {"rows": json_document(changes)})


# one text for any number of DAGs (a VALUES list would be compiled again for every batch)
_SET_NEXT_PG = text("""
    UPDATE dag SET next_dagrun = x.b_next, next_dagrun_data_interval_start = x.b_start,
        next_dagrun_data_interval_end = x.b_end, next_dagrun_create_after = x.b_after
    FROM json_to_recordset(CAST(:rows AS json))
        AS x(b_dag_id text, b_next timestamptz, b_start timestamptz, b_end timestamptz, b_after timestamptz)
    WHERE dag.dag_id = x.b_dag_id""")
