"""Task instances left behind by schedulers that are gone: adopt them, or settle them.

A scheduler that stops (Ctrl-C, kill -9, a reboot) may leave task instances `queued` or `running`.
When a scheduler starts and knows every earlier one is gone (on SQLite its file lock proves it), it
hands those tries to its executor's `adopt`: a job still running is followed to its end, a finished
one reports the outcome its wrapper wrote down. What cannot be adopted is settled:
- a `queued` try that left no trace was never started: it is launched now, as the same try;
- a `running` try with no job behind it is a zombie: failed, or retried if it has tries left.
Several replicas on PostgreSQL need heartbeats to tell who is gone: that builds on this module.
"""

from __future__ import annotations

import datetime as dt
import logging

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from dagline.dagstore import DagCache
from dagline.db.engine import Database
from dagline.db.models import dag_run_t, scheduler_job_t, ti_t
from dagline.db.transitions import change_tis, record_events
from dagline.deps import TIState, next_state_after_failure
from dagline.executors.base import Executor
from dagline.scheduler.critical_section import QueuedTI
from dagline.scheduler.executor_events import fail_unlaunchable
from dagline.scheduler.launches import build_launches

log = logging.getLogger(__name__)


def mark_other_jobs_dead(conn: Connection, job_id: int, now: dt.datetime, who: str) -> list[int]:
    """Record that every other registered scheduler is gone (only true where this one is the only one)."""
    dead = list(conn.execute(
        update(scheduler_job_t).where(scheduler_job_t.c.id != job_id, scheduler_job_t.c.state == "running")
        .values(state="dead", ended_at=now).returning(scheduler_job_t.c.id)).scalars())
    record_events(conn, [{"at": now, "who": who, "entity": "scheduler", "detail": f"scheduler {i}",
                          "from_state": "running", "to_state": "dead"} for i in dead])
    return dead


def adopt_orphans(db: Database, executor: Executor, *, job_id: int, dags: DagCache, now: dt.datetime,
                  who: str) -> dict[str, int]:
    """Adopt or settle every queued or running TI not launched by `job_id`. Returns counts by outcome."""
    counts = {"adopted": 0, "relaunched": 0, "zombies": 0}
    with db.begin() as conn:
        mark_other_jobs_dead(conn, job_id, now, who)
        rows = conn.execute(
            select(ti_t.c.id, ti_t.c.dag_run_id, ti_t.c.dag_id, ti_t.c.task_id, ti_t.c.try_number, ti_t.c.state,
                   ti_t.c.max_tries, dag_run_t.c.dag_version_id)
            .join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
            .where(ti_t.c.state.in_(TIState.ACTIVE),
                   (ti_t.c.queued_by_job_id != job_id) | ti_t.c.queued_by_job_id.is_(None))
            .order_by(ti_t.c.id)
        ).all()
        if not rows:
            return counts
        orphans = [QueuedTI(r.id, r.dag_run_id, r.dag_id, r.task_id, r.try_number, r.dag_version_id) for r in rows]
        launches, broken = build_launches(conn, orphans, dags=dags)
        fail_unlaunchable(conn, broken, at=now, dags=dags, who=who)  # their templates no longer render
    by_id = {r.id: r for r in rows}
    left = {launch.ti_id for launch in executor.adopt(launches)}
    adopted = [launch.ti_id for launch in launches if launch.ti_id not in left]
    never_started = [launch for launch in launches if launch.ti_id in left and by_id[launch.ti_id].state == "queued"]
    zombies = [by_id[i] for i in left if by_id[i].state == "running"]
    with db.begin() as conn:
        if adopted or never_started:
            conn.execute(update(ti_t).where(ti_t.c.id.in_(adopted + [launch.ti_id for launch in never_started]))
                         .values(queued_by_job_id=job_id))
        for ti in zombies:
            to = next_state_after_failure(ti.try_number, ti.max_tries)
            values = {"end_date": now, "next_retry_at": now} if to == TIState.UP_FOR_RETRY else {"end_date": now}
            change_tis(conn, [ti.id], expected=TIState.RUNNING, to=to, at=now, who=who,
                       tries={ti.id: ti.try_number}, values=values,
                       detail="zombie: the scheduler that ran it stopped and no job was found")
    if never_started:
        executor.launch(never_started)
    counts.update(adopted=len(adopted), relaunched=len(never_started), zombies=len(zombies))
    if any(counts.values()):
        log.info("orphaned task instances: %(adopted)s adopted, %(relaunched)s launched again, "
                 "%(zombies)s zombies failed or retried", counts)
    return counts
