"""How a replica lives through database trouble: transaction retry on conflicts, backoff on outages.

`Transactions.run(fn)` runs `fn(conn)` in one transaction. A serialization failure or a deadlock
(`db.faults.is_conflict`) rolled the whole transaction back, so it runs again at once (a few times,
with a little jitter). Any other error leaves the transaction rolled back and propagates: the loop
ends that iteration, and if the error is transient (`db.faults.is_transient`: a reset or terminated
connection, a restarting server, an unreachable database) it logs a warning and carries on after
`Backoff.next()`: 0.1 s, doubling up to `backoff_max_s`, back to 0.1 s after a clean loop.

Work done outside a transaction is arranged so that a failed transaction loses nothing: launches
happen only after the queueing transaction committed; executor reports are kept until the
transaction applying them commits (`phases.hops`); a commit whose outcome is unknown is
reconciled from the database later (`adoption.reconcile_own_tries`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.engine import Connection

from dagline.db.engine import Database
from dagline.db.faults import CONFLICT_ATTEMPTS, run_again_on_conflict

T = TypeVar("T")


class Transactions:
    """Runs a step's transaction, again at once when PostgreSQL rolled it back for a conflict."""

    def __init__(self, db: Database, *, attempts: int = CONFLICT_ATTEMPTS):
        self.db = db
        self.attempts = attempts
        self.conflicts = 0  # conflicts retried so far (for tests and logs)

    def run(self, fn: Callable[[Connection], T], *, what: str) -> T:
        def once() -> T:
            with self.db.begin() as conn:
                return fn(conn)

        return run_again_on_conflict(once, what=what, attempts=self.attempts, on_conflict=self._count_conflict)

    def _count_conflict(self) -> None:
        self.conflicts += 1


class Backoff:
    """Capped exponential waits after consecutive failed loops."""

    def __init__(self, *, first_s: float = 0.1, max_s: float = 5.0):
        self.first_s = first_s
        self.max_s = max_s
        self.failures = 0

    def next(self) -> float:
        delay = min(self.max_s, self.first_s * (2 ** self.failures))
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0

