"""The noop executor: every launched try succeeds, at once or after a set wall-clock duration.

For tests and benchmarks: it measures the scheduler alone, without Spark. A try launched with
duration 0 is reported by the next `sync()` as one 'success' report (`started_at` = when it was
launched, `at` = when it was synced). With a duration (a fixed number of seconds, or a `(min, max)`
range drawn from a seeded random generator per try), `sync()` reports 'running' first and 'success'
once that much wall time (`time.monotonic`) has passed since the launch; stamps come from the clock.
A task whose rendered Spark conf sets `dagline.noop.outcome: failed` fails instead (the key is a
template like any conf value, e.g. `"{{ 'failed' if try_number == 1 else 'success' }}"`), so a DAG's
failure paths (retries, trigger rules) can be rehearsed without Spark.
It keeps no state outside the process, so `adopt` simply takes every try over (as if launched now).
Cost per call is O(reports) plus a heap operation per try, so 1,000-TI benchmarks stay cheap.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import heapq
import itertools
import random
import time

from dagline.clock import SystemClock
from dagline.executors.base import TaskKey, TaskLaunch, TaskReport

OUTCOME_KEY = "dagline.noop.outcome"


def _conf(launch: TaskLaunch) -> dict[str, str]:
    return dict(launch.job.conf)


@dataclasses.dataclass
class _Try:
    launch: TaskLaunch
    started_at: dt.datetime
    due: float
    seq: int  # matches the try's live heap entry; older entries are stale
    cancelled: bool = False


class NoopExecutor:
    """Succeeds every try; `parallelism` bounds how many are in flight, as with a real executor."""

    name = "noop"

    def __init__(
        self,
        parallelism: int,
        clock=None,
        duration_s: float | tuple[float, float] = 0.0,
        seed: int | None = None,
    ):
        if parallelism < 1:
            raise ValueError("parallelism must be at least 1")
        self.parallelism = parallelism
        self.clock = clock or SystemClock()
        if isinstance(duration_s, (tuple, list)):
            low, high = (float(x) for x in duration_s)
            if not 0 <= low <= high:
                raise ValueError(f"duration range must satisfy 0 <= min <= max, got {duration_s!r}")
            self._duration = (low, high)
        else:
            if float(duration_s) < 0:
                raise ValueError(f"duration must not be negative, got {duration_s!r}")
            self._duration = (float(duration_s), float(duration_s))
        self._rng = random.Random(seed)
        self._active: dict[TaskKey, _Try] = {}
        self._due: list[tuple[float, int, TaskKey]] = []  # heap of (due, seq, key)
        self._unannounced: list[TaskKey] = []  # launched with a duration, 'running' not yet reported
        self._seq = itertools.count()

    def start(self) -> None:
        pass

    def _draw(self) -> float:
        low, high = self._duration
        return low if low == high else self._rng.uniform(low, high)

    def launch(self, launches: list[TaskLaunch]) -> None:
        now = self.clock.now()
        mono = time.monotonic()
        for launch in launches:
            key = launch.key
            if key in self._active:
                continue  # idempotent per try
            duration = self._draw()
            t = self._active[key] = _Try(launch, now, mono + duration, next(self._seq))
            heapq.heappush(self._due, (t.due, t.seq, key))
            if duration > 0:
                self._unannounced.append(key)

    def sync(self) -> list[TaskReport]:
        mono = time.monotonic()
        now = self.clock.now()
        finished: list[_Try] = []
        while self._due and self._due[0][0] <= mono:
            _, seq, key = heapq.heappop(self._due)
            t = self._active.get(key)
            if t is not None and t.seq == seq:
                del self._active[key]
                finished.append(t)
        reports = []
        if self._unannounced:
            for key in self._unannounced:
                t = self._active.get(key)
                if t is not None and not t.cancelled:
                    reports.append(self._report(t, "running", t.started_at))
            self._unannounced = []
        for t in finished:
            if t.cancelled:
                reports.append(self._report(t, "failed", now, "cancelled"))
            elif _conf(t.launch).get(OUTCOME_KEY, "success").strip().lower() in ("failed", "fail", "failure"):
                reports.append(self._report(t, "failed", now, f"failed on purpose ({OUTCOME_KEY})"))
            else:
                reports.append(self._report(t, "success", now))
        return reports

    def _report(self, t: _Try, state: str, at: dt.datetime, message: str | None = None) -> TaskReport:
        return TaskReport(
            ti_id=t.launch.ti_id,
            try_number=t.launch.key.try_number,
            state=state,
            at=at,
            external_id=f"noop:{t.launch.key.job_name}",
            message=message,
            started_at=t.started_at,
        )

    def cancel(self, key: TaskKey) -> None:
        t = self._active.get(key)
        if t is not None and not t.cancelled:
            t.cancelled = True
            t.due, t.seq = time.monotonic(), next(self._seq)
            heapq.heappush(self._due, (t.due, t.seq, key))

    def adopt(self, launches: list[TaskLaunch]) -> list[TaskLaunch]:
        self.launch(launches)
        return []

    def free_slots(self) -> int:
        return max(0, self.parallelism - len(self._active))

    def has_work(self) -> bool:
        return bool(self._active)

    def end(self) -> None:
        self._active.clear()
        self._due.clear()
        self._unannounced.clear()
