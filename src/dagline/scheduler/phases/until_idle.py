"""For `run(until_idle=True)`, once a pass did nothing: whether callbacks are still pending, and how
long to wait for the earliest retry of a task instance waiting to be retried (pending work, so
`until_idle` waits for it) when nothing is runnable and nothing is running."""

from __future__ import annotations

import logging

from dagline.scheduler.phases.context import Context
from dagline.store.read_models import pending_retries

log = logging.getLogger(__name__)


def callbacks_pending(ctx: Context) -> bool:
    """Deliveries in flight, or due rows a forced claim starts now."""
    if ctx.deliveries is None:  # a test run's process delivers none
        return False
    return ctx.deliveries.busy() or ctx.deliveries.pump(ctx.clock.now(), force=True) > 0


def retry_wait(ctx: Context) -> tuple[float | None, object | None]:
    """(seconds to wait, the retry waited for: dag_id, run_id, task_id...), or (None, it) when there is
    none to wait for: none at all, or the clock is frozen (`--now`: its time never comes by waiting)."""
    ctx.step = "looking for retries"
    waiting = ctx.transact(lambda conn: pending_retries(conn, ctx.backfill_id, limit=1))
    retry = waiting[0] if waiting else None
    if retry is None:
        return None, None
    now = ctx.clock.now()
    at = retry.next_retry_at or now
    if getattr(ctx.clock, "frozen", False):
        if at <= now:
            return None, retry  # due, yet nothing was runnable (a limit holds it): nothing more happens
        log.info("%s.%s waits for its retry at %s; the clock is frozen at %s, so it stays waiting",
                 retry.dag_id, retry.task_id, at.isoformat(), now.isoformat())
        return None, retry
    wait_s = min(max((at - now).total_seconds(), 0.0) + 0.01, ctx.settings.retry_wait_max_s)
    log.info("%s.%s (run %s) retries at %s: waiting %.1fs", retry.dag_id, retry.task_id, retry.run_id,
             at.isoformat(), wait_s)
    return wait_s, retry
