"""The one way tests wait for something another process or thread does: poll it against a deadline.

Tests never sleep to wait for the scheduler (its time is injected); this is for what really happens
elsewhere -- a subprocess taking a lock, a job's process starting, a kopf thread writing a status.
On timeout the failure names what was awaited and the last value seen, so a red test says why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T],
    what: str | None = None,
    *,
    timeout: float = 30.0,
    until: Callable[[T], Any] | None = None,
    interval: float = 0.05,
    tolerate: tuple[type[BaseException], ...] = (),
) -> T:
    """Call `probe` until its value is truthy (or `until(value)` is), and return that value.

    `tolerate`: exceptions the probe may raise meanwhile (kept as the last value, reported on timeout).
    Raises AssertionError at the deadline, naming `what` (default: the probe's name) and the last value.
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
        except tolerate as exc:
            last = exc
        else:
            if until(last) if until is not None else last:
                return last
        if time.monotonic() >= deadline:
            label = what or getattr(probe, "__name__", "condition")
            raise AssertionError(f"{label} not met within {timeout:g} s; last value: {last!r}")
        time.sleep(interval)


def run_until_done(db, executor, clock, dag_id, *, timeout=30.0, api_url=None):
    """Drive a scheduler replica until the DAG's only run is finished; the clock jumps over retry delays.
    Between loops that found nothing to do it waits a little for the stand-in (another thread)."""
    from dagline.scheduler.loop import Scheduler
    from tests.helpers.harness import runs, tis

    scheduler = Scheduler(db, executor, clock=clock, **({"api_url": api_url} if api_url else {}))
    scheduler.start()

    def one_loop():
        stats = scheduler.iterate()
        [run] = runs(db, dag_id)
        waiting = [ti for ti in tis(db, run["id"]).values() if ti.state == "up_for_retry"]
        if waiting:
            clock.instant = max(clock.instant, max(ti.next_retry_at for ti in waiting))
        if stats.work == 0 and run["state"] not in ("success", "failed"):
            time.sleep(0.02)
        return run

    try:
        run = wait_for(one_loop, f"the run of {dag_id} to finish", timeout=timeout, interval=0,
                       until=lambda run: run["state"] in ("success", "failed"))
        scheduler.iterate()  # one more sync: what was recorded is cleaned up
        return run
    finally:
        scheduler.stop()
