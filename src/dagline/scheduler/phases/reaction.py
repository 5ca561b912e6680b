"""The reaction step (loop step 0): react to new signals (`signal_reactions`), and queue and launch
at once the task instances that made runnable.

They are queued in the reaction's own transaction (the critical section with `if_free`: one commit,
not two) and launched at once, not after the rest of the pass. If a peer holds the pools then, the
critical section runs again right after the reaction's commit, as its own transaction. The pass's own
critical section still follows, so nothing is skipped. The reaction wakes no peer; if this replica
queues nothing (no free slot, a peer in the critical section, stopping), it wakes them now.
"""

from __future__ import annotations

from dagline.db.notify import announce
from dagline.scheduler.phases.context import Context
from dagline.scheduler.phases.hops import Hops
from dagline.scheduler.phases.stats import LoopStats
from dagline.scheduler.signal_reactions import react_to_signals


def react(ctx: Context, hops: Hops, stats: LoopStats, now) -> None:
    """React to new signals, counting into `stats`; queue and launch what that made runnable."""
    queue_now = not ctx.stop_requested

    def reaction(conn):
        reacted = react_to_signals(conn, now=now, dags=ctx.dags, who=ctx.who, limit=ctx.settings.signals_per_loop,
                                   exports=ctx.settings.signal_exports)
        ctx.left.own_tis.update(reacted.scheduled)
        return reacted, hops.queue(conn, now, if_free=True) if reacted.tis_changed and queue_now else None

    with ctx.phase("signals", "reacting to signals"):
        reacted, done = ctx.transact(reaction)
    stats.signals_handled += reacted.signals
    stats.runs_created += reacted.runs_created
    ctx.left.created_runs = ctx.left.created_runs or reacted.runs_created > 0
    stats.tis_decided += reacted.tis_changed
    stats.runs_finished += reacted.runs_finished
    if reacted.tis_changed:
        if done is not None:  # queued (or found nothing to queue) in the reaction's own transaction
            queued = hops.launch_queued(stats, *done, now)
        else:
            queued = 0 if ctx.stop_requested else hops.queue_and_launch(stats, now)
        if not queued:  # the reaction woke no one (`hold_announcements`): a peer may queue them
            ctx.tx.run(lambda conn: announce(conn, ctx.who, urgent=True), what="waking the other replicas")
