"""Why is my task not running? `dagline tasks list` gives a `reason` for every task instance that is
neither running nor finished, in the words the scheduler decided with (the same pure decisions,
`run_decision.decide_run` and `admission.admit`, called by both)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from dagline.cli import main
from dagline.clock import FixedClock
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.store.dags import set_paused
from dagline.store.pools import set_pool
from dagline.store.runs import trigger_run
from tests.helpers.harness import apply, t, ti_states, write_dag

NOW = "2026-03-01T00:00:00Z"
WHY = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: why}
spec:
  schedule: null
  paused: false
  maxActiveRuns: 1
  tasks:
    - {id: c1, pool: p, spark: {mainApplicationFile: j.py}}
    - {id: c2, pool: p, spark: {mainApplicationFile: j.py}}
    - {id: c3, pool: p, spark: {mainApplicationFile: j.py}}
    - {id: c4, pool: p, priorityWeight: 0, spark: {mainApplicationFile: j.py}}
    - {id: huge, pool: q, poolSlots: 5, spark: {mainApplicationFile: j.py}}
    - {id: after, upstream: [c1, c2], spark: {mainApplicationFile: j.py}}
"""
LATER = WHY.replace("{name: why}", "{name: later}").replace("maxActiveRuns: 1", "maxActiveRuns: 4")


def reasons(db, run_pk: int) -> dict[str, str | None]:
    result = CliRunner().invoke(main, ["--db", db.url, "tasks", "list", str(run_pk), "--json", "--now", NOW])
    assert result.exit_code == 0, result.output
    return {row["task_id"]: row["reason"] for row in json.loads(result.output)}


def test_every_waiting_task_instance_says_why_in_the_schedulers_words(db, tmp_path):
    set_pool(db, "p", 3, now=t(NOW))
    set_pool(db, "q", 3, now=t(NOW))
    apply(db, write_dag(tmp_path, WHY))
    apply(db, write_dag(tmp_path, LATER, "later.yaml"))
    first = trigger_run(db, "why", now=t(NOW), logical_date=t("2026-02-27T00:00:00Z"))
    second = trigger_run(db, "why", now=t(NOW), logical_date=t("2026-02-28T00:00:00Z"))
    future = trigger_run(db, "later", now=t(NOW), logical_date=t("2026-03-05T00:00:00Z"))
    clock = FixedClock(t(NOW))
    sched = Scheduler(db, NoopExecutor(parallelism=16, clock=clock, duration_s=3600), clock=clock)
    sched.start()
    try:
        for _ in range(4):
            sched.iterate()
        states = ti_states(db, first.id)
        assert (states["c1"], states["c2"], states["c3"], states["c4"]) == ("running",) * 3 + ("scheduled",)
        why = reasons(db, first.id)
        assert why["c1"] is None and why["c2"] is None  # running: no reason to give
        assert why["c4"] == "pool p full (3/3 slots, needs 1)"
        assert why["huge"] == "poolSlots 5 > pool q size 3: never runs until the pool grows"
        assert why["after"] == "waiting for upstream c1, c2"
        assert set(reasons(db, second.id).values()) == {"DAG at maxActiveRuns (1/1 running)"}
        assert set(reasons(db, future.id).values()) == {"not yet (the run starts after 2026-03-05T00:00:00+00:00)"}

        set_paused(db, "why", True, now=t(NOW))
        assert set(reasons(db, second.id).values()) == {"DAG paused (`dagline dags unpause why`)"}
        table = CliRunner().invoke(main, ["--db", db.url, "tasks", "list", str(first.id), "--now", NOW]).output
        assert "REASON" in table and "DAG paused" in table
    finally:
        sched.stop()


def test_retries_and_depends_on_past_say_when_and_which_run(db, tmp_path):
    body = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: chain}
spec:
  schedule: null
  paused: false
  tasks:
    - {id: load, dependsOnPast: true, spark: {mainApplicationFile: j.py, conf: {dagline.noop.outcome: failed}}}
    - id: flaky
      retries: 1
      retryDelay: PT1H
      spark: {mainApplicationFile: j.py, conf: {dagline.noop.outcome: "{{ 'failed' if try_number == 1 else 'ok' }}"}}
    - {id: report, upstream: [flaky], spark: {mainApplicationFile: j.py}}
"""
    apply(db, write_dag(tmp_path, body))
    first = trigger_run(db, "chain", now=t(NOW), logical_date=t("2026-02-27T00:00:00Z"))
    clock = FixedClock(t(NOW))
    Scheduler(db, NoopExecutor(parallelism=4, clock=clock), clock=clock).run(until_idle=True)
    assert ti_states(db, first.id) == {"load": "failed", "flaky": "up_for_retry", "report": "none"}
    assert reasons(db, first.id) == {"load": None, "flaky": "retry at 2026-03-01T01:00:00+00:00",
                                     "report": "waiting for upstream flaky"}
    second = trigger_run(db, "chain", now=t(NOW), logical_date=t("2026-02-28T00:00:00Z"))
    Scheduler(db, NoopExecutor(parallelism=4, clock=clock), clock=clock).run(until_idle=True)
    assert ti_states(db, second.id)["load"] == "none"  # the scheduler held it back...
    assert reasons(db, second.id)["load"] == (  # ...and says why, naming the run it waits for
        f"depends on past (run {first.run_id} not done: its load is failed)")
