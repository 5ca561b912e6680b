"""Driving one test run to its end in the foreground (`dagline dags test`).

`runs.create_test_run` makes the run; a `Scheduler` scoped to it (`test_run_id`) then runs the
loop's own steps on that run alone -- examine, critical section (pools and task limits hold, as for
any run: a task waits for slots other runs hold), launch, executor reports with the mini-scheduler,
execution timeouts -- until the run finishes. It also stops when nothing can ever move the run: no
try is queued or running, and every task that could run waits for a pool that does not exist or has
fewer slots than it needs, or for a retry time that a frozen clock (`--now`) never reaches; the
outcome then says why (`blocked`). After each loop `on_progress` sees the run's state and its task
instances, so a caller can print state changes and stream logs.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable

from dagline.clock import Clock
from dagline.db.engine import Database
from dagline.domain.admission import how_to_create
from dagline.domain.states import RunState, TIState
from dagline.executors.base import Executor
from dagline.scheduler.loop import Scheduler
from dagline.scheduler.settings import SchedulerSettings
from dagline.store.facts import pool_sizes
from dagline.store.runs import run_state, run_task_instances


@dataclasses.dataclass(frozen=True)
class TaskView:
    """A task instance of the test run as the caller sees it after a loop."""

    task_id: str
    state: str
    try_number: int
    max_tries: int
    pool: str
    pool_slots: int
    start_date: dt.datetime | None
    end_date: dt.datetime | None
    next_retry_at: dt.datetime | None


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The run's state when the driver stopped: `success` or `failed`, or `running` if it stopped
    because nothing can ever move the run (`blocked` then says why, task by task)."""

    state: str
    tasks: list[TaskView]
    blocked: list[str] = dataclasses.field(default_factory=list)


def look(db: Database, run_pk: int) -> tuple[str, list[TaskView]]:
    """The run's state and its task instances, in id order (the DAG's task order)."""
    with db.begin() as conn:
        state = run_state(conn, run_pk)
        tis = [TaskView(r.task_id, r.state, r.try_number, r.max_tries, r.pool, r.pool_slots, r.start_date,
                        r.end_date, r.next_retry_at)
               for r in run_task_instances(conn, run_pk)]
    return state, tis


def blocked_for_good(tasks: list[TaskView], pools: dict[str, int], *, now: dt.datetime,
                     wait_for_time: bool) -> list[str]:
    """Why nothing can ever move the run, task by task; empty while something still can: a try is
    queued or running, a task may get slots (others may free them, and the critical section may just
    have been busy in another replica), or a retry's time will come. Tasks in `none` wait for their
    upstream tasks and are judged through them."""
    reasons = []
    for t in tasks:
        if t.state in (TIState.QUEUED, TIState.RUNNING):
            return []
        if t.state == TIState.SCHEDULED:
            if t.pool not in pools:
                missing = t.pool.rpartition("/")[2]
                reasons.append(f"{t.task_id}: pool {missing!r} does not exist ({how_to_create(t.pool)})")
            elif pools[t.pool] < t.pool_slots:
                reasons.append(f"{t.task_id}: needs {t.pool_slots} slots of pool {t.pool!r}, which has "
                               f"{pools[t.pool]}")
            else:
                return []
        elif t.state == TIState.UP_FOR_RETRY:
            if wait_for_time or t.next_retry_at is None or t.next_retry_at <= now:
                return []
            reasons.append(f"{t.task_id}: its retry is due at {t.next_retry_at.isoformat()}, after the frozen "
                           f"--now {now.isoformat()}")
    return reasons or [f"{t.task_id}: {t.state}" for t in tasks if t.state not in TIState.FINISHED]


def _pools(db: Database) -> dict[str, int]:
    with db.begin() as conn:
        return pool_sizes(conn)


def drive_test_run(
    db: Database, executor: Executor, run_pk: int, *, clock: Clock, settings: SchedulerSettings | None = None,
    wait_for_time: bool = True, on_progress: Callable[[str, list[TaskView]], None] | None = None,
) -> Outcome:
    """Run the scheduler loop on test run `run_pk` until it finishes or nothing can move it.
    `wait_for_time`: whether a retry delay is waited out (False under a frozen clock)."""
    sched = Scheduler(db, executor, clock=clock, settings=settings, test_run_id=run_pk)
    status: dict = {"state": None, "blocked": []}

    def on_loop(stats) -> None:
        state, tasks = look(db, run_pk)
        status["state"] = state
        if on_progress is not None:
            on_progress(state, tasks)
        if state == RunState.RUNNING and not stats.work and not executor.has_work():
            status["blocked"] = blocked_for_good(tasks, _pools(db), now=clock.now(), wait_for_time=wait_for_time)

    sched.run(should_stop=lambda: status["state"] != RunState.RUNNING or bool(status["blocked"]), on_loop=on_loop)
    state, tasks = look(db, run_pk)
    if on_progress is not None:
        on_progress(state, tasks)
    return Outcome(state, tasks, status["blocked"] if state == RunState.RUNNING else [])
