"""Driving one test run to its end in the foreground (`dagline dags test`).

`runs.create_test_run` makes the run; a `Scheduler` scoped to it (`test_run_id`) then runs the
loop's own steps on that run alone -- examine, critical section (pools and task limits hold, as for
any run), launch, executor reports with the mini-scheduler, execution timeouts -- until the run
finishes. It also stops when nothing can move the run any more: a task waiting for a pool that does
not exist or is held by others, or a retry waiting for a time that a frozen clock (`--now`) never
reaches; then the outcome lists what waits. After each loop `on_progress` sees the run's state and
its task instances, so a caller can print state changes and stream logs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable

from sqlalchemy import select

from dagline.clock import Clock
from dagline.db.engine import Database
from dagline.db.models import dag_run_t, ti_t
from dagline.executors.base import Executor
from dagline.scheduler.loop import Scheduler
from dagline.scheduler.settings import SchedulerSettings
from dagline.states import RunState, TIState


@dataclasses.dataclass(frozen=True)
class TaskView:
    """A task instance of the test run as the caller sees it after a loop."""

    task_id: str
    state: str
    try_number: int
    max_tries: int
    pool: str
    start_date: dt.datetime | None
    end_date: dt.datetime | None
    next_retry_at: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The run's state when the driver stopped: `success` or `failed`, or `running` if it stopped
    because nothing could move the run any more (`waiting` then lists the unfinished tasks)."""

    state: str
    tasks: list[TaskView]

    @property
    def waiting(self) -> list[TaskView]:
        return [t for t in self.tasks if t.state not in TIState.FINISHED]


def look(db: Database, run_pk: int) -> tuple[str, list[TaskView]]:
    """The run's state and its task instances, in id order (the DAG's task order)."""
    with db.begin() as conn:
        state = conn.execute(select(dag_run_t.c.state).where(dag_run_t.c.id == run_pk)).scalar_one()
        tis = [TaskView(r.task_id, r.state, r.try_number, r.max_tries, r.pool, r.start_date, r.end_date,
                        r.next_retry_at)
               for r in conn.execute(select(ti_t).where(ti_t.c.dag_run_id == run_pk).order_by(ti_t.c.id))]
    return state, tis


def drive_test_run(
    db: Database, executor: Executor, run_pk: int, *, clock: Clock, settings: SchedulerSettings | None = None,
    wait_for_time: bool = True, on_progress: Callable[[str, list[TaskView]], None] | None = None,
) -> Outcome:
    """Run the scheduler loop on test run `run_pk` until it finishes or nothing can move it.
    `wait_for_time`: whether a retry delay is waited out (False under a frozen clock)."""
    sched = Scheduler(db, executor, clock=clock, settings=settings, test_run_id=run_pk)
    status: dict = {"state": None, "tasks": [], "stuck": False}

    def on_loop(stats) -> None:
        state, tasks = look(db, run_pk)
        status.update(state=state, tasks=tasks)
        if on_progress is not None:
            on_progress(state, tasks)
        if state != RunState.RUNNING or stats.work or executor.has_work():
            return
        now = clock.now()
        retry_later = any(t.state == TIState.UP_FOR_RETRY and t.next_retry_at is not None and t.next_retry_at > now
                          for t in tasks)
        status["stuck"] = not (wait_for_time and retry_later)

    sched.run(should_stop=lambda: status["state"] != RunState.RUNNING or status["stuck"], on_loop=on_loop)
    state, tasks = look(db, run_pk)
    if on_progress is not None:
        on_progress(state, tasks)
    return Outcome(state, tasks)
