"""For jobs: stop a streaming job cleanly when dagline asks it to stop.

dagline stops a streaming try cooperatively: SIGTERM to the job's processes (local executor) or the
deletion of its SparkApplication (Kubernetes: the driver pod gets SIGTERM), then the task's
`stopGracePeriod`, then a kill. A PySpark Structured Streaming job that calls `run_until_stopped`
stops its active queries itself on that request (`query.stop()`: the current micro-batch ends or is
abandoned, the checkpoint stays consistent, and a restart resumes from it) and returns, so the job
exits 0:

    from dagline.sdk.streaming import run_until_stopped

    query = df.writeStream.option("checkpointLocation", ckpt).start(out)
    run_until_stopped(spark)          # returns once stopped on request; raises if a query failed

`StopRequest` is the part without Spark: it turns SIGTERM (and SIGINT) into a flag and runs
callbacks outside the signal handler, in a watcher thread (a signal handler must not call into the
JVM: the main thread may be inside a Py4J call at that moment). Any job can use it:

    stop = StopRequest.install(on_stop=[lambda: print("stopping")])
    while not stop.wait(1.0):
        work()

This module imports nothing from dagline or Spark at import time: it runs inside user jobs.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


__all__ = ["StopRequest", "run_until_stopped", "stop_active_queries"]


class StopRequest:
    """A stop request from dagline: `requested` is set on SIGTERM/SIGINT; callbacks run once, in order,
    in a watcher thread."""

    def __init__(self, on_stop: Iterable[Callable[[], None]] = ()):
        self.requested = threading.Event()
        self.done = threading.Event()  # the callbacks have run
        self.errors: list[BaseException] = []
        self._callbacks = list(on_stop)
        self._signal: int | None = None
        self._watcher = threading.Thread(target=self._run_callbacks, name="dagline-stop", daemon=True)
        self._watcher.start()

    @classmethod
    def install(cls, on_stop: Iterable[Callable[[], None]] = (), signals=STOP_SIGNALS) -> StopRequest:
        """A StopRequest that SIGTERM and SIGINT set (call it from the main thread)."""
        request = cls(on_stop)
        for signum in signals:
            signal.signal(signum, request._handle)
        return request

    def add(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def _handle(self, signum, frame) -> None:  # noqa: ARG002 - signal handler signature
        if self._signal is None:
            self._signal = signum
        self.requested.set()

    def request(self) -> None:
        """Ask for a stop from the program itself (as SIGTERM would)."""
        self.requested.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to `timeout` seconds for a stop request; True once one came."""
        return self.requested.wait(timeout)

    def _run_callbacks(self) -> None:
        self.requested.wait()
        for callback in self._callbacks:
            try:
                callback()
            except BaseException as exc:  # noqa: BLE001 - reported by the caller; the others still run
                self.errors.append(exc)
        self.done.set()

    @property
    def signal_name(self) -> str | None:
        return signal.Signals(self._signal).name if self._signal is not None else None


def stop_active_queries(spark) -> list[str]:
    """Stop every active streaming query of the session; returns their names (or ids)."""
    stopped = []
    for query in list(spark.streams.active):
        query.stop()
        stopped.append(query.name or str(query.id))
    return stopped


def run_until_stopped(spark, poll_s: float = 1.0, stop: StopRequest | None = None) -> list[str]:
    """Keep the job alive while its streaming queries run; on dagline's stop request stop them cleanly
    and return the names of the queries stopped. A query that fails raises its error (the try fails and
    is retried as usual); when every query has ended on its own, returns []."""
    stop = stop or StopRequest.install()
    stopped: list[str] = []
    stop.add(lambda: stopped.extend(stop_active_queries(spark)))
    while not stop.wait(0):
        if not spark.streams.active:
            return []  # every query ended on its own
        # raises StreamingQueryException if a query failed: the try fails and is retried as usual
        if spark.streams.awaitAnyTermination(poll_s):
            spark.streams.resetTerminated()
    stop.done.wait()
    if stop.errors:
        raise stop.errors[0]
    print(f"[dagline.sdk.streaming] stopped on {stop.signal_name or 'request'}: {', '.join(stopped) or 'no query'}",
          file=sys.stderr, flush=True)
    return stopped
