"""When an idle replica looks again without being woken: its timers.

An idle wait lasts until the earliest of: the poll (`poll_interval_s`, for the full pass owed to what
no one announces), the end of the window of the new runs left to a peer (`runs_left_to_peer_s` after
the first wake-up for them not yet looked after), the end of that of the task instances left to a
peer (a `Timer`, see `left_to_peer`). A timer fires only when the wait timed out: a wake-up is never
taken for a timer (the caller acts on it), and a timer that is due at a wake-up fires at the next
timeout, at once. Pure rules on an injected monotonic clock: no database.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class Timer:
    """A moment to come back at, `after_s` after it was started; a later start does not move it, and it
    fires once."""

    def __init__(self, after_s: float, *, monotonic: Callable[[], float] = time.monotonic):
        self.after_s = after_s
        self.monotonic = monotonic
        self.started: float | None = None

    def start(self) -> None:
        if self.started is None:
            self.started = self.monotonic()

    @property
    def at(self) -> float | None:
        return None if self.started is None else self.started + self.after_s

    def fires(self, why: str) -> bool:
        """Whether the wait that ended with `why` ended for this timer (it is stopped then)."""
        if why == "timeout" and self.started is not None and self.monotonic() >= self.started + self.after_s:
            self.started = None
            return True
        return False


class IdleTimers:
    """The timers of one idle wait: the poll, the window of the new runs left to a peer, and the timer
    of the task instances left to one (kept by the replica across waits)."""

    def __init__(self, *, poll_s: float, left_s: float, tasks_left: Timer,
                 monotonic: Callable[[], float] = time.monotonic):
        self.poll_s = poll_s
        self.left_s = left_s
        self.tasks_left = tasks_left
        self.monotonic = monotonic
        self.deadline = monotonic() + poll_s
        self.runs_first: float | None = None  # wake-ups for new runs left to a peer: the oldest not looked after
        self.runs_last: float | None = None

    def wait_s(self) -> float:
        """How long to wait now at most."""
        until = self.deadline if self.runs_first is None else min(self.deadline, self.runs_first + self.left_s)
        if self.tasks_left.at is not None:
            until = min(until, self.tasks_left.at)
        return max(0.0, until - self.monotonic())

    def poll_due(self, why: str) -> bool:
        return why == "timeout" and self.monotonic() >= self.deadline

    def restart_poll(self) -> None:
        self.deadline = self.monotonic() + self.poll_s

    def runs_left(self) -> None:
        """A wake-up for new runs was left to a peer: looked after once they have waited `left_s`."""
        self.runs_last = self.monotonic()
        self.runs_first = self.runs_first if self.runs_first is not None else self.runs_last

    def runs_waited(self, why: str) -> bool:
        """Whether the wait that ended with `why` ended because runs left to a peer have waited `left_s`
        (before the poll is due): the look then takes those; the window moves on to the wake-ups for
        runs announced since, or closes."""
        now = self.monotonic()
        if why != "timeout" or self.runs_first is None or now >= self.deadline:
            return False
        self.runs_first = self.runs_last if self.runs_last > now - self.left_s else None
        return True
