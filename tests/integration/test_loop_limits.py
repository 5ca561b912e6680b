"""The loop's finer rules: per-task start dates, priority, backfill limits and order, cancelling a
backfill, execution timeouts, pausing. Real loop, noop executor, frozen clock, both databases."""

from __future__ import annotations

from dagline.clock import FixedClock
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.store.backfills import cancel_backfill
from dagline.store.dags import set_paused
from dagline.store.runs import trigger_run
from tests.helpers.dags import dag, task, write
from tests.helpers.harness import apply, assert_invariants, backfill, events, runs, schedule, t, ti_states, write_dag

DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: limits}
spec:
  paused: false
  catchup: true
  schedule: "@daily"
  startDate: "2026-03-01"
  maxActiveRuns: %(max_active_runs)s
  tasks:
    - id: a
      spark: {mainApplicationFile: a.py}
    - id: late
      startDate: "2026-03-04"
      spark: {mainApplicationFile: late.py}
    - id: b
      upstream: [a, late]
      spark: {mainApplicationFile: b.py}
"""


def test_a_task_starting_later_than_its_dag_has_no_task_instance_before_its_start(db, tmp_path):
    apply(db, write_dag(tmp_path, DAG % {"max_active_runs": 16}))
    schedule(db, "2026-03-06T00:00:00Z")
    states = {r["logical_date"][:10]: ti_states(db, r["id"]) for r in runs(db, "limits")}
    assert states["2026-03-03"] == {"a": "success", "b": "success"}
    assert states["2026-03-04"] == {"a": "success", "late": "success", "b": "success"}


def test_backfill_runs_obey_their_own_max_active_runs_and_run_backwards(db, tmp_path):
    apply(db, write_dag(tmp_path, DAG % {"max_active_runs": 16}))
    result = backfill(db, "limits", "2026-03-01", "2026-03-06", now="2026-03-10T00:00:00Z", max_active_runs=2,
                      run_backwards=True)
    schedule(db, "2026-03-10T00:00:00Z", backfill_id=result.backfill_id)
    started = [e.dag_run_id for e in events(db, entity="dag_run", to_state="running")]
    by_id = {r["id"]: r["logical_date"][:10] for r in runs(db, "limits")}
    assert [by_id[i] for i in started] == [f"2026-03-0{d}" for d in (6, 5, 4, 3, 2, 1)]  # newest first
    running = peak = 0
    for ev in events(db, entity="dag_run"):
        running += (ev.to_state == "running") - (ev.from_state == "running")
        peak = max(peak, running)
    assert peak == 2
    assert all(r["state"] == "success" for r in runs(db, "limits"))
    assert_invariants(db)


def test_scheduled_runs_start_before_queued_backfill_runs(db, tmp_path):
    apply(db, write_dag(tmp_path, DAG % {"max_active_runs": 1}))
    result = backfill(db, "limits", "2026-03-01", "2026-03-03", now="2026-03-05T00:00:00Z")
    assert len(result.plan.to_run) == 3
    # the scheduler fast-forwards beyond the backfill: its next run is 03-04
    schedule(db, "2026-03-05T00:00:00Z")
    order = [e.dag_run_id for e in events(db, entity="dag_run", to_state="running")]
    by_id = {r["id"]: (r["run_type"], r["logical_date"][:10]) for r in runs(db, "limits")}
    assert by_id[order[0]] == ("scheduled", "2026-03-04")  # the present goes first
    assert [by_id[i][0] for i in order[1:]] == ["backfill"] * 3


def test_cancelling_a_backfill_fails_its_runs_not_started_and_finishes_the_rest(db, tmp_path):
    apply(db, write_dag(tmp_path, DAG % {"max_active_runs": 1}))
    result = backfill(db, "limits", "2026-03-01", "2026-03-05", now="2026-03-10T00:00:00Z")
    clock = FixedClock(t("2026-03-10T00:00:00Z"))
    sched = Scheduler(db, NoopExecutor(parallelism=8, clock=clock, duration_s=60), clock=clock,
                      backfill_id=result.backfill_id)
    sched.start()
    try:
        sched.iterate()  # starts the first run and launches its first tasks (which take a minute)
        assert cancel_backfill(db, result.backfill_id, now=clock.now()) == 4
    finally:
        sched.stop()
    states = [r["state"] for r in runs(db, "limits")]
    assert states == ["running", "failed", "failed", "failed", "failed"]
    cancelled = runs(db, "limits")[1]
    assert set(ti_states(db, cancelled["id"]).values()) == {"skipped"}
    assert "cancelled" in events(db, entity="dag_run", dag_run_id=cancelled["id"])[-1].detail


def test_higher_priority_tasks_are_queued_first(db, tmp_path):
    apply(db, write(tmp_path, dag("prio", task("low", priorityWeight=1), task("high", priorityWeight=10),
                                  task("mid", priorityWeight=5))))
    trigger_run(db, "prio", now=t("2026-03-01T00:00:00Z"))
    clock = FixedClock(t("2026-03-01T00:00:00Z"))
    schedule(db, "2026-03-01T00:00:00Z", executor=NoopExecutor(parallelism=1, clock=clock))
    assert [e.task_id for e in events(db, entity="task_instance", to_state="queued")] == ["high", "mid", "low"]


def test_a_try_running_past_its_execution_timeout_is_failed_and_retried(db, tmp_path):
    apply(db, write(tmp_path, dag("slow", task("slow", retries=1, retryDelay="PT1M", executionTimeout="PT10M"))))
    run = trigger_run(db, "slow", now=t("2026-03-01T00:00:00Z"))
    clock = FixedClock(t("2026-03-01T00:00:00Z"))
    executor = NoopExecutor(parallelism=4, clock=clock, duration_s=3600)  # a job that never ends in time
    sched = Scheduler(db, executor, clock=clock)
    sched.start()
    try:
        sched.iterate()
        sched.iterate()
        assert ti_states(db, run.id) == {"slow": "running"}
        clock.advance(t("2026-03-01T00:10:01Z") - clock.now())
        sched.upkeep.last_housekeeping = 0.0  # the housekeeping interval has passed
        sched.iterate()
        assert ti_states(db, run.id) == {"slow": "up_for_retry"}
        assert not executor.has_work() or all(tr.cancelled for tr in executor._active.values())
    finally:
        sched.stop()
    [ev] = events(db, entity="task_instance", to_state="up_for_retry")
    assert "executionTimeout" in ev.detail


def test_a_paused_dag_creates_and_starts_nothing_until_unpaused(db, tmp_path):
    apply(db, write_dag(tmp_path, DAG % {"max_active_runs": 16}))
    set_paused(db, "limits", True, now=t("2026-03-01T00:00:00Z"))
    schedule(db, "2026-03-03T00:00:00Z")
    assert runs(db, "limits") == []
    set_paused(db, "limits", False, now=t("2026-03-03T00:00:00Z"))
    schedule(db, "2026-03-03T00:00:00Z")
    assert [r["state"] for r in runs(db, "limits")] == ["success", "success"]
