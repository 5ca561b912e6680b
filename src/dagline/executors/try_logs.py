"""How a stored try's log is read, whatever executor ran it: the reader's side of an executor kind.

Every executor kind (`registry`) names a log reader: given a `StoredTry` (the try's key -- DAG, run, task,
try number --, the `external_id` its executor reported, and the log folder of the reader) it returns a
`TryLog`. `dagline tasks logs`, `dagline dags test` and the web UI read every try through it, so a
kind whose logs live elsewhere than the log folder (spark-k8s: the driver pod's log) is shown alike
everywhere.

A `TryLog` reads the log from a byte offset (`read(skip)`: the web UI's pages fetch what was added since
their last offset), says its size when it is known without reading it all (`size()`: a page shows the
end of a large log without reading the rest), and follows it as it grows (`follow()`: a follower
whose `read()` gives what was added since its last call, for `--follow` and `dags test`). When
there is no log to read (not written yet, or gone with the job) `read` raises `NoLog`, whose message
says why and where it was looked for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from dagline.errors import OperationFailed
from dagline.executors.base import TaskKey
from dagline.executors.try_files import log_path


class NoLog(OperationFailed):
    """The try has no log that can be read (yet, or any more); the message says why."""


@dataclasses.dataclass(frozen=True)
class StoredTry:
    """One try as the database keeps it: what a log reader may use to find its log."""

    key: TaskKey              # DAG, run, task and try number
    external_id: str | None   # what the executor reported for the task instance (spark-k8s: `namespace/name`)
    log_folder: str           # the log folder of whoever reads (`--log-folder`, the API's settings)

    @property
    def log_path(self) -> Path:
        """Where a try that writes to the log folder has its log (`try_files.log_path`)."""
        return log_path(self.log_folder, self.key)


class LogFollower(Protocol):
    def read(self) -> Iterator[bytes]:
        """What was added to the log since the last call, in chunks (none while nothing was). May raise
        `NoLog` while the log cannot be read (a follower waits for a log that does not exist yet)."""


class TryLog(Protocol):
    what: str  # how messages name it: "the log", "the driver log"

    def read(self, skip: int = 0) -> Iterator[bytes]:
        """The log less its first `skip` bytes, in chunks; raises `NoLog` when there is none."""

    def size(self) -> int | None:
        """Its length in bytes, when known without reading it (None: only reading it all tells)."""

    def follow(self) -> LogFollower:
        """A follower that starts at the log's beginning."""


class SkipFollower:
    """Follows any `TryLog` by reading it again past what it already gave (a log that only grows, such as a
    pod's: a held-open stream would tie the reader to one connection that may drop)."""

    def __init__(self, log: TryLog):
        self.log = log
        self.given = 0

    def read(self) -> Iterator[bytes]:
        for chunk in self.log.read(self.given):
            self.given += len(chunk)
            yield chunk


class LogLines:
    """The whole lines a follower adds (`dagline dags test` prints each with its task id in front)."""

    def __init__(self, follower: LogFollower):
        self.follower = follower
        self._partial = b""

    def lines(self, *, final: bool = False) -> list[str]:
        """The whole lines added since the last call; with `final`, the last line even without its newline
        (the try has ended: nothing more comes)."""
        added = []
        try:
            for chunk in self.follower.read():
                added.append(chunk)
        except NoLog:  # not readable (yet): nothing more was added
            pass
        data = self._partial + b"".join(added)
        *complete, self._partial = data.split(b"\n")
        if final and self._partial:
            complete.append(self._partial)
            self._partial = b""
        return [line.decode("utf-8", errors="replace").rstrip("\r") for line in complete]
