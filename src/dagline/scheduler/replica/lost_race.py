"""The lost-race rule: idle replicas racing for the first run of a burst leave the next ones to the winner.

New runs wake every idle replica. Each takes in only the runs queued by the time it looks
(`queued_by`): a loser does not take the next runs of the burst from under the winner. A replica
that found nothing to take knows a peer took the runs, and leaves it the next ones for `window_s`
(`peer_at_work_s`), before that peer's changes even arrive to show it at work (`gathering`).
Pure rules on an injected monotonic clock: no database.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable


class LostRace:
    """When this replica last found the runs it was woken for taken by a peer."""

    def __init__(self, *, window_s: float, monotonic: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self.monotonic = monotonic
        self._lost_at = float("-inf")

    def lost(self) -> None:
        """The runs this replica was woken for were taken: a peer is at work on them."""
        self._lost_at = self.monotonic()

    def recent(self) -> bool:
        """Whether the last race was lost less than `window_s` ago."""
        return self.monotonic() - self._lost_at < self.window_s


def queued_by(now: dt.datetime, *, listens: bool) -> dt.datetime | None:
    """Which runs a replica woken by new runs takes in: those queued by `now` where wake-ups exist
    (PostgreSQL), any where nothing announces them (None)."""
    return now if listens else None
