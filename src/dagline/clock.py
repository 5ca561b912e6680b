"""Where the scheduler gets "now": the wall clock, or a frozen instant (`--now`) for tests and predictions."""

from __future__ import annotations

import datetime as dt
from typing import Protocol

from dagline.times import UTC, to_utc


class Clock(Protocol):
    def now(self) -> dt.datetime: ...


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> dt.datetime:
        return dt.datetime.now(UTC)


class FixedClock:
    """A frozen instant; `advance` moves it (tests only move time on purpose)."""

    def __init__(self, instant: dt.datetime):
        self.instant = to_utc(instant)

    def now(self) -> dt.datetime:
        return self.instant

    def advance(self, delta: dt.timedelta) -> None:
        self.instant = self.instant + delta
