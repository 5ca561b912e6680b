"""A try's log in the log folder (`try_files.log_path`), the log reader of the local and noop kinds.

The log is the files the wrapper rotated, oldest first, then the current one (`try_files.log_files`),
read as one stream of bytes: a rotation copies the current file to `<log>.1` and truncates it, so the
bytes before an offset stay where they were (until the oldest copy is dropped). `FolderLog.follow()`
prints the copies that exist when it starts, then follows the current file with a `LogTail`, which
notices a rotation by `<log>.1` changing and reads the rest of the file from the copy.

A try with no file at all has no log here: `read` raises `NoLog` naming the path (logs live where the
scheduler that ran the try wrote them). A follower reads a missing file as empty (a queued try has
not written its log yet).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from dagline.executors.try_files import log_files
from dagline.executors.try_logs import NoLog, StoredTry

CHUNK = 1 << 16


class FolderLog:
    what = "the log"

    def __init__(self, stored: StoredTry):
        self.path = stored.log_path

    def read(self, skip: int = 0) -> Iterator[bytes]:
        files = log_files(self.path)
        if not files:
            raise NoLog(f"no log at {self.path} (logs live where the scheduler that ran the task wrote them; "
                        "see --log-folder)")
        return self._chunks(files, skip)

    @staticmethod
    def _chunks(files, skip: int) -> Iterator[bytes]:
        for path in files:
            try:
                fh = open(path, "rb")
            except FileNotFoundError:  # rotated away since it was listed
                continue
            with fh:
                size = os.fstat(fh.fileno()).st_size
                if skip >= size:
                    skip -= size
                    continue
                fh.seek(skip)
                skip = 0
                while chunk := fh.read(CHUNK):
                    yield chunk

    def size(self) -> int | None:
        total = 0
        for path in log_files(self.path):
            try:
                total += os.path.getsize(path)
            except OSError:
                pass
        return total

    def follow(self) -> FolderFollower:
        return FolderFollower(self.path)


class FolderFollower:
    """The copies rotated before it started (oldest first), then the current file as it grows."""

    def __init__(self, path):
        self.path = path
        self._copies = log_files(path)[:-1] if os.path.exists(path) else log_files(path)
        self._tail = LogTail(path)

    def read(self) -> Iterator[bytes]:
        copies, self._copies = self._copies, []
        yield from FolderLog._chunks(copies, 0)
        if data := self._tail.read():
            yield data


class LogTail:
    """Reading a log file as it grows: what was appended since the last read. A file that does not exist
    yet reads as empty (a try that is queued has no log yet)."""

    def __init__(self, path: str | os.PathLike):
        self.path = path
        self.offset = 0
        self._rotated = self._rotated_identity()  # rotations before we started are not ours to replay

    def read(self) -> bytes:
        """The bytes appended since the last read. A rotation (the local executor's wrapper copies the
        file to `<file>.1`, a new file each time, and truncates it) is seen by `<file>.1` changing: the
        rest of what the file held then comes from the copy, and reading starts again at 0."""
        rotated = self._rotated_identity()
        rest = b""
        if rotated != self._rotated and rotated is not None:
            rest = self._rotated_rest()
            self.offset = 0
        self._rotated = rotated
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return rest
        self.offset += len(data)
        return rest + data

    def _rotated_identity(self):
        try:
            st = os.stat(f"{os.fspath(self.path)}.1")
        except FileNotFoundError:
            return None
        return st.st_ino, st.st_mtime_ns

    def _rotated_rest(self) -> bytes:
        try:
            with open(f"{os.fspath(self.path)}.1", "rb") as fh:
                fh.seek(self.offset)
                return fh.read()
        except FileNotFoundError:
            return b""
