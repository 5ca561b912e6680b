"""The mini-scheduler: decide the downstream tasks of runs whose task instances just ended, in the
transaction that recorded the ends (`hops`) or started the runs (`take_in`), so a chain does not wait
a loop per hop.

Runs a peer holds (it is examining them) are skipped, and noted (`skipped`): the follow-up tries them
again once, in a transaction of its own (`retry_skipped`); a run skipped twice is left to the next
examination. What it makes runnable is this replica's to queue, save the next hop of a chain while it
leaves new work to a peer: that chain then goes on with the peer's (`replica.left_to_peer`).
"""

from __future__ import annotations

from dagline.db.claims import lock_runs_by_id
from dagline.db.observe import at_commit
from dagline.scheduler.examine import examine_runs
from dagline.scheduler.phases.context import Context
from dagline.scheduler.phases.stats import LoopStats


class MiniScheduler:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.skipped: set[int] = set()  # runs it could not lock (a peer held them): tried again once

    def decide(self, conn, run_ids, stats: LoopStats, now, *, hop: bool = False) -> None:
        """Decide runs `run_ids` in `conn`'s transaction, counting into `stats`; `hop`: their task
        instances just ended (the next hop of a chain), rather than the runs just started."""
        if not run_ids:
            return
        ctx = self.ctx
        locked = lock_runs_by_id(conn, sorted(run_ids))
        result = examine_runs(conn, locked, now=now, dags=ctx.dags, who=ctx.who)
        ctx.left.made_runnable(result.scheduled, hop=hop, leaving=ctx.leaving_runs_to_peers)
        stats.tis_decided += result.tis_changed
        stats.runs_finished += result.runs_finished
        skipped = set(run_ids) - {run.id for run in locked}
        if skipped:
            at_commit(conn, lambda: self.skipped.update(skipped))

    def retry_skipped(self, stats: LoopStats) -> int:
        """Decide the runs a peer held, now that it is done with them; how many task instances it decided."""
        run_ids, self.skipped = self.skipped, set()
        mini = LoopStats()
        ctx = self.ctx
        with ctx.phase("executor_sync", "deciding runs a peer held"):
            ctx.transact(lambda conn: self.decide(conn, run_ids, mini, ctx.clock.now(), hop=True))
        self.skipped -= run_ids  # skipped twice: left to the next examination
        stats.add_decisions(mini)
        return mini.tis_decided
