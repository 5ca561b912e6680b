"""The idle replica's polling pass, left to the replica at work.

An idle replica owes a full pass to the poll (`poll_interval_s`): every pass looks at every DAG, run
and pool, for what no one announces (time passing). While a peer is at work (`gathering`), that peer
runs a full pass at least every `follow_up_s`, so this one's would find nothing to do, while holding
run locks and the pools the peer needs: it leaves the pass to the peer. Only a replica with nothing of
its own to follow does: no tries in flight (their ends are seen by polling), no executor reports or
callback deliveries pending. A pure rule: no database, no clock.
"""

from __future__ import annotations

from collections.abc import Callable


def has_own_work(*, tries_in_flight: int, reports_pending: int, executor_busy: bool, deliveries_busy: bool) -> bool:
    """Whether the replica has something of its own to follow: tries in flight (their ends are seen by
    polling), executor reports or callback deliveries pending."""
    return bool(tries_in_flight or reports_pending or executor_busy or deliveries_busy)


def pass_left_to_peers(*, tries_in_flight: int, reports_pending: int, executor_busy: bool, deliveries_busy: bool,
                       leaving: Callable[[], bool]) -> bool:
    """Whether the full pass owed to the poll is left to a peer at work; `leaving` (whether new work is
    left to a peer) is asked only of a replica with nothing of its own to follow."""
    own_work = has_own_work(tries_in_flight=tries_in_flight, reports_pending=reports_pending,
                            executor_busy=executor_busy, deliveries_busy=deliveries_busy)
    return not own_work and leaving()
