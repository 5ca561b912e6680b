"""Where an idle replica waits: until another writer commits a change, a stop is requested, or the
poll interval passes.

On PostgreSQL the wait listens (`db.notify.Listener`): a trigger from the CLI, a task finished by a
peer, any state change recorded anywhere ends it at once (but task instances queued: see
`db.transitions`). Polling stays as the fallback for what no
one announces (time passing: retry delays, a run's logical date; jobs of this replica's executor
finishing). On SQLite (or a PostgreSQL driver other than psycopg2, the one dagline ships with) it
is a plain timed wait. `interrupt()` is safe to call from a signal handler
(it writes one byte to a pipe), so SIGTERM ends a wait immediately.
"""

from __future__ import annotations

import os
import select

from dagline.db.engine import Database
from dagline.db.notify import Listener
from dagline.scheduler.replica.gathering import AT_WORK_GAP_S, REPLICA, AtWork


class Wakeup:
    def __init__(self, db: Database, *, at_work_gap_s: float = AT_WORK_GAP_S):
        listens = not db.is_sqlite and db.engine.dialect.driver == "psycopg2"
        self._listener = Listener(db.engine) if listens else None
        self.at_work = AtWork(gap_s=at_work_gap_s)  # read from the notifications (`replica.gathering`)
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._read_fd, False)
        os.set_blocking(self._write_fd, False)
        self.reasons: dict[str, int] = {}  # how waits ended, by reason (for tests and logs)

    @property
    def reconnects(self) -> int:
        return self._listener.reconnects if self._listener is not None else 0

    def start(self) -> None:
        """Begin listening before the loop first looks at the database, so no change falls in between."""
        if self._listener is not None:
            self._listener.open()  # if the database is down, the first wait retries

    def ignore(self, who: str) -> None:
        """This replica's own announcements do not wake it, nor do its peers' ordinary ones (see `db.notify`)."""
        if self._listener is not None:
            self._listener.set_ignore(who)
            self._listener.peers = REPLICA if who.startswith(REPLICA) else None
            self._listener.seen = self.at_work.saw if who.startswith(REPLICA) else None

    def wait(self, timeout: float, *, listen: bool = True) -> str:
        """Wait up to `timeout` s; returns 'notified', 'reconnected', 'interrupted' or 'timeout'.
        With `listen=False` (a backoff after an error), only an interrupt ends the wait early."""
        if self._drain_interrupts():
            reason = "interrupted"
        elif listen and self._listener is not None:
            reason = self._listener.wait(timeout, self._read_fd)
            if reason == "interrupted":
                self._drain_interrupts()
        else:
            readable, _, _ = select.select([self._read_fd], [], [], max(0.0, timeout))
            reason = "interrupted" if readable and self._drain_interrupts() else "timeout"
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        return reason

    def replicas_at_work(self, within_s: float) -> dict[int, float]:
        """Scheduler replica id -> since when (`time.monotonic()`) it has been at work, for the replicas,
        this one included, whose ordinary changes were seen in the last `within_s` seconds
        (`AtWork.replicas`, given every notification up to now by `Listener.look`). Always empty where
        nothing is announced (SQLite)."""
        if self._listener is None:
            return {}
        self._listener.look()
        return self.at_work.replicas(within_s)

    @property
    def listens(self) -> bool:
        """Whether other writers' changes wake this replica (PostgreSQL), or only the poll does."""
        return self._listener is not None

    def pending(self) -> str | None:
        """Without waiting: what was committed since the last look that would have ended a `wait`
        ('notified', 'runs', 'signals'), consuming the notifications; 'interrupted' if an interrupt is
        pending (it is left for the next wait); else None. Always None or 'interrupted' where nothing
        is announced (SQLite)."""
        if self._listener is not None:
            why = self._listener.pending()
            if why is not None:
                return why
        readable, _, _ = select.select([self._read_fd], [], [], 0)
        return "interrupted" if readable else None

    def interrupt(self) -> None:
        """End the current (or next) wait at once. Async-signal-safe."""
        try:
            os.write(self._write_fd, b"x")
        except (BlockingIOError, OSError):
            pass  # the pipe is full: a wake-up is pending anyway

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
        for fd in (self._read_fd, self._write_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self._read_fd = self._write_fd = -1

    def _drain_interrupts(self) -> bool:
        got = False
        while True:
            try:
                data = os.read(self._read_fd, 64)
            except (BlockingIOError, OSError):
                return got
            if not data:
                return got
            got = True
