"""Reading a task's log file as it grows: what was appended since the last read, in whole lines.

Used by `dagline dags test` (each task's log streamed with the task id in front) and `dagline tasks
logs --follow`. A file that does not exist yet reads as empty (a try that is queued has no log yet).
"""

from __future__ import annotations

import os


class LogTail:
    def __init__(self, path: str | os.PathLike):
        self.path = path
        self.offset = 0
        self._partial = b""
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

    def lines(self, *, final: bool = False) -> list[str]:
        """The whole lines appended since the last call; with `final`, the last line even without its
        newline (the try has ended: nothing more comes)."""
        data = self._partial + self.read()
        *complete, self._partial = data.split(b"\n")
        if final and self._partial:
            complete.append(self._partial)
            self._partial = b""
        return [line.decode("utf-8", errors="replace").rstrip("\r") for line in complete]
