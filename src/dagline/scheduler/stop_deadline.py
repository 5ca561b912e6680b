"""A replica asked to stop leaves within its grace period, even while a step keeps it busy.

SIGTERM asks the loop to stop after the step it is in (`Scheduler.request_stop`). A step can take
long -- a DAG's schedule being computed, a query waiting on a lock -- and the process manager kills a
replica still there when its grace period ends (Kubernetes: SIGKILL after
`terminationGracePeriodSeconds`, 30 s by default), without a word in its log. `StopDeadline`, started
by the signal handler at the first request, ends the process itself `grace_s` seconds later if the
replica has not stopped by then: it logs what happened and exits at once (`os._exit`, from a timer
thread, so a busy main thread cannot hold it up). The replica's jobs keep running; peers adopt them
once its heartbeat is stale, as after any crash, and the next start on SQLite adopts them too.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

EXIT_CODE = 128 + signal.SIGTERM  # as if SIGTERM had ended the process: the stop was not graceful


class StopDeadline:
    """`start()` at the first stop request (idempotent, safe in a signal handler); `cancel()` once the
    replica has stopped. `end_process` (default `os._exit`) is injectable for tests of the class itself."""

    def __init__(self, grace_s: float, what: str = "the scheduler", *,
                 end_process: Callable[[int], object] = os._exit):
        self.grace_s = grace_s
        self.what = what
        self._end_process = end_process
        self._timer: threading.Timer | None = None

    def start(self) -> None:
        if self._timer is not None:
            return
        self._timer = threading.Timer(self.grace_s, self._expire)
        self._timer.name = "stop-deadline"
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()

    def _expire(self) -> None:
        log.error("%s did not stop within %g s of the stop request (still busy in a step): exiting now; its "
                  "running jobs keep running and a peer (or the next start) adopts them", self.what, self.grace_s)
        for stream in (sys.stderr, sys.stdout):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - exiting regardless
                pass
        self._end_process(EXIT_CODE)
