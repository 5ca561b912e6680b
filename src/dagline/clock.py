"""Where the scheduler gets "now": the wall clock, or a frozen instant (`--now`) for tests and predictions;
and, for tests of the replica's timers, a monotonic clock that moves only when told."""

from __future__ import annotations

import datetime as dt
from typing import Protocol

from dagline.times import UTC, to_utc


class Clock(Protocol):
    frozen: bool  # True: time never passes by itself (waiting for a retry time would wait forever)

    def now(self) -> dt.datetime: ...


class SystemClock:
    """The wall clock, in UTC."""

    frozen = False

    def now(self) -> dt.datetime:
        return dt.datetime.now(UTC)


class FixedClock:
    """A frozen instant; `advance` moves it (tests only move time on purpose)."""

    frozen = True

    def __init__(self, instant: dt.datetime):
        self.instant = to_utc(instant)

    def now(self) -> dt.datetime:
        return self.instant

    def advance(self, delta: dt.timedelta) -> None:
        self.instant = self.instant + delta


class ShiftedClock:
    """The wall clock's pace from another starting instant: time passes, as for `SystemClock`, but from
    `start` (tests that need a retry delay to elapse without depending on the date)."""

    frozen = False

    def __init__(self, start: dt.datetime):
        self.offset = to_utc(start) - dt.datetime.now(UTC)

    def now(self) -> dt.datetime:
        return dt.datetime.now(UTC) + self.offset


class FixedMonotonic:
    """A monotonic clock (seconds, as `time.monotonic` counts them) that stands still until `advance`
    moves it: what the replica's timers and windows (`dagline.scheduler.replica`) take in tests."""

    def __init__(self, seconds: float = 1000.0):
        self.seconds = seconds

    def __call__(self) -> float:
        return self.seconds

    def advance(self, seconds: float) -> None:
        self.seconds += seconds
