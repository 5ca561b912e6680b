"""One hop of a chain: the critical section (loop step 4), the launches, and storing the executor's
reports (step 5) with the mini-scheduler; and stopping the tries asked to stop.

The critical section of a replica leaving new work to a peer leaves it the task instances
`replica.left_to_peer` says. Launches happen only after the queueing transaction committed. Reports
whose transaction fails are kept and stored next time (compare-and-set makes storing one twice
harmless), so none is lost. The transaction storing reports can also take new runs in (`take_in`) and
queue what they made runnable: one commit per hop of a chain, not three. What each try was launched
with (`launches.launch_records`) is stored by the next transaction of the hop (the one failing the tries
that could not launch, or the one storing reports), not by a commit of its own.
"""

from __future__ import annotations

import functools
import logging

from dagline import metrics
from dagline.db.claims import PoolsBusy
from dagline.db.observe import at_commit
from dagline.executors.base import TaskLaunch
from dagline.scheduler.critical_section import queue_task_instances
from dagline.scheduler.executor_events import apply_reports, fail_unlaunchable
from dagline.scheduler.launches import gather_launches, launch_records, render_launches
from dagline.scheduler.phases.context import Context
from dagline.scheduler.phases.mini_scheduler import MiniScheduler
from dagline.scheduler.phases.stats import LoopStats
from dagline.scheduler.phases.take_in import TakeIn
from dagline.scheduler.stops import tries_to_stop
from dagline.store.launches import record_launches

log = logging.getLogger(__name__)


