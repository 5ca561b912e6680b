"""A task instance's latest try as the readers of its logs see it (`dagline tasks logs`, the web UI):
its state and try number, the external id its executor reported, and which executor ran it -- the
executor the replica that queued (or adopted) it registered with, which chooses the log reader
(`dagline.executors.registry.open_log`)."""

from __future__ import annotations

import dataclasses

from sqlalchemy import select
from sqlalchemy.engine import Connection

from dagline.db.models import replica_t, ti_t


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
