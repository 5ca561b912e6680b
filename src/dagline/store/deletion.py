"""Deleting a DAG with everything it made (`dagline dags delete`), as Airflow's `dags delete` does.

With the DAG row locked (a trigger, a backfill or a scheduler creating runs waits or skips it), in
short transactions so a long history never holds the database for long: the DAG is deactivated, its
runs and task instances go in batches, then its backfills, versions, signal rules and the actions
signals took on its runs (the signals stay in their log), then the DAG row. Whatever state they
are in: like Airflow, running task instances do not stop the deletion. Their jobs are stopped by the
replica that runs them at its next housekeeping (it finds their rows gone and cancels them), and
their late reports change nothing. The `event` log is kept: it is the audit trail, and one more
event records the deletion with what it removed. Applying the spec again starts a new history.

A DAG is named by its key (`a-team/etl`; `etl` in `default`, `dagline.domain.names`), and so is every
row removed here: deleting one namespace's DAG removes nothing of another namespace's DAG of that name.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from sqlalchemy import delete, func, select, update
from sqlalchemy.engine import Connection

from dagline.db.claims import lock_dag
from dagline.db.engine import Database
from dagline.db.models import (
    backfill_t,
    dag_run_t,
    dag_t,
    dag_version_t,
    signal_action_t,
    signal_listener_t,
    ti_t,
    try_launch_t,
)
from dagline.db.transitions import record_events
from dagline.domain.states import TIState
from dagline.store.dags import require_dag
from dagline.wording import counted

BATCH_RUNS = 200  # runs per transaction when a long history is deleted


@dataclasses.dataclass(frozen=True)
class DagFootprint:
    """What deleting a DAG removes."""

    dag_id: str
    versions: int
    runs: int
    task_instances: int
    active_task_instances: int  # queued or running
    backfills: int

    def describe(self) -> str:
        return (f"{counted(self.runs, 'run')}, {counted(self.task_instances, 'task instance')}, "
                f"{counted(self.backfills, 'backfill')} and {counted(self.versions, 'version')}")


def footprint(conn: Connection, dag_id: str) -> DagFootprint:
    """What the DAG has stored (an unknown DAG is an error naming it)."""
    require_dag(conn, dag_id, active=False)

    def count(table, *where):
        stmt = select(func.count()).select_from(table).where(table.c.dag_id == dag_id, *where)
        return conn.execute(stmt).scalar_one()

    return DagFootprint(dag_id, count(dag_version_t), count(dag_run_t), count(ti_t),
                        count(ti_t, ti_t.c.state.in_(TIState.ACTIVE)), count(backfill_t))


def delete_dag(db: Database, dag_id: str, *, now: dt.datetime, who: str = "cli",
               batch_runs: int = BATCH_RUNS) -> DagFootprint:
    """Remove the DAG and its versions, runs, task instances and backfills; returns what was removed.

    A long history goes in batches of `batch_runs` runs, each its own short transaction: first the DAG
    is deactivated (no run is created for it any more), then its runs go newest first, then the rest
    with the DAG row in a last transaction. Interrupted, it leaves an inactive DAG with part of its
    history; deleting again finishes."""
    with db.begin() as conn:
        require_dag(conn, dag_id, active=False)
        lock_dag(conn, dag_id)
        removed = footprint(conn, dag_id)
        conn.execute(update(dag_t).where(dag_t.c.dag_id == dag_id)
                     .values(is_active=False, next_dagrun_create_after=None, updated_at=now))
    while True:
        with db.begin() as conn:
            lock_dag(conn, dag_id)
            ids = list(conn.execute(select(dag_run_t.c.id).where(dag_run_t.c.dag_id == dag_id)
                                    .order_by(dag_run_t.c.logical_date.desc(), dag_run_t.c.id.desc())
                                    .limit(batch_runs)).scalars())
            if len(ids) < batch_runs:
                break  # the last few go with the DAG row
            _delete_runs(conn, ids)
    with db.begin() as conn:
        lock_dag(conn, dag_id)
        _delete_runs(conn, list(conn.execute(select(dag_run_t.c.id).where(dag_run_t.c.dag_id == dag_id)).scalars()))
        conn.execute(delete(backfill_t).where(backfill_t.c.dag_id == dag_id))
        conn.execute(update(dag_t).where(dag_t.c.dag_id == dag_id).values(current_version_id=None))
        # its signal rules and what signals did to its runs; the signals themselves stay in the log
        conn.execute(delete(signal_listener_t).where(signal_listener_t.c.dag_id == dag_id))
        conn.execute(delete(signal_action_t).where(signal_action_t.c.dag_id == dag_id))
        conn.execute(delete(dag_version_t).where(dag_version_t.c.dag_id == dag_id))
        conn.execute(delete(dag_t).where(dag_t.c.dag_id == dag_id))
        record_events(conn, [{"at": now, "who": who, "entity": "dag", "dag_id": dag_id, "to_state": "deleted",
                              "detail": f"deleted with {removed.describe()}"}])
    return removed


def _delete_runs(conn: Connection, run_pks: list[int]) -> None:
    """Runs `run_pks` with their task instances (the runs that follow them lose their `previous`)."""
    for start in range(0, len(run_pks), 500):
        chunk = run_pks[start:start + 500]
        tis = select(ti_t.c.id).where(ti_t.c.dag_run_id.in_(chunk))
        conn.execute(delete(try_launch_t).where(try_launch_t.c.ti_id.in_(tis)))  # its rows point at them
        conn.execute(delete(ti_t).where(ti_t.c.dag_run_id.in_(chunk)))
        conn.execute(update(dag_run_t).where(dag_run_t.c.previous_run_id.in_(chunk)).values(previous_run_id=None))
        conn.execute(delete(dag_run_t).where(dag_run_t.c.id.in_(chunk)))
