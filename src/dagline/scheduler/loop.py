"""One scheduler replica: the loop that runs the phases in order, each in its own short transaction.

    create runs -> start queued runs -> examine running runs -> critical section -> launch
    -> executor reports (+ mini-scheduler) -> housekeeping on intervals

`run(until_idle=True)` returns once a loop did nothing and the executor has nothing in flight: every
run is finished or waiting for time to pass (a retry delay, a future logical date) or for a limit.
The clock is injected: with a frozen clock the loop's decisions are fully predictable.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from dagline.clock import Clock, SystemClock
from dagline.dagstore import DagCache
from dagline.db.claims import lock_running_runs, lock_runs_by_id
from dagline.db.engine import Database
from dagline.executors.base import Executor
from dagline.scheduler import housekeeping
from dagline.scheduler.adoption import adopt_orphans
from dagline.scheduler.create_runs import create_scheduled_runs
from dagline.scheduler.critical_section import queue_task_instances
from dagline.scheduler.examine import examine_runs
from dagline.scheduler.executor_events import apply_reports, fail_unlaunchable
from dagline.scheduler.guard import SchedulerLock
from dagline.scheduler.launches import build_launches
from dagline.scheduler.settings import SchedulerSettings
from dagline.scheduler.start_runs import start_queued_runs

log = logging.getLogger(__name__)


@dataclasses.dataclass
class LoopStats:
    runs_created: int = 0
    runs_started: int = 0
    tis_decided: int = 0
    runs_finished: int = 0
    tis_queued: int = 0
    reports: int = 0

    @property
    def work(self) -> int:
        return sum(dataclasses.astuple(self))

    def summary(self) -> str:
        parts = [f"{value} {field.name.replace('_', ' ')}" for field, value in
                 zip(dataclasses.fields(self), dataclasses.astuple(self), strict=True) if value]
        return ", ".join(parts)


class Scheduler:
    """A replica. `backfill_id` restricts it to one backfill's runs (`dagline backfill run`), in which
    case it creates no scheduled runs: a scheduler service does that."""

    def __init__(
        self, db: Database, executor: Executor, *, clock: Clock | None = None,
        settings: SchedulerSettings | None = None, backfill_id: int | None = None,
    ):
        self.db = db
        self.executor = executor
        self.clock = clock or SystemClock()
        self.settings = settings or SchedulerSettings()
        self.backfill_id = backfill_id
        self.dags = DagCache()
        self.job_id: int | None = None
        self.who = "scheduler"
        self._lock = SchedulerLock(db)
        self._stop_requested = False
        self._last_heartbeat = 0.0
        self._last_housekeeping = 0.0

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> None:
        self._lock.acquire()
        with self.db.begin() as conn:
            self.job_id = housekeeping.register_job(conn, executor=self.executor.name, now=self.clock.now())
        self.who = f"scheduler:{self.job_id}"
        self.executor.start()
        if self.db.is_sqlite:  # the file lock proves every earlier scheduler is gone
            adopt_orphans(self.db, self.executor, job_id=self.job_id, dags=self.dags, now=self.clock.now(),
                          who=self.who)
        scope = f", backfill {self.backfill_id} only" if self.backfill_id is not None else ""
        log.info("scheduler %s started: %s executor, parallelism %s%s", self.job_id, self.executor.name,
                 self.executor.parallelism, scope)

    def stop(self) -> None:
        try:
            self.executor.end()
            if self.job_id is not None:
                with self.db.begin() as conn:
                    housekeeping.end_job(conn, self.job_id, self.clock.now())
                log.info("scheduler %s stopped", self.job_id)
        finally:
            self._lock.release()

    def request_stop(self) -> None:
        """Finish the current loop, then stop (SIGTERM)."""
        self._stop_requested = True

    def run(self, *, until_idle: bool = False, should_stop: Callable[[], bool] | None = None,
            on_loop: Callable[[LoopStats], None] | None = None) -> None:
        self.start()
        try:
            while not self._stop_requested:
                stats = self.iterate()
                if stats.work:
                    log.info("%s", stats.summary())
                if on_loop is not None:
                    on_loop(stats)
                if should_stop is not None and should_stop():
                    break
                if stats.work == 0:
                    if until_idle and not self.executor.has_work():
                        break
                    time.sleep(self.settings.poll_interval_s)
        finally:
            self.stop()

    # -- one loop ----------------------------------------------------------------------------------

    def iterate(self) -> LoopStats:
        stats = LoopStats()
        now = self.clock.now()
        s = self.settings
        if self.backfill_id is None:
            with self.db.begin() as conn:
                stats.runs_created = create_scheduled_runs(
                    conn, now=now, dags=self.dags, who=self.who, limit=s.dags_per_loop, per_dag=s.runs_created_per_dag)
        with self.db.begin() as conn:
            stats.runs_started = start_queued_runs(
                conn, now=now, dags=self.dags, who=self.who, limit=s.dags_per_loop, backfill_id=self.backfill_id)
        with self.db.begin() as conn:
            runs = lock_running_runs(conn, s.runs_per_loop, self.backfill_id)
            result = examine_runs(conn, runs, now=now, dags=self.dags, who=self.who)
            stats.tis_decided += result.tis_changed
            stats.runs_finished += result.runs_finished
        self._queue_and_launch(stats, now)
        self._apply_reports(stats)
        if stats.runs_finished:
            with self.db.begin() as conn:
                housekeeping.finish_backfills(conn, now=now, who=self.who)
        self._housekeeping()
        return stats

    def _queue_and_launch(self, stats: LoopStats, now) -> None:
        with self.db.begin() as conn:
            queued = queue_task_instances(
                conn, now=now, dags=self.dags, who=self.who, job_id=self.job_id,
                executor_slots=self.executor.free_slots(), limit=self.settings.tis_per_loop,
                backfill_id=self.backfill_id)
            launches, broken = build_launches(conn, queued, dags=self.dags)
            if broken:
                affected = fail_unlaunchable(conn, broken, at=now, dags=self.dags, who=self.who)
                self._mini_schedule(conn, affected, stats, now)
        stats.tis_queued = len(queued)
        if launches:
            self.executor.launch(launches)

    def _apply_reports(self, stats: LoopStats) -> None:
        reports = self.executor.sync()
        if not reports:
            return
        stats.reports = len(reports)
        now = self.clock.now()
        with self.db.begin() as conn:
            affected = apply_reports(conn, reports, dags=self.dags, who=self.who)
            self._mini_schedule(conn, affected, stats, now)

    def _mini_schedule(self, conn, run_ids, stats: LoopStats, now) -> None:
        """Decide the downstream tasks of runs whose TIs just ended, in the same transaction."""
        if run_ids:
            result = examine_runs(conn, lock_runs_by_id(conn, sorted(run_ids)), now=now, dags=self.dags, who=self.who)
            stats.tis_decided += result.tis_changed
            stats.runs_finished += result.runs_finished

    def _housekeeping(self) -> None:
        tick = time.monotonic()
        now = self.clock.now()
        if tick - self._last_heartbeat >= self.settings.heartbeat_interval_s and self.job_id is not None:
            self._last_heartbeat = tick
            with self.db.begin() as conn:
                housekeeping.heartbeat(conn, self.job_id, now)
        if tick - self._last_housekeeping >= self.settings.housekeeping_interval_s:
            self._last_housekeeping = tick
            with self.db.begin() as conn:
                timed_out = housekeeping.time_out_tasks(conn, now=now, dags=self.dags, who=self.who)
                housekeeping.finish_backfills(conn, now=now, who=self.who)
            for key in timed_out:
                self.executor.cancel(key)