class Hops:
    def __init__(self, ctx: Context, mini: MiniScheduler, take_in: TakeIn):
        self.ctx = ctx
        self.mini = mini
        self.take_in = take_in
        self.pending_reports: list = []  # read from the executor, not yet stored
        self.pending_launches: list = []  # launch records (`try_launch` rows) not yet stored
        name = ctx.executor.name
        self._launch_failures = metrics.EXECUTOR_LAUNCH_FAILURES.labels(executor=name)
        self._launched = metrics.EXECUTOR_LAUNCHES.labels(executor=name)

    def queue(self, conn, now, *, if_free: bool = False):
        """The critical section in `conn`'s transaction: (queued, their launches), or None when `if_free`
        and a peer holds the pools (see `critical_section`). While new work is left to a peer, the task
        instances `LeftToPeer.task_instances` says are left to it; if the peer leaves them waiting, this
        replica's idle wait comes back for them (`LeftToPeer.tasks_left`)."""
        ctx = self.ctx
        leave = ctx.left.task_instances(now) if ctx.leaving_runs_to_peers() else None
        queued = queue_task_instances(
            conn, now=now, dags=ctx.dags, who=ctx.who, replica_id=ctx.replica_id,
            executor_slots=ctx.executor.free_slots(), limit=ctx.settings.tis_per_loop,
            backfill_id=ctx.backfill_id, test_run_id=ctx.test_run_id, if_free=if_free, leave=leave)
        if queued is None:
            return None
        at_commit(conn, ctx.left.own_tis.clear)
        return queued, gather_launches(conn, queued, dags=ctx.dags, now=now, api_url=ctx.api_url)

    def queue_and_launch(self, stats: LoopStats, now) -> int | None:
        """The critical section and the launches; returns how many TIs it queued, None if a peer held
        the pools (nothing queued)."""
        ctx = self.ctx
        try:
            with ctx.phase("critical_section", "queueing task instances"):
                queued, pending = ctx.transact(lambda conn: self.queue(conn, now))
        except PoolsBusy:
            metrics.CRITICAL_SECTION_BUSY.inc()
            log.debug("another replica is in the critical section; queueing nothing this round")
            return None
        return self.launch_queued(stats, queued, pending, now)

    def launch_queued(self, stats: LoopStats, queued, pending, now) -> int:
        """Render and launch what a committed critical section queued; returns how many TIs it queued."""
        ctx = self.ctx
        stats.tis_queued += len(queued)
        ctx.step = "rendering templates"  # outside any transaction: a template may take its whole budget
        rendered = render_launches(pending, ctx.renderer)
        self.pending_launches += launch_records(rendered.launches, rendered.broken, at=ctx.clock.now())
        if rendered.broken:
            ctx.step = "failing tries whose templates do not render"

            def fail(conn):
                mini = LoopStats()
                self._record_launches(conn)
                affected = fail_unlaunchable(conn, rendered.broken, at=now, dags=ctx.dags, who=ctx.who)
                self.mini.decide(conn, affected, mini, now)
                at_commit(conn, functools.partial(self._launch_failures.inc, len(rendered.broken)))
                return mini

            stats.add_decisions(ctx.transact(fail))
        if rendered.left:
            log.info("stopping: %d queued tries left unrendered for the next replica to launch", len(rendered.left))
        self.launch(rendered.launches)  # only now: the queueing transaction has committed
        return len(queued)

    def _record_launches(self, conn) -> None:
        """Store the pending launch records in `conn`'s transaction (kept for the next one if it fails)."""
        records = list(self.pending_launches)
        if records:
            record_launches(conn, records)
            at_commit(conn, lambda: self._recorded(records))

    def _recorded(self, records: list) -> None:
        done = {id(r) for r in records}
        self.pending_launches = [r for r in self.pending_launches if id(r) not in done]

    def launch(self, launches: list[TaskLaunch], *, record: bool = False) -> None:
        """Hand `launches` to the executor; `record`: their launch records are not pending yet (adopted
        tries rendered elsewhere than `launch_queued`)."""
        if not launches:
            return
        ctx = self.ctx
        if record:
            self.pending_launches += launch_records(launches, [], at=ctx.clock.now())
        with ctx.phase("launch", "launching"):
            if ctx.replica_id is not None:
                ctx.liveness.check_before_launch()
            ctx.executor.launch(launches)
            ctx.in_flight.add(launches)
        self._launched.inc(len(launches))

    def store_reports(self, stats: LoopStats, *, queue: bool = False,
                      take_in: bool = False) -> tuple[int, int | None]:
        """Store the executor's reports. With `take_in`, the same transaction starts the runs that may
        start and decides them (`TakeIn.start_and_decide`), reports or not. With `queue`, when that made
        task instances runnable, it runs the critical section too (`if_free`: a peer holding the pools
        leaves it to a critical section of its own) and what it queued is launched once it has
        committed. Returns (how many task instances were decided, how many were queued with the
        reports: None when none was tried or a peer held the pools)."""
        ctx = self.ctx
        self.pending_reports += ctx.executor.sync()
        reports = self.pending_reports
        take_in = take_in and ctx.test_run_id is None  # a test run's process has nothing else to take in
        if not reports and not take_in and not self.pending_launches:
            return 0, None
        now = ctx.clock.now()

        def store(conn):
            mini = LoopStats()
            self._record_launches(conn)
            if reports:
                affected = apply_reports(conn, reports, dags=ctx.dags, who=ctx.who)
                self.mini.decide(conn, affected, mini, now, hop=True)
            if take_in:
                self.take_in.start_and_decide(conn, mini, now)
            self.take_in.look(conn)  # nothing announces new work on SQLite: look, for the follow-up
            queue_now = queue and mini.tis_decided and not ctx.stop_requested
            return mini, self.queue(conn, now, if_free=True) if queue_now else None

        mini, done = ctx.transact(store)
        self.pending_reports = []
        ctx.in_flight.stored(reports)
        for report in reports:
            metrics.EXECUTOR_REPORTS.labels(executor=ctx.executor.name, state=report.state).inc()
        stats.reports += len(reports)
        stats.add_decisions(mini)
        return mini.tis_decided, None if done is None else self.launch_queued(stats, *done, now)

    def stop_tries(self) -> int:
        """Stop the jobs of this replica's tries that were asked to stop (once per try); how many."""
        ctx = self.ctx
        mine = ctx.in_flight.tries()
        if not mine:
            return 0
        stopped = 0
        with ctx.phase("stop_tries", "stopping tries"):
            for ti_try in ctx.transact(lambda conn: tries_to_stop(conn, mine)):
                key = ctx.in_flight.to_cancel(ti_try)
                if key is not None:
                    log.info("stopping %s/%s/%s try %s on request", key.dag_id, key.run_id, key.task_id,
                             key.try_number)
                    ctx.executor.cancel(key)
                    stopped += 1
        return stopped
