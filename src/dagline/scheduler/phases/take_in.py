"""Taking new runs in (loop step 2): start the queued runs that may start, and decide them at once.

Three callers: a full pass's start step (`start_runs`), an idle replica woken by new runs alone
(`new_runs`: the rest of a full pass waits for the next one), and the follow-up, in the transaction
storing the executor's reports (`start_and_decide`), so a run triggered meanwhile does not wait for a
whole chain. Which runs each starts follows the work-sharing rules (`replica.left_to_peer`,
`replica.lost_race`). On SQLite nothing announces new runs: each transaction storing reports looks
whether a run newer than the last start step saw exists (`look`, read as `work_waiting`).
"""

from __future__ import annotations

import datetime as dt

from dagline.scheduler.phases.context import Context
from dagline.scheduler.phases.mini_scheduler import MiniScheduler
from dagline.scheduler.phases.stats import LoopStats
from dagline.scheduler.replica.lost_race import queued_by as first_runs_queued_by
from dagline.scheduler.start_runs import newest_run, start_queued_runs


class TakeIn:
    def __init__(self, ctx: Context, mini: MiniScheduler):
        self.ctx = ctx
        self.mini = mini
        self.work_waiting = False  # SQLite: the last reports stored saw runs newer than the last start step
        self._newest_seen = 0  # SQLite: the newest run id when the last start step looked

    def start_runs(self, conn, now, *, queued_by: dt.datetime | None = None) -> list[int]:
        """Start the queued runs that may start (`start_queued_runs`), but those left to a peer at work
        (`LeftToPeer.runs_waited_since`); on SQLite, also remember the newest run this step has seen,
        unless it started as many runs as it may in one step: then more may be waiting, and the next
        look takes in again. With `queued_by`, only runs queued by then."""
        ctx = self.ctx
        newest = None if ctx.wakeup.listens else newest_run(conn)
        waited_since = ctx.left.runs_waited_since(now, leaving=ctx.leaving_runs_to_peers, queued_by=queued_by)
        started = start_queued_runs(conn, now=now, dags=ctx.dags, who=ctx.who, limit=ctx.settings.dags_per_loop,
                                    backfill_id=ctx.backfill_id, waited_since=waited_since)
        if newest is not None:
            self._newest_seen = -1 if len(started) >= ctx.settings.dags_per_loop else newest
        return started

    def start_and_decide(self, conn, mini: LoopStats, now, *, queued_by: dt.datetime | None = None) -> None:
        """Start the runs that may start (with `queued_by`, those queued by then) and decide them, in
        `conn`'s transaction, counting into `mini`."""
        self.work_waiting = False
        started = self.start_runs(conn, now, queued_by=queued_by)
        mini.runs_started += len(started)
        self.mini.decide(conn, started, mini, now)

    def look(self, conn) -> None:
        """SQLite, in a transaction storing reports: note whether a run newer than the last start step
        saw is waiting (for the follow-up, which takes it in)."""
        ctx = self.ctx
        self.work_waiting = not ctx.wakeup.listens and ctx.backfill_id is None and \
            ctx.test_run_id is None and newest_run(conn) != self._newest_seen

    def new_runs(self, stats: LoopStats, now) -> None:
        """For a replica woken by new runs alone: start the runs that may start and decide them (their
        first tasks are then queued by the next critical section), as a full pass would. Only the runs
        queued by `now` (`replica.lost_race`); a replica that found nothing to take lost the race."""
        ctx = self.ctx
        if ctx.test_run_id is not None:  # a test run's process has nothing else to take in
            self.work_waiting = False
            return
        queued_by = first_runs_queued_by(now, listens=ctx.wakeup.listens)

        def start(conn):
            mini = LoopStats()
            self.start_and_decide(conn, mini, now, queued_by=queued_by)
            return mini

        with ctx.phase("start_runs", "starting runs"):
            mini = ctx.transact(start)
        stats.add_decisions(mini)
        if not mini.runs_started:
            ctx.lost_race.lost()
