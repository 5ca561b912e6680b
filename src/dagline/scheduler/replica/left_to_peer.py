"""What a replica leaving new work to a peer at work (`gathering`) leaves it, and for how long.

New runs: its start steps start only the queued runs that have waited `window_s`
(`runs_left_to_peer_s`): the peer at work takes the fresh ones in with its next hop, and a run left
waiting that long is taken in by any replica (that one is overloaded, stuck or gone). Never the runs
this replica created itself (from the schedule or a signal: a replica starts what it created).

Task instances: its critical sections leave those made runnable less than `window_s` ago, but what it
made runnable itself: the peer's fresh work (it missed the pools only because this replica held
them), and the next hops of this replica's chains, which then go on with the peer's. When it left
some, it comes back for them once they have waited (`tasks_left`, a `timers.Timer`).
Pure rules on the caller's clock: no database.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Collection, Iterable
from typing import Any

from dagline.scheduler.replica.timers import Timer


def runs_waited_since(now: dt.datetime, window_s: float) -> dt.datetime:
    """New runs queued at or before this moment have waited long enough: any replica takes them in."""
    return now - dt.timedelta(seconds=window_s)


def task_instance_left(ti_id: int, scheduled_at: dt.datetime | None, *, own: Collection[int],
                       waited_since: dt.datetime) -> bool:
    """Whether a scheduled task instance is left to the peer at work: made runnable after
    `waited_since`, and not by this replica (`own`)."""
    return ti_id not in own and scheduled_at is not None and scheduled_at > waited_since


class LeftToPeer:
    """What this replica made its own since its last start step and critical section, and when it left
    task instances to a peer."""

    def __init__(self, *, window_s: float, monotonic: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self.created_runs = False  # runs created (schedule, signals) since the last start step: started by it
        self.own_tis: set[int] = set()  # task instances this replica made runnable since its last critical section
        self.tasks_left = Timer(window_s, monotonic=monotonic)  # task instances left to a peer: look again then

    def runs_waited_since(self, now: dt.datetime, *, leaving: Callable[[], bool],
                          queued_by: dt.datetime | None = None) -> dt.datetime | None:
        """The runs a start step may start (`start_runs.start_queued_runs`'s `waited_since`): those
        queued by `queued_by`, or that have waited `window_s` while new runs are left to a peer
        (`leaving`), unless this replica created runs since its last start step."""
        own, self.created_runs = self.created_runs, False
        return queued_by if own or not leaving() else runs_waited_since(now, self.window_s)

    def made_runnable(self, ti_ids: Iterable[int], *, hop: bool, leaving: Callable[[], bool]) -> None:
        """This replica made `ti_ids` runnable: its own to queue, save the next hop of a chain (`hop`) while
        it leaves new work to a peer (`leaving`): that chain then goes on with the peer's."""
        ti_ids = list(ti_ids)
        if ti_ids and (not hop or not leaving()):
            self.own_tis.update(ti_ids)

    def task_instances(self, now: dt.datetime) -> Callable[[Any], bool]:
        """For a critical section leaving new work to a peer: whether a candidate (a scheduled task
        instance with `id` and `scheduled_at`) is left to it; the first one left starts `tasks_left`."""
        waited_since, own = runs_waited_since(now, self.window_s), self.own_tis

        def leave(candidate) -> bool:
            left = task_instance_left(candidate.id, candidate.scheduled_at, own=own, waited_since=waited_since)
            if left:
                self.tasks_left.start()
            return left

        return leave
