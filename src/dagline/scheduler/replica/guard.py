"""One scheduler per SQLite database: an exclusive file lock next to the database file.

SQLite has no row locks, so two schedulers on one file could both claim the same work. The lock is
held by the process for as long as it runs and released by the operating system when it dies, so a
crashed scheduler never blocks the next one.
"""

from __future__ import annotations

import fcntl
import os
import socket

from dagline.db.engine import Database
from dagline.errors import OperationFailed


class SchedulerLock:
    def __init__(self, db: Database):
        self.path = None
        self._fd = None
        if db.is_sqlite and db.sqlite_path and db.sqlite_path != ":memory:":
            self.path = os.path.abspath(db.sqlite_path) + ".scheduler.lock"

    def acquire(self) -> None:
        if self.path is None:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise OperationFailed(
                f"another scheduler ({holder}) is already running on the SQLite database "
                f"{self.path[:-len('.scheduler.lock')]}. SQLite has no row locks, so dagline runs one scheduler "
                "per SQLite file: stop the other one, or use PostgreSQL to run several replicas"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}".encode(), 0)
        self._fd = fd

    def check(self) -> None:
        """Raise as `acquire` would if another scheduler holds the lock now, and leave it free: for a
        command that must fail before it writes anything (`backfill run` creates its backfill first)."""
        self.acquire()
        self.release()

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
