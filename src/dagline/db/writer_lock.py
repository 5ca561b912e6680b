"""Taking turns at writing a SQLite file: a lock file beside the database, tried every half millisecond.

SQLite lets one writer in at a time (`BEGIN IMMEDIATE`); a writer that finds the database locked
sleeps in SQLite's busy handler, whose naps grow to 25, 50 and 100 ms. When two processes write in
quick turns (the scheduler and a script triggering runs, `dagline api` and the scheduler) the one
waiting keeps sleeping through the moments the other lets go, and each transaction can wait tens of
milliseconds for a lock that was free most of that time.

So before `BEGIN IMMEDIATE`, `Database.begin` takes an exclusive `flock` on `<database>.writer.lock`,
retrying every 0.5 ms: a waiter gets in within half a millisecond of the holder's commit. The flock
is only a queue in front of SQLite's own lock, which still decides: a writer that does not take it
(the `sqlite3` shell, an older dagline) is kept out by SQLite as before, and after `BUSY_TIMEOUT_S`
a waiter goes on to SQLite's busy handler, which raises "database is locked" as it always did. The
kernel drops a flock when its process dies, so a killed writer never leaves it behind. A thread
that already holds it (a transaction opened inside another) does not take it twice.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

try:
    import fcntl
except ImportError:  # not POSIX: SQLite's busy handler alone
    fcntl = None

BUSY_TIMEOUT_S = 30.0  # as SQLite's busy timeout (`db.engine`)
RETRY_S = 0.0005


class WriterLock:
    """The writers' turn for one SQLite file; one per `Database`, shared by its threads."""

    def __init__(self, database_path: str):
        self.path = f"{database_path}.writer.lock"
        self._local = threading.local()  # per thread: its open lock file and how deep it holds the lock
        self.waits = 0  # turns that had to wait (for tests and benchmarks)

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """Hold the turn for the body (a transaction), unless this thread holds it already."""
        local = self._local
        depth = getattr(local, "depth", 0)
        took = depth == 0 and self._acquire()
        local.depth = depth + 1
        try:
            yield
        finally:
            local.depth -= 1
            if took:
                fcntl.flock(local.file.fd, fcntl.LOCK_UN)

    def _acquire(self) -> bool:
        fd = self._fd()
        if fd is None:
            return False
        deadline = None
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
            now = time.monotonic()
            if deadline is None:
                deadline = now + BUSY_TIMEOUT_S
                self.waits += 1
            elif now >= deadline:
                return False  # SQLite's busy handler decides from here
            time.sleep(RETRY_S)

    def _fd(self) -> int | None:
        file = getattr(self._local, "file", None)
        if file is None and fcntl is not None:
            try:
                file = _LockFile(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644))
            except OSError:  # a read-only folder: SQLite will say so when it writes
                return None
            self._local.file = file
        return file.fd if file is not None else None

    def close(self) -> None:
        """Close this thread's descriptor (other threads' close with their thread, or with this lock)."""
        file = getattr(self._local, "file", None)
        if file is not None:
            self._local.file = None
            file.close()


class _LockFile:
    """One thread's descriptor of the lock file, closed when dropped: a thread's local data goes with
    the thread, and all of it with the `WriterLock`, so no descriptor outlives its user."""

    __slots__ = ("fd",)

    def __init__(self, fd: int):
        self.fd = fd

    def close(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __del__(self):
        self.close()
