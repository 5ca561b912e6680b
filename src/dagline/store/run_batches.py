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

from sqlalchemy import DateTime, String, bindparam, cast, column, func, select, update, values
from sqlalchemy.engine import Connection

from dagline.db.bulk import insert_rows
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
    run_row,
    set_previous,
    ti_rows_of,
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
    """The `Position` of each DAG, in one statement (four index probes per DAG)."""
    if not dag_ids:
        return {}
    return {row.dag_id: Position(row.last_id, row.last_date, row.schedule_end, row.active)
            for row in conn.execute(_POSITIONS, {"dag_ids": list(dag_ids)})}


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
        ti_rows = [ti for pk, (plan, new, _) in zip(pks, new_runs, strict=True)
                   for ti in ti_rows_of(plan.dag, RunType.SCHEDULED, pk, new, now=now)]
        insert_rows(conn, ti_t, ti_rows)
        record_events(conn, [
            {"at": now, "who": who, "entity": "dag_run", "dag_id": plan.dag.dag_id, "dag_run_id": pk,
             "from_state": None, "to_state": RunState.QUEUED, "detail": f"{RunType.SCHEDULED} run created"}
            for pk, (plan, _, _) in zip(pks, new_runs, strict=True)])
        delays = [(now - new.run_after).total_seconds() for _, new, _ in new_runs]
        at_commit(conn, lambda: count_created(RunType.SCHEDULED, len(pks), delays))
    set_next_dagruns(conn, [
        {"b_dag_id": plan.dag.dag_id,
         "b_next": plan.next_info.logical_date if plan.next_info else None,
         "b_start": plan.next_info.data_interval.start if plan.next_info else None,
         "b_end": plan.next_info.data_interval.end if plan.next_info else None,
         "b_after": plan.create_after}
        for plan in planned])
    return len(run_rows)


def set_next_dagruns(conn: Connection, changes: list[dict[str, Any]]) -> None:
    """Store the next interval of several DAGs (`b_dag_id`, `b_next`, `b_start`, `b_end`, `b_after`):
    on PostgreSQL one `UPDATE ... FROM (VALUES ...)` per thousand DAGs, on SQLite an executemany (its
    driver runs it in C)."""
    if not changes:
        return
    d = dag_t.c
    if conn.dialect.name != "postgresql":
        conn.execute(update(dag_t).where(d.dag_id == bindparam("b_dag_id")).values(
            next_dagrun=bindparam("b_next"), next_dagrun_data_interval_start=bindparam("b_start"),
            next_dagrun_data_interval_end=bindparam("b_end"), next_dagrun_create_after=bindparam("b_after")),
            changes)
        return
    stamp = DateTime(timezone=True)
    for start in range(0, len(changes), 1000):
        chunk = changes[start:start + 1000]
        rows = values(column("b_dag_id", String), column("b_next", stamp), column("b_start", stamp),
                      column("b_end", stamp), column("b_after", stamp), name="nexts").data(
            [(c["b_dag_id"], c["b_next"], c["b_start"], c["b_end"], c["b_after"]) for c in chunk])
        conn.execute(update(dag_t).where(d.dag_id == rows.c.b_dag_id).values(
            next_dagrun=cast(rows.c.b_next, stamp), next_dagrun_data_interval_start=cast(rows.c.b_start, stamp),
            next_dagrun_data_interval_end=cast(rows.c.b_end, stamp),
            next_dagrun_create_after=cast(rows.c.b_after, stamp)))

