"""How long an idle replica waits for its poll: the poll stretched while nothing happens.

On PostgreSQL every change a writer commits wakes the replicas at once (`db.notify`), so the poll is only
for time passing: a DAG's next interval coming due, a retry's time, a queued run's run-after, a
deadline, a timeout. A replica that has found nothing to do in `quiet_passes` full passes in a row, and
has nothing of its own in flight (tries, reports, deliveries), polls more and more slowly: the wait
doubles from `poll_interval_s` up to `poll_interval_s * idle_poll_stretch` (2 s by default), and ends
when the soonest known due time (`store.read_models.next_due_at`) comes, so a DAG's tick is not
waited for longer than before but met on time. Deadlines and timeouts, which are not asked for, may
be seen up to the stretched poll later. Any work, or a wake-up that finds work, sets the poll back.

Where nothing is announced (SQLite), the poll is the only way a replica learns of another process's
change (a `dags trigger` from a shell): it is never stretched there. Pure: no database, no clock.
"""

from __future__ import annotations

MIN_WAIT_S = 0.01  # a due time just ahead: waited for, but never a busy loop


def stretched(*, stretch: float, quiet_passes: int, listens: bool, own_work: bool) -> bool:
    """Whether this wait may be longer than the poll (then the caller asks for the next due time)."""
    return listens and not own_work and quiet_passes >= 2 and stretch > 1


def idle_poll_s(*, poll_s: float, stretch: float, quiet_passes: int, due_in_s: float | None) -> float:
    """The wait of a stretched poll: doubled for each quiet pass after the first, at most `stretch`
    times the poll, and no later than `due_in_s` (seconds until the soonest due time; None: nothing
    waits for a time; zero or less: something is due, or held by a peer, and the plain poll applies)."""
    longest = poll_s * min(stretch, 2.0 ** (quiet_passes - 1))
    if due_in_s is None:
        return longest
    if due_in_s <= 0:
        return poll_s
    return max(MIN_WAIT_S, min(longest, due_in_s))
