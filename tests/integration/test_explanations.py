"""An explanation of a wait is the scheduler's own decision, on its own facts: after a scheduler pass with
a frozen clock (one that then finds nothing more to do at that time), every task instance the scheduler
left in `none`, `up_for_retry` or `scheduled` is explained by the cause the decision waits on, and every
one it moved on is not explained as waiting; in `dagline tasks list --json`, `dagline runs show --json`
and the web run page alike. For every trigger rule, `dependsOnPast`, a full pool, `maxActiveTasks`,
`maxActiveTisPerDag`, a backfill's `maxActiveRuns`, a retry time, a missed deadline and every kind of
signal rule (start `each` and `latest`, restart, stop), on SQLite and PostgreSQL."""

from __future__ import annotations

import html
import json

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient

from dagline.api import ApiSettings, create_app
from dagline.cli import main
from dagline.clock import FixedClock
from dagline.domain.deps import TriggerRule
from dagline.domain.states import TIState
from dagline.executors.noop import OUTCOME_KEY, NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.store.pools import set_pool
from dagline.store.runs import trigger_run
from dagline.store.signals import send_signal
from tests.helpers.dags import dag, task, write
from tests.helpers.harness import apply, backfill, runs, t, ti_states, tis

NOW = "2026-03-01T00:00:00+00:00"
LEFT = (TIState.NONE, TIState.UP_FOR_RETRY, TIState.SCHEDULED)  # the states a task instance waits in
MOVING = ("ready:", "retry due:", "next to be", "scheduled: next to be queued")  # what the scheduler does at once


class Pass:
    """One scheduler replica with a frozen clock, kept alive across steps (its streaming noop tries live as
    long as it does), and what it and the explanations say about the runs it left."""

    def __init__(self, db, tmp_path):
        self.db, self.tmp_path = db, tmp_path
        self.clock = FixedClock(t(NOW))
        self.sched = Scheduler(db, NoopExecutor(parallelism=64, clock=self.clock), clock=self.clock)
        self.sched.start()
        self.web = TestClient(create_app(db, ApiSettings(anonymous_read=True, log_folder=str(tmp_path / "logs")),
                                         clock=self.clock))

    def apply(self, document: dict) -> None:
        apply(self.db, write(self.tmp_path, document))

    def settle(self, loops: int = 60) -> None:
        """Loop until the scheduler finds nothing more to do at this frozen time: what it left, it decided to leave."""
        for _ in range(loops):
            if self.sched.iterate().work == 0:
                assert self.sched.iterate().work == 0
                return
        raise AssertionError("the scheduler did not settle")

    def send(self, key: str) -> None:
        with self.db.begin() as conn:
            send_signal(conn, key, None, now=self.clock.now(), source="user:test")

    def explained(self, run_pk: int, waits: dict[str, str]) -> None:
        """`waits`: task id -> the reason of each task instance the scheduler left waiting, no more, no less."""
        states = ti_states(self.db, run_pk)
        listed = self._reasons("tasks", "list", str(run_pk))
        shown = self._reasons("runs", "show", str(run_pk))
        assert shown == listed
        left = {task_id: listed[task_id] for task_id, state in states.items() if state in LEFT}
        assert left == waits, states
        for task_id, why in left.items():
            assert not why.startswith(MOVING), (task_id, why)  # the scheduler looked, and left it
        moved = {task_id: listed[task_id] for task_id in states if task_id not in left}
        assert all(why is None or why.startswith("queued:") for why in moved.values()), moved
        page = self.web.get(f"/runs/{run_pk}")
        assert page.status_code == 200
        for why in waits.values():
            assert html.escape(why) in page.text

    def _reasons(self, *command: str) -> dict[str, str | None]:
        result = CliRunner().invoke(main, ["--db", self.db.url, *command, "--json", "--now", NOW])
        assert result.exit_code == 0, result.output
        rows = json.loads(result.output)
        return {row["task_id"]: row["reason"] for row in (rows["tasks"] if isinstance(rows, dict) else rows)}

    def close(self) -> None:
        self.sched.stop()


@pytest.fixture
def scheduler(db, tmp_path):
    one = Pass(db, tmp_path)
    yield one
    one.close()


