"""Task instances' tries. A task instance's latest try as the readers of its logs see it (`dagline
tasks logs`, the web UI): its state and try number, the external id its executor reported, and which
executor ran it -- the executor the replica that queued (or adopted) it registered with, which chooses the
log reader (`dagline.executors.registry.open_log`). And the scheduler's reads of tries: those asked to
stop, those running (for their `executionTimeout`)."""

from __future__ import annotations

import dataclasses

from sqlalchemy import select, tuple_
from sqlalchemy.engine import Connection

from dagline.db.models import dag_run_t, replica_t, ti_t
from dagline.domain.states import TIState


@dataclasses.dataclass(frozen=True)
class TaskTry:
    state: str
    try_number: int            # the latest try (0: none yet)
    external_id: str | None    # the executor's id of the latest try's job
    executor: str | None       # the executor of the replica that queued it (None: no replica recorded)


def task_try(conn: Connection, run_pk: int, task_id: str) -> TaskTry | None:
    """The latest try of a run's task, or None when the run has no such task."""
    row = conn.execute(
        select(ti_t.c.state, ti_t.c.try_number, ti_t.c.external_id, replica_t.c.executor)
        .select_from(ti_t.outerjoin(replica_t, replica_t.c.id == ti_t.c.queued_by_replica_id))
        .where(ti_t.c.dag_run_id == run_pk, ti_t.c.task_id == task_id)).first()
    return None if row is None else TaskTry(row.state, row.try_number, row.external_id, row.executor)


def try_number_of(conn: Connection, run_pk: int, task_id: str) -> int | None:
    """A run's task instance's try number (0: no try yet), None when the run has no such task: the try
    `tasks render` and `tasks test` render for."""
    return conn.execute(select(ti_t.c.try_number).where(
        ti_t.c.dag_run_id == run_pk, ti_t.c.task_id == task_id)).scalar()


def tries_asked_to_stop(conn: Connection, tries: list[tuple[int, int]]) -> list:
    """(id, try_number) of the given (ti id, try number) pairs still on that try, queued or running, and
    asked to stop (`stop_requested_at` set). One indexed look-up by primary key."""
    return conn.execute(
        select(ti_t.c.id, ti_t.c.try_number)
        .where(tuple_(ti_t.c.id, ti_t.c.try_number).in_(tries), ti_t.c.stop_requested_at.is_not(None),
               ti_t.c.state.in_(list(TIState.ACTIVE)))).all()


def running_tries(conn: Connection, *, test_run_id: int | None = None) -> list:
    """The running tries that have a start date, with their run's version, run id and DAG id: those of
    test run `test_run_id` only, or (without it) those of every run that is not a test run."""
    scope = dag_run_t.c.id == test_run_id if test_run_id is not None else ~dag_run_t.c.is_test
    return conn.execute(
        select(ti_t.c.id, ti_t.c.task_id, ti_t.c.try_number, ti_t.c.max_tries, ti_t.c.start_date,
               dag_run_t.c.dag_version_id, dag_run_t.c.run_id, dag_run_t.c.dag_id)
        .join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
        .where(ti_t.c.state == TIState.RUNNING, ti_t.c.start_date.is_not(None), scope)
    ).all()


def reported_tries(conn: Connection, ti_ids: set[int]) -> list:
    """The current state, try and stop request of the task instances executors reported about, with
    their run's version."""
    return conn.execute(
        select(ti_t.c.id, ti_t.c.state, ti_t.c.try_number, ti_t.c.max_tries, ti_t.c.dag_run_id, ti_t.c.task_id,
               ti_t.c.stop_requested_at, dag_run_t.c.dag_version_id)
        .join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
        .where(ti_t.c.id.in_(ti_ids))).all()
