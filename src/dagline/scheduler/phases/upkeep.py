"""The phases on intervals, after the hops: missed deadlines (every `deadline_check_interval_s`:
`deadlines`) and housekeeping (every `housekeeping_interval_s`: time out tasks past
`executionTimeout`, finish backfills whose runs ended elsewhere, declare silent peers dead, adopt
orphaned tries, reconcile this replica's own tries with the database: `replica.adoption`)."""

from __future__ import annotations

import logging
import threading
import time

from dagline import metrics
from dagline.db.replicas import database_now
from dagline.scheduler import housekeeping
from dagline.scheduler.deadlines import record_missed_deadlines
from dagline.scheduler.phases.context import Context
from dagline.scheduler.phases.hops import Hops
from dagline.scheduler.phases.stats import LoopStats
from dagline.scheduler.replica.adoption import Settled, declare_stale_replicas_dead
from dagline.store.retention import Cleaned, clean_history, clean_turn
from dagline.store.tokens import delete_ended_try_tokens
from dagline.times import parse_duration

log = logging.getLogger(__name__)


class Upkeep:
    def __init__(self, ctx: Context, hops: Hops, *, deadline_check_interval_s: float):
        self.ctx = ctx
        self.hops = hops
        self.deadline_check_interval_s = deadline_check_interval_s
        self.last_deadline_check = float("-inf")  # time.monotonic()
        self.last_housekeeping = float("-inf")
        self.last_clean = float("-inf")
        self.cleaner: threading.Thread | None = None  # the periodic clean, off the loop's thread

    def check_deadlines(self, stats: LoopStats, now) -> None:
        if time.monotonic() - self.last_deadline_check < self.deadline_check_interval_s:
            return
        ctx = self.ctx
        with ctx.phase("deadlines", "recording missed deadlines"):
            misses = ctx.transact(lambda conn: record_missed_deadlines(conn, now=now, who=ctx.who))
        self.last_deadline_check = time.monotonic()
        if misses.runs or misses.tasks:
            metrics.DEADLINE_MISSES.labels(kind="run").inc(misses.runs)
            metrics.DEADLINE_MISSES.labels(kind="task").inc(misses.tasks)
            log.warning("deadlines missed: %d run(s), %d task instance(s)", misses.runs, misses.tasks)
        stats.deadlines_missed += misses.runs + misses.tasks

    def housekeeping(self, stats: LoopStats, now) -> None:
        if time.monotonic() - self.last_housekeeping < self.ctx.settings.housekeeping_interval_s:
            return
        with self.ctx.phase("housekeeping", "timing out tasks"):
            self._keep_house(stats, now)
        self.last_housekeeping = time.monotonic()

    def _keep_house(self, stats: LoopStats, now) -> None:
        ctx = self.ctx
        if ctx.test_run_id is not None:
            for key in ctx.transact(lambda conn: housekeeping.time_out_tasks(
                    conn, now=now, dags=ctx.dags, who=ctx.who, test_run_id=ctx.test_run_id)):
                ctx.executor.cancel(key)
            return

        def time_out_and_finish(conn):
            timed_out = housekeeping.time_out_tasks(conn, now=now, dags=ctx.dags, who=ctx.who)
            # Runs finished elsewhere (a cancelled backfill, a deactivated DAG, another replica) end theirs too.
            housekeeping.finish_backfills(conn, now=now, who=ctx.who)
            delete_ended_try_tokens(conn)  # they authenticate no more; keep the table small
            return timed_out

        self._start_clean(now)
        timed_out = ctx.transact(time_out_and_finish)
        metrics.TIMEOUTS.inc(len(timed_out))
        for key in timed_out:
            ctx.executor.cancel(key)  # a no-op unless this replica runs it
        if not ctx.db.is_sqlite:
            self._declare_silent_peers_dead()
        ctx.step = "adopting orphaned task instances"
        self.take_over(ctx.adopter.adopt_orphans(now), stats)
        ctx.step = "reconciling own task instances"
        own, cancel = ctx.adopter.reconcile_own_tries(ctx.in_flight, now)
        for key in cancel:
            ctx.executor.cancel(key)
        self.take_over(own, stats)

    def _start_clean(self, now) -> None:
        """Every `clean_interval_s`, when `clean_older_than` is set, clean history in a thread of its
        own (its batches are short transactions; the loop goes on meanwhile)."""
        settings = self.ctx.settings
        if not settings.clean_older_than or self.ctx.backfill_id is not None:
            return
        if time.monotonic() - self.last_clean < settings.clean_interval_s:
            return
        if self.cleaner is not None and self.cleaner.is_alive():
            return
        self.last_clean = time.monotonic()
        self.cleaner = threading.Thread(target=self.clean, args=(now,), name="dagline-clean", daemon=True)
        self.cleaner.start()

    def clean(self, now) -> Cleaned | None:
        """One periodic clean at `now` if no other replica is cleaning (None: one is); errors are logged."""
        settings = self.ctx.settings
        try:
            with clean_turn(self.ctx.db) as mine:
                if not mine:
                    return None
                cleaned = clean_history(self.ctx.db, before=now - parse_duration(settings.clean_older_than),
                                        now=now, keep_last=settings.clean_keep_last, who=self.ctx.who)
        except Exception:  # noqa: BLE001 - a failed clean is retried at the next interval; the loop goes on
            log.exception("cleaning history failed")
            return None
        if cleaned.runs or cleaned.signals:
            log.info("history cleaned: %s", cleaned.describe())
        return cleaned

    def take_over(self, settled: Settled, stats: LoopStats) -> None:
        """Track the tries the executor now follows; launch the queued ones that never started."""
        self.ctx.in_flight.add(settled.followed)
        stats.tis_adopted += settled.count
        metrics.ADOPTED.inc(len(settled.followed) + len(settled.to_launch))
        metrics.ZOMBIES.inc(settled.zombies)
        self.hops.launch(settled.to_launch, record=True)

    def _declare_silent_peers_dead(self) -> None:
        ctx = self.ctx
        ctx.step = "declaring silent replicas dead"

        def declare(conn):
            now = database_now(conn)
            if not ctx.liveness.may_judge_peers(now):
                return []
            return declare_stale_replicas_dead(conn, replica_id=ctx.replica_id,
                                               timeout_s=ctx.settings.replica_timeout_s, who=ctx.who, now=now)

        metrics.REPLICAS_DECLARED_DEAD.inc(len(ctx.transact(declare)))
