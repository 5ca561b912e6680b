"""A try waiting for its retry delay is pending work: `scheduler --until-idle` and `backfill run` wait
for it (saying so on the progress bar) instead of returning "nothing runnable", and exit 0 when the
runs end well, 1 with the reason when one failed. Time passes for real here, from an injected start
(`ShiftedClock`), with a retry delay of one second; no test asserts how long anything took."""

from __future__ import annotations

from click.testing import CliRunner

from dagline.cli import main
from dagline.clock import ShiftedClock
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.store.runs import trigger_run
from tests.helpers.harness import apply, t, ti_states, tis, write_dag

RETRIED = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: flaky}
spec:
  schedule: "@daily"
  startDate: "2026-01-01"
  paused: false
  tasks:
    - id: extract
      retries: 1
      retryDelay: PT1S
      spark: {mainApplicationFile: e.py, conf: {dagline.noop.outcome: "%(outcome)s"}}
    - {id: load, upstream: [extract], spark: {mainApplicationFile: l.py}}
"""
FAILS_ONCE = "{{ 'failed' if try_number == 1 else 'success' }}"


def test_until_idle_waits_for_a_retry_and_the_retried_try_succeeds(db, tmp_path):
    apply(db, write_dag(tmp_path, RETRIED % {"outcome": FAILS_ONCE}))
    run = trigger_run(db, "flaky", now=t("2026-03-01T00:00:00Z"), logical_date=t("2026-01-05T00:00:00Z"))
    clock = ShiftedClock(t("2026-03-01T00:00:00Z"))
    sched = Scheduler(db, NoopExecutor(parallelism=4, clock=clock), clock=clock)
    sched.run(until_idle=True)
    assert ti_states(db, run.id) == {"extract": "success", "load": "success"}
    assert tis(db, run.id)["extract"].try_number == 2
    assert sched.waiting_retry is None  # it returned because nothing was left, not while a retry waited


def _backfill_run(db, *extra):
    return CliRunner().invoke(main, ["--db", db.url, "backfill", "run", "flaky", "--start", "2026-01-01",
                                     "--end", "2026-01-02", "--executor", "noop", *extra])


def test_backfill_run_waits_for_retries_shows_them_and_exits_0_when_the_runs_succeed(db, tmp_path):
    apply(db, write_dag(tmp_path, RETRIED % {"outcome": FAILS_ONCE}))
    result = _backfill_run(db)
    assert result.exit_code == 0, result.output
    assert "retrying extract " in result.output  # the progress bar says what it waits for ("in 1s", or "now")
    assert "runs 2/2 (failed 0)" in result.output and "backfill 1: completed" in result.output


def test_backfill_run_exits_1_naming_the_task_and_the_reason_when_the_last_try_fails(db, tmp_path):
    apply(db, write_dag(tmp_path, RETRIED % {"outcome": "failed"}))
    result = _backfill_run(db)
    assert result.exit_code == 1, result.output
    assert "retrying extract " in result.output
    assert "2 of 2 runs failed" in result.output
    assert "extract (try 2): failed on purpose (dagline.noop.outcome)" in result.output


def test_scheduler_until_idle_exits_1_with_the_reason_when_a_run_it_finished_failed(db, tmp_path):
    manual_only = (RETRIED % {"outcome": "failed"}).replace('schedule: "@daily"', "schedule: null")
    apply(db, write_dag(tmp_path, manual_only))
    trigger_run(db, "flaky", now=t("2026-03-01T00:00:00Z"), logical_date=t("2026-01-05T00:00:00Z"))
    result = CliRunner().invoke(main, ["--db", db.url, "scheduler", "--executor", "noop", "--until-idle"])
    assert result.exit_code == 1, result.output
    assert "1 run(s) failed" in result.output and "extract (try 2): failed on purpose" in result.output


def test_with_a_frozen_clock_backfill_run_says_the_retry_never_comes(db, tmp_path):
    apply(db, write_dag(tmp_path, RETRIED % {"outcome": FAILS_ONCE}))
    result = _backfill_run(db, "--now", "2026-03-01T00:00:00Z")
    assert result.exit_code == 1, result.output
    assert "retrying extract in 1s but the clock is frozen by --now" in result.output


def test_with_a_frozen_clock_scheduler_until_idle_exits_1_naming_the_retry_it_cannot_reach(db, tmp_path):
    manual_only = (RETRIED % {"outcome": FAILS_ONCE}).replace('schedule: "@daily"', "schedule: null")
    apply(db, write_dag(tmp_path, manual_only))
    run = trigger_run(db, "flaky", now=t("2026-03-01T00:00:00Z"), logical_date=t("2026-01-05T00:00:00Z"))
    result = CliRunner().invoke(main, ["--db", db.url, "scheduler", "--executor", "noop", "--until-idle",
                                       "--now", "2026-03-01T00:00:00Z"])
    assert result.exit_code == 1, result.output
    assert (f"run {run.run_id}: task extract waits for its retry at 2026-03-01T00:00:01+00:00; "
            "the clock is frozen at --now 2026-03-01T00:00:00+00:00") in result.output
    assert ti_states(db, run.id)["extract"] == "up_for_retry"
