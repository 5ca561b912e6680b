"""An idle replica's poll against a real database (`replica.idle_poll`, `store.read_models.next_due_at`).

On PostgreSQL every change wakes a replica, so after quiet passes it polls less often, yet wakes for
the next DAG's tick when it comes; on SQLite, where another process's trigger is seen only by polling,
the poll stays as set. Clocks are frozen: the replicas are asked for their next wait, never waited on."""

from __future__ import annotations

import datetime as dt

import pytest

from dagline.clock import FixedClock
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.scheduler.settings import SchedulerSettings
from tests.helpers.dags import dag, write
from tests.helpers.harness import apply, t

TICK = t("2026-03-01T11:00:00Z")  # the hourly DAG's next run may be created then
SETTINGS = SchedulerSettings(poll_interval_s=0.5, idle_poll_stretch=4.0)


def _idle_replica(db, tmp_path, *, seconds_before_tick: float) -> Scheduler:
    write(tmp_path, dag("hourly", schedule="@hourly", startDate="2026-03-01T10:00:00Z", catchup=False))
    apply(db, str(tmp_path), now="2026-03-01T10:30:00+00:00")
    clock = FixedClock(TICK - dt.timedelta(seconds=seconds_before_tick))
    replica = Scheduler(db, NoopExecutor(4, clock=clock), clock=clock, settings=SETTINGS)
    replica.start()
    for _ in range(3):  # quiet passes: nothing is due yet
        assert replica.iterate().work == 0
        replica.quiet_passes += 1
    return replica


def test_an_idle_replica_on_postgresql_polls_less_often_but_wakes_for_the_next_tick(pg_db, tmp_path):
    replica = _idle_replica(pg_db, tmp_path, seconds_before_tick=600)
    try:
        assert replica._poll_s() == 2.0  # the tick is ten minutes away: the poll stretched four times
        replica.clock.advance(dt.timedelta(seconds=599.25))
        assert replica._poll_s() == pytest.approx(0.75)  # the tick comes before the stretched poll would
        replica.clock.advance(dt.timedelta(seconds=1))
        assert replica._poll_s() == 0.5  # due now: the plain poll until a pass creates the run
        assert replica.iterate().runs_created == 1
    finally:
        replica.stop()


def test_on_sqlite_the_poll_is_never_stretched(sqlite_db, tmp_path):
    replica = _idle_replica(sqlite_db, tmp_path, seconds_before_tick=600)
    try:
        assert replica._poll_s() == 0.5  # a `dags trigger` from a shell is seen only by polling
    finally:
        replica.stop()
