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
