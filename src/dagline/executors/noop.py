"""The noop executor: every launched try succeeds, at once or after a set wall-clock duration.

For tests and benchmarks: it measures the scheduler alone, without Spark. A try launched with
duration 0 is reported by the next `sync()` as one 'success' report (`started_at` = when it was
launched, `at` = when it was synced). With a duration (a fixed number of seconds, or a `(min, max)`
range drawn from a seeded random generator per try), `sync()` reports 'running' first and 'success'
once that much wall time (`time.monotonic`) has passed since the launch; stamps come from the clock.
With a `seed`, a try's duration is drawn from a generator seeded by the seed and the try's job name,
so the same try lasts as long whichever replica launches it and in whatever order (reproducible).
A streaming task's try (`mode: streaming`) runs until it is cancelled (a stop).
A task whose rendered Spark conf sets `dagline.noop.outcome: failed` fails instead (the key is a
template like any conf value, e.g. `"{{ 'failed' if try_number == 1 else 'success' }}"`), so a DAG's
failure paths (retries, trigger rules) can be rehearsed without Spark.
It keeps no state outside the process: a "job" dies with its replica. So `adopt` follows only the
tries this very executor runs (a replica reconciling its own work), and hands every other try back
as not adoptable: after a `kill -9`, the scheduler that adopts the dead replica's task instances
launches its queued tries again and settles its running ones as zombies (retried or failed), just as
it would for a local job that died with its machine.

`dagline scheduler --executor noop` reads two environment variables (see `options_from_env`):
`DAGLINE_NOOP_DURATION` (seconds: `0.2`, or a range `0.05-0.5`, also written `0.05..0.5`) and
`DAGLINE_NOOP_SEED` (an integer), e.g. `DAGLINE_NOOP_DURATION=0.05-0.5 DAGLINE_NOOP_SEED=7`.
Cost per call is O(reports) plus a heap operation per try, so 1,000-TI benchmarks stay cheap.

`KIND_CODE` is its entry for the registry (`dagline.executors.registry`): a noop try runs no job
(`runs_jobs=False`), and its log is looked for in the log folder like a local try's (it writes none,
but a test or a demo may put one there).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import heapq
import itertools
import os
import random
import re
import time
from collections.abc import Mapping

from dagline.clock import SystemClock
from dagline.domain.states import TIState
from dagline.errors import InvalidInput
from dagline.executors.base import TaskKey, TaskLaunch, TaskReport
from dagline.executors.folder_log import FolderLog
from dagline.executors.registry import KindCode, ShownSetting

OUTCOME_KEY = "dagline.noop.outcome"
_FAILING = (TIState.FAILED, "fail", "failure")  # the outcomes that fail a try
DURATION_ENV = "DAGLINE_NOOP_DURATION"
SEED_ENV = "DAGLINE_NOOP_SEED"
_NUMBER = r"\s*(\d+(?:\.\d*)?|\.\d+)\s*"


def parse_duration_option(text: str, field: str = DURATION_ENV) -> float | tuple[float, float]:
    """`"0.2"` -> 0.2 seconds; `"0.05-0.5"` or `"0.05..0.5"` -> the range (0.05, 0.5)."""
    fixed = re.fullmatch(_NUMBER, text)
    if fixed:
        return float(fixed.group(1))
    ranged = re.fullmatch(_NUMBER + r"(?:-|\.\.)" + _NUMBER, text)
    if not ranged:
        raise InvalidInput(f"{text!r} is not a duration in seconds: give e.g. 0.2, or a range such as 0.05-0.5",
                           field=field)
    low, high = float(ranged.group(1)), float(ranged.group(2))
    if low > high:
        raise InvalidInput(f"range {text!r} has its minimum above its maximum", field=field)
    return low, high


def options_from_env(environ: Mapping[str, str] | None = None) -> dict:
    """`duration_s` and `seed` from `DAGLINE_NOOP_DURATION` / `DAGLINE_NOOP_SEED`, where they are set."""
    environ = os.environ if environ is None else environ
    options: dict = {}
    if environ.get(DURATION_ENV, "").strip():
        options["duration_s"] = parse_duration_option(environ[DURATION_ENV])
    if environ.get(SEED_ENV, "").strip():
        try:
            options["seed"] = int(environ[SEED_ENV])
        except ValueError:
            raise InvalidInput(f"{environ[SEED_ENV]!r} is not an integer", field=SEED_ENV) from None
    return options


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
    host_bound = False  # nothing outlives the process: an adopter finds no job and retries the try

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
        self._seed = seed
        self._rng = random.Random(seed)
        self._active: dict[TaskKey, _Try] = {}
        self._due: list[tuple[float, int, TaskKey]] = []  # heap of (due, seq, key)
        self._unannounced: list[TaskKey] = []  # launched with a duration, 'running' not yet reported
        self._seq = itertools.count()

    def start(self) -> None:
        pass

    def duration_of(self, key: TaskKey) -> float:
        """How long a try lasts, in seconds. With a seed it depends only on the seed and the try, so a
        try relaunched elsewhere lasts as long; without one, each call draws afresh."""
        return self._draw(key)

    def _draw(self, key: TaskKey) -> float:
        low, high = self._duration
        if low == high:
            return low
        rng = self._rng if self._seed is None else random.Random(f"{self._seed}/{key.job_name}")
        return rng.uniform(low, high)

    def launch(self, launches: list[TaskLaunch]) -> None:
        now = self.clock.now()
        mono = time.monotonic()
        for launch in launches:
            key = launch.key
            if key in self._active:
                continue  # idempotent per try
            duration = float("inf") if launch.streaming else self._draw(key)  # streaming: until cancelled
            t = self._active[key] = _Try(launch, now, mono + duration, next(self._seq))
            if duration != float("inf"):
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
                    reports.append(self._report(t, TIState.RUNNING, t.started_at))
            self._unannounced = []
        for t in finished:
            if t.cancelled:
                reports.append(self._report(t, TIState.FAILED, now, "cancelled"))
            elif _conf(t.launch).get(OUTCOME_KEY, TIState.SUCCESS).strip().lower() in _FAILING:
                reports.append(self._report(t, TIState.FAILED, now, f"failed on purpose ({OUTCOME_KEY})"))
            else:
                reports.append(self._report(t, TIState.SUCCESS, now))
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
        return [launch for launch in launches if launch.key not in self._active]

    def free_slots(self) -> int:
        return max(0, self.parallelism - len(self._active))

    def has_work(self) -> bool:
        return bool(self._active)

    def detach(self) -> None:
        """Noop tries live in this process only: detached, they are gone, and the adopter retries them."""
        self.end()

    def end(self) -> None:
        self._active.clear()
        self._due.clear()
        self._unannounced.clear()


def _shown(environ: Mapping[str, str]) -> list[ShownSetting]:
    options = options_from_env(environ)
    return [ShownSetting("noop.duration_s", options.get("duration_s", 0.0), DURATION_ENV),
            ShownSetting("noop.seed", options.get("seed"), SEED_ENV)]


KIND_CODE = KindCode(
    build=lambda settings: NoopExecutor(parallelism=settings.parallelism, clock=settings.clock, **settings.options),
    open_log=FolderLog,
    read_options=options_from_env,
    option_names=frozenset({"duration_s", "seed"}),
    settings_shown=_shown,
    runs_jobs=False,
)
