"""What the phases of one replica share: its database, executor, clock and settings, who it is, the
work-sharing state it keeps (`replica.left_to_peer`, `replica.lost_race`), and the step it is in
(named in its error messages, timed into the phase histogram). `loop.Scheduler` is one."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.engine import Connection

from dagline import metrics
from dagline.clock import Clock, SystemClock
from dagline.db.engine import Database
from dagline.executors.base import Executor
from dagline.scheduler.deliveries import Deliveries
from dagline.scheduler.launches import DEFAULT_API_URL
from dagline.scheduler.renderer import Renderer
from dagline.scheduler.replica.adoption import Adopter
from dagline.scheduler.replica.gathering import leaves_new_work
from dagline.scheduler.replica.left_to_peer import LeftToPeer
from dagline.scheduler.replica.liveness import Liveness
from dagline.scheduler.replica.lost_race import LostRace
from dagline.scheduler.replica.resilience import Transactions
from dagline.scheduler.replica.wakeup import Wakeup
from dagline.scheduler.settings import SchedulerSettings
from dagline.scheduler.tries import InFlight
from dagline.store.dags import DagCache

T = TypeVar("T")

# DAG versions a replica keeps parsed: every current version of 10,000 DAGs with room for their previous
# ones (issue 32: a smaller cache parses the versions of a large tick again every hour)
CACHED_VERSIONS = 20_000


class Context:
    """A replica's shared state. `backfill_id` restricts it to one backfill's runs, `test_run_id` to one
    test run (see `loop`)."""

    def __init__(self, db: Database, executor: Executor, *, clock: Clock | None, settings: SchedulerSettings | None,
                 backfill_id: int | None, test_run_id: int | None, api_url: str | None):
        self.db = db
        self.executor = executor
        self.clock = clock or SystemClock()
        self.settings = s = settings or SchedulerSettings()
        self.backfill_id = backfill_id
        self.test_run_id = test_run_id
        self.api_url = api_url or DEFAULT_API_URL  # given to every try, with a token of its own
        self.dags = DagCache(maxsize=CACHED_VERSIONS)
        self.replica_id: int | None = None
        self.who = "scheduler" if test_run_id is None else f"dags-test:{os.getpid()}"
        self.tx = Transactions(db)
        self.liveness = Liveness(self.tx, executor=executor.name, heartbeat_interval_s=s.heartbeat_interval_s,
                                 timeout_s=s.replica_timeout_s)
        self.wakeup = Wakeup(db, at_work_gap_s=s.peer_at_work_s)
        self.in_flight = InFlight()
        self.renderer = Renderer(time_budget_s=s.template_time_budget_s, should_stop=lambda: self._stop_requested)
        self.adopter: Adopter | None = None  # from the start, for a registered replica
        self.deliveries: Deliveries | None = None
        self.left = LeftToPeer(window_s=s.runs_left_to_peer_s)
        self.lost_race = LostRace(window_s=s.peer_at_work_s)
        self.step = "start"
        self._stop_requested = False

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    def transact(self, fn: Callable[[Connection], T]) -> T:
        """`fn(conn)` in one transaction, named after the current step (`resilience.Transactions`)."""
        return self.tx.run(fn, what=self.step)

    @contextlib.contextmanager
    def phase(self, phase: str, step: str):
        """Name the step (for error messages) and time it into the phase histogram."""
        self.step = step
        began = time.perf_counter()
        try:
            yield
        finally:
            metrics.LOOP_PHASE_SECONDS.labels(phase=phase).observe(time.perf_counter() - began)

    def leaving_runs_to_peers(self) -> bool:
        """Whether new work is left to a peer at work for now (`replica.gathering`). Not by a replica of
        one backfill or one test run, nor to one (a backfill's replica announces itself so:
        `announce_as_scoped`), nor on SQLite (one scheduler: no replica is ever seen at work)."""
        if self.replica_id is None or self.backfill_id is not None or self.test_run_id is not None:
            return False
        at_work = self.wakeup.replicas_at_work(self.settings.peer_at_work_s)
        return leaves_new_work(self.replica_id, at_work, lost_race=self.lost_race.recent())