def upstream(*task_ids: str) -> dict:
    return {"upstream": list(task_ids)}


OK = task("ok")
BAD = task("bad", retries=0, spark={"conf": {OUTCOME_KEY: "failed"}})
LIVE = task("live", mode="streaming")  # runs until stopped: an upstream that never finishes here
SKIP = task("skip", "ok", triggerRule="all_failed")  # skipped: its upstream succeeded

# per rule: upstream tasks its decision waits on (`live` unfinished), and upstream tasks that let it run
RULES = {
    TriggerRule.ALL_SUCCESS: (("ok", "live"), ("ok",)),
    TriggerRule.ALL_FAILED: (("bad", "live"), ("bad",)),
    TriggerRule.ALL_DONE: (("ok", "live"), ("ok", "bad")),
    TriggerRule.ALL_SKIPPED: (("skip", "live"), ("skip",)),
    TriggerRule.ONE_SUCCESS: (("bad", "live"), ("ok", "live")),
    TriggerRule.ONE_FAILED: (("ok", "live"), ("bad", "live")),
    TriggerRule.ONE_DONE: (("skip", "live"), ("ok", "live")),
    TriggerRule.NONE_FAILED: (("ok", "live"), ("ok", "skip")),
    TriggerRule.NONE_FAILED_MIN_ONE_SUCCESS: (("ok", "live"), ("ok", "skip")),
    TriggerRule.NONE_SKIPPED: (("ok", "live"), ("ok", "bad")),
    TriggerRule.ALWAYS: (None, ("live",)),  # never waits
}


def test_every_trigger_rule_is_explained_by_the_upstream_its_decision_waits_on(scheduler):
    assert set(RULES) == set(TriggerRule)
    rules = []
    for rule, (waits_on, runs_after) in RULES.items():
        if waits_on:
            rules.append(task(f"wait-{rule.value}".replace("_", "-"), *waits_on, triggerRule=rule.value))
        rules.append(task(f"go-{rule.value}".replace("_", "-"), *runs_after, triggerRule=rule.value))
    scheduler.apply(dag("rules", OK, BAD, LIVE, SKIP, *rules))
    run = trigger_run(scheduler.db, "rules", now=t(NOW))
    scheduler.settle()
    states = ti_states(scheduler.db, run.id)
    assert {task_id: state for task_id, state in states.items() if task_id.startswith("go-")} == {
        f"go-{rule.value}".replace("_", "-"): TIState.SUCCESS for rule in TriggerRule}  # scheduled, and ran
    scheduler.explained(run.id, {f"wait-{rule.value}".replace("_", "-"): "waiting for upstream live"
                                 for rule, (waits_on, _) in RULES.items() if waits_on})


def test_depends_on_past_names_the_previous_run_it_waits_for(scheduler):
    scheduler.apply(dag("past", task("load", dependsOnPast=True, retries=0, spark={"conf": {OUTCOME_KEY: "failed"}}),
                        task("other")))
    first = trigger_run(scheduler.db, "past", now=t(NOW), logical_date=t("2026-02-27T00:00:00Z"))
    second = trigger_run(scheduler.db, "past", now=t(NOW), logical_date=t("2026-02-28T00:00:00Z"))
    scheduler.settle()
    assert ti_states(scheduler.db, first.id) == {"load": "failed", "other": "success"}
    scheduler.explained(first.id, {})
    scheduler.explained(second.id, {"load": f"depends on past (run {first.run_id} not done: its load is failed)"})


