"""Work gathering: which scheduler replicas are at work, since when, and whom new work is left to.

New work goes to the replica already moving chains of tasks, whose next hop takes it in with them,
one transaction for all (spread over every replica in small pieces, each piece costs a transaction of
its own per hop: with three replicas on one machine, about twice the CPU of one for the same work).

A replica is at work while it commits ordinary changes at most `gap_s` apart (`peer_at_work_s`), since
its first change after a longer pause. Every replica reads it from the notifications it receives
anyway (`db.notify`: a scheduler replica's ordinary changes reach every replica, itself included,
though they wake no one): `AtWork.saw` takes each one read. An urgent announcement (its executor is
full, it is leaving) says a replica is not one to leave work to, until its next ordinary change; a
replica of one backfill (`db.notify.announce_as_scoped`) never is one. New runs go to the one at work
for longest (ties: the lowest replica id), and the others, idle or at work, leave them to it
(`left_to_peer`: for how long, and what is never left; `lost_race`: before that one is even seen).
Pure rules on an injected monotonic clock: no database.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from dagline.db.notify import SCOPED, URGENT

REPLICA = "scheduler:"  # how a scheduler replica signs its announcements: `scheduler:<replica id>`
AT_WORK_GAP_S = 0.25  # by default, a replica whose ordinary changes pause longer starts new work when they resume
_KEPT = 64  # replicas remembered before the long silent ones are forgotten


class AtWork:
    """Since when and until when (monotonic seconds) each scheduler replica was seen at work."""

    def __init__(self, *, gap_s: float = AT_WORK_GAP_S, monotonic: Callable[[], float] = time.monotonic):
        self.gap_s = gap_s
        self.monotonic = monotonic
        self.seen: dict[str, tuple[float, float]] = {}  # writer -> (since, last)

    def saw(self, payload: str) -> None:
        """A notification was read: an ordinary change of a replica that takes any work says it is at
        work; an urgent one says it is not one to leave work to (its executor is full, it is leaving)."""
        if payload.startswith(REPLICA) and not payload.endswith(SCOPED):
            now = self.monotonic()
            since, last = self.seen.get(payload, (now, float("-inf")))
            self.seen[payload] = (since if now - last <= self.gap_s else now, now)
            if len(self.seen) > _KEPT:  # replicas come and go: forget those long silent
                self.seen = {w: seen for w, seen in self.seen.items() if now - seen[1] <= self.gap_s}
        elif payload.startswith(URGENT + REPLICA):
            self.seen.pop(payload[len(URGENT):], None)

    def replicas(self, within_s: float) -> dict[int, float]:
        """Replica id -> since when it has been at work, for the replicas seen at work in the last
        `within_s` seconds."""
        recent = self.monotonic() - within_s
        return {int(writer.removeprefix(REPLICA)): since for writer, (since, last) in self.seen.items()
                if last >= recent and writer.removeprefix(REPLICA).isdigit()}


def at_work_longest(at_work: Mapping[int, float]) -> int | None:
    """The replica new work is left to: at work for longest (the earliest `since`), ties to the lowest
    replica id; None when no replica is at work."""
    return min(at_work, key=lambda replica: (at_work[replica], replica), default=None)


def leaves_new_work(me: int, at_work: Mapping[int, float], *, lost_race: bool) -> bool:
    """Whether replica `me` leaves new work to a peer: when another replica is the one at work for
    longest; when none is seen at work, only while `me` has just lost a race for new runs (`lost_race`)."""
    if not at_work:
        return lost_race
    return at_work_longest(at_work) != me