def test_a_full_pool_and_each_limit_are_explained_by_the_limit_that_holds_the_task(scheduler):
    set_pool(scheduler.db, "p", 1, now=t(NOW))
    scheduler.apply(dag("pooled", task("hog", mode="streaming", pool="p"), task("waits", pool="p"), task("free")))
    scheduler.apply(dag("capped", task("hog", mode="streaming"), task("other"), maxActiveTasks=1))
    scheduler.apply(dag("serial", task("serve", mode="streaming", maxActiveTisPerDag=1), maxActiveRuns=2))
    scheduler.apply(dag("filled", task("serve", mode="streaming"), schedule="@daily", startDate="2026-02-01",
                        catchup=False))
    pooled = trigger_run(scheduler.db, "pooled", now=t(NOW))
    capped = trigger_run(scheduler.db, "capped", now=t(NOW))
    serial = [trigger_run(scheduler.db, "serial", now=t(NOW), logical_date=t(day))
              for day in ("2026-02-27T00:00:00Z", "2026-02-28T00:00:00Z")]
    filling = backfill(scheduler.db, "filled", "2026-02-01", "2026-02-02", NOW, max_active_runs=1).backfill_id
    scheduler.settle()
    scheduler.explained(pooled.id, {"waits": "pool p full (1/1 slots, needs 1)"})
    scheduler.explained(capped.id, {"other": "DAG at maxActiveTasks (1 queued or running)"})
    scheduler.explained(serial[0].id, {})
    scheduler.explained(serial[1].id, {"serve": "task at maxActiveTisPerDag (1 queued or running)"})
    first, second = (r["id"] for r in runs(scheduler.db, "filled") if r["backfill_id"] == filling)
    scheduler.explained(first, {})
    scheduler.explained(second, {"serve": f"backfill {filling} at maxActiveRuns (1/1 running)"})


def test_a_retry_time_and_a_missed_deadline_are_explained_as_the_decision_sees_them(scheduler):
    scheduler.apply(dag("late", LIVE,
                        task("flaky", retries=1, retryDelay="PT1H", spark={"conf": {OUTCOME_KEY: "failed"}}),
                        task("report", "flaky"),
                        task("due", deadline={"within": "PT1M", "of": "logical_date"}),
                        task("after", "live", deadline={"within": "PT1M", "of": "logical_date"})))
    run = trigger_run(scheduler.db, "late", now=t(NOW), logical_date=t("2026-02-28T00:00:00Z"))
    scheduler.settle()
    rows = tis(scheduler.db, run.id)
    assert rows["due"].state == "success" and rows["after"].deadline_missed_at is not None  # missed, and moved on
    scheduler.explained(run.id, {"flaky": "retry at 2026-03-01T01:00:00+00:00", "report": "waiting for upstream flaky",
                                 "after": "waiting for upstream live"})


def test_every_signal_rule_is_explained_as_the_decision_sees_it(scheduler):
    scheduler.apply(dag(
        "signalled", OK, LIVE,
        task("each", "ok", on=[{"signal": "eval.each", "action": "start", "handling": "each"}]),
        task("latest", "ok", on=[{"signal": "eval.latest", "action": "start", "handling": "latest"}]),
        task("early", "live", on=[{"signal": "eval.early", "action": "start"}]),
        task("restarted", "ok", on=[{"signal": "job.restart", "action": "restart"}]),
        task("serve", mode="streaming", on=[{"signal": "serve.restart", "action": "restart"},
                                            {"signal": "serve.off", "action": "stop"}]),
        task("stopped", "ok", on=[{"signal": "job.stop", "action": "stop"}]),
    ))
    run = trigger_run(scheduler.db, "signalled", now=t(NOW))
    scheduler.settle()
    assert ti_states(scheduler.db, run.id) == {
        "ok": "success", "live": "running", "each": "none", "latest": "none", "early": "none",
        "restarted": "success", "serve": "running", "stopped": "success"}
    scheduler.explained(run.id, {"each": "waiting for its start signal eval.each",
                                 "latest": "waiting for its start signal eval.latest",
                                 "early": "waiting for upstream live"})

    for key in ("eval.each", "eval.latest", "eval.latest", "eval.early", "serve.restart", "job.restart"):
        scheduler.send(key)
    scheduler.settle()
    rows = tis(scheduler.db, run.id)
    assert {task_id: (row.state, row.try_number) for task_id, row in rows.items()
            if task_id in ("each", "latest", "restarted", "serve")} == {
        "each": ("success", 1), "latest": ("success", 1), "restarted": ("success", 2), "serve": ("running", 2)}
    scheduler.explained(run.id, {"early": "waiting for upstream live"})  # its signal waits for its upstream

    scheduler.send("serve.off")
    scheduler.settle()
    assert ti_states(scheduler.db, run.id)["serve"] == "success"
    scheduler.explained(run.id, {"early": "waiting for upstream live"})
