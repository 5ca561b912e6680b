"""Tests for dagline.domain.run_decision: the next states of a running run's task instances, and its outcome."""

from __future__ import annotations

import datetime as dt

import pytest

from dagline.domain.run_decision import Change, TaskFacts, TIFacts, decide_run
from dagline.domain.states import RunState, TIState

NOW = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
EARLIER = NOW - dt.timedelta(minutes=1)
LATER = NOW + dt.timedelta(minutes=1)

N, SC, Q, RU = TIState.NONE, TIState.SCHEDULED, TIState.QUEUED, TIState.RUNNING
OK, F, UF, SK = TIState.SUCCESS, TIState.FAILED, TIState.UPSTREAM_FAILED, TIState.SKIPPED
RETRY, RM = TIState.UP_FOR_RETRY, TIState.REMOVED

# a -> b -> c, and a -> d (d with trigger rule all_done)
CHAIN = [
    TaskFacts("a"),
    TaskFacts("b", ("a",)),
    TaskFacts("c", ("b",)),
    TaskFacts("d", ("a",), "all_done"),
]
CHAIN_LEAVES = ("c", "d")
IDS = {"a": 1, "b": 2, "c": 3, "d": 4}


def decide(states: dict[str, str], *, tasks=CHAIN, leaves=CHAIN_LEAVES, previous=None, retry_at=None):
    tis = {task_id: TIFacts(IDS.get(task_id, 99), state, (retry_at or {}).get(task_id))
           for task_id, state in states.items()}
    decision = decide_run(tasks, tis, leaves=leaves, previous_states=previous or {}, now=NOW)
    return {c.ti_id: c.to_state for c in decision.changes}, decision.outcome


def named(changes: dict[int, str]) -> dict[str, str]:
    by_id = {v: k for k, v in IDS.items()}
    return {by_id[ti_id]: state for ti_id, state in changes.items()}


# fmt: off
RUN_TABLE = [
    # TI states                                 changes                                   outcome          case
    ({"a": N,  "b": N,  "c": N,  "d": N},      {"a": SC},                                None,            "a new run: only the root is scheduled"),
    ({"a": RU, "b": N,  "c": N,  "d": N},      {},                                       None,            "root running: nothing to decide"),
    ({"a": OK, "b": N,  "c": N,  "d": N},      {"b": SC, "d": SC},                       None,            "root succeeded: both children scheduled"),
    ({"a": F,  "b": N,  "c": N,  "d": N},      {"b": UF, "c": UF, "d": SC},              None,            "a failure propagates in one walk; all_done still runs"),
    ({"a": F,  "b": UF, "c": UF, "d": OK},     {},                                       RunState.FAILED, "all finished with a failure: the run fails"),
    ({"a": OK, "b": OK, "c": OK, "d": OK},     {},                                       RunState.SUCCESS, "all succeeded"),
    ({"a": OK, "b": OK, "c": OK, "d": F},      {},                                       RunState.FAILED, "a failed leaf fails the run"),
    ({"a": OK, "b": SK, "c": N,  "d": OK},     {"c": SK},                                RunState.SUCCESS, "a skip propagates and the run ends in the same walk"),
    ({"a": OK, "b": OK, "c": Q,  "d": SC},     {},                                       None,            "queued and scheduled TIs are the executor's"),
    ({"a": OK, "b": OK, "c": N},               {"c": SC},                                None,            "a task without a TI is left alone"),
    ({"a": OK, "b": OK, "c": OK, "d": OK, "gone": RM}, {},                               RunState.SUCCESS, "a removed task's TI counts as finished"),
    ({},                                       {},                                       RunState.SUCCESS, "a run with no TIs succeeds"),
]
# fmt: on


@pytest.mark.parametrize("states, changes, outcome, case", RUN_TABLE, ids=[r[-1] for r in RUN_TABLE])
def test_run_decision(states, changes, outcome, case):
    found, found_outcome = decide(states)
    assert named(found) == changes
    assert found_outcome == outcome


# fmt: off
RETRY_TABLE = [
    # next_retry_at   changes          case
    (None,            {"a": SC},       "no retry time: at once"),
    (EARLIER,         {"a": SC},       "retry time passed"),
    (NOW,             {"a": SC},       "retry time is now"),
    (LATER,           {},              "retry time still ahead: wait"),
]
# fmt: on


@pytest.mark.parametrize("retry_at, changes, case", RETRY_TABLE, ids=[r[-1] for r in RETRY_TABLE])
def test_a_try_up_for_retry_is_scheduled_once_its_time_has_come(retry_at, changes, case):
    found, outcome = decide({"a": RETRY, "b": N, "c": N, "d": N}, retry_at={"a": retry_at})
    assert named(found) == changes
    assert outcome is None


PAST = [TaskFacts("a", depends_on_past=True), TaskFacts("b", ("a",))]

# fmt: off
DEPENDS_ON_PAST_TABLE = [
    # the previous run's states    changes      case
    ({},                            {"a": SC},   "no previous run"),
    ({"a": None},                   {"a": SC},   "the task did not exist in the previous run"),
    ({"a": OK},                     {"a": SC},   "previous try succeeded"),
    ({"a": SK},                     {"a": SC},   "previous try skipped"),
    ({"a": F},                      {},          "previous try failed: wait"),
    ({"a": RU},                     {},          "previous try still running: wait"),
    ({"b": F},                      {"a": SC},   "only the same task's previous TI matters"),
]
# fmt: on


@pytest.mark.parametrize("previous, changes, case", DEPENDS_ON_PAST_TABLE, ids=[r[-1] for r in DEPENDS_ON_PAST_TABLE])
def test_depends_on_past(previous, changes, case):
    found, _ = decide({"a": N, "b": N}, tasks=PAST, leaves=("b",), previous=previous)
    assert named(found) == changes


def test_changes_name_the_state_they_leave_in_walk_order():
    decision = decide_run(CHAIN, {t: TIFacts(IDS[t], s) for t, s in {"a": F, "b": N, "c": N, "d": N}.items()},
                          leaves=CHAIN_LEAVES, previous_states={}, now=NOW)
    assert decision.changes == (Change(2, N, UF), Change(3, N, UF), Change(4, N, SC))


# -- signals: a task with a start rule waits for its signal --------------------------------------

SIGNALLED = [TaskFacts("up"), TaskFacts("ev", ("up",), start_signals=("model.published",))]


def decide_signalled(up: str, ev: str, *, pending=False, restart=False, retry_at=None):
    tis = {"up": TIFacts(1, up), "ev": TIFacts(2, ev, retry_at, pending, restart)}
    decision = decide_run(SIGNALLED, tis, leaves=("ev",), previous_states={}, now=NOW)
    return [(c.ti_id, c.to_state, c.by_signal) for c in decision.changes], decision.outcome


@pytest.mark.parametrize("up, ev, pending, expected", [
    (OK, N, False, []),                      # upstream done, no signal: it waits
    (RU, N, True, []),                       # a signal, upstream not done: it waits
    (OK, N, True, [(2, SC, True)]),          # both: the signal starts it
    (F, N, False, [(2, UF, False)]),         # upstream failed: no signal will ever start it
    (OK, OK, True, [(2, SC, True)]),         # done, another signal waits: it runs again
    (OK, F, True, [(2, SC, True)]),
    (F, UF, True, []),                       # its trigger rule still says no
    (OK, OK, False, []),
])
def test_a_start_rule_task_runs_when_its_upstream_allows_and_a_signal_waits(up, ev, pending, expected):
    changes, _ = decide_signalled(up, ev, pending=pending)
    assert changes == expected


def test_a_task_its_upstream_allows_says_it_waits_for_its_start_signal_by_key():
    def why(up: str, tasks=SIGNALLED) -> str | None:
        decision = decide_run(tasks, {"up": TIFacts(1, up), "ev": TIFacts(2, N)}, leaves=("ev",), previous_states={},
                              now=NOW)
        return decision.waiting.get(2)

    assert why(OK) == "waiting for its start signal model.published"
    assert why(RU) == "waiting for upstream up"  # its upstream comes first
    either = [TaskFacts("up"), TaskFacts("ev", ("up",), start_signals=("a.go", "b.go"))]
    assert why(OK, either) == "waiting for a start signal: a.go or b.go"


def test_a_run_waiting_for_a_signal_does_not_finish_and_a_retry_takes_a_waiting_restart():
    assert decide_signalled(OK, N)[1] is None
    assert decide_signalled(OK, OK)[1] == RunState.SUCCESS
    assert decide_signalled(OK, RETRY, pending=True, restart=True)[0] == [(2, SC, True)]
    assert decide_signalled(OK, RETRY, pending=True, restart=False)[0] == [(2, SC, False)]  # keeps its own signal


@pytest.mark.parametrize("states, expected, outcome, case", RUN_TABLE, ids=[row[3] for row in RUN_TABLE])
def test_the_scheduler_gets_the_same_decision_without_the_reasons(states, expected, outcome, case):
    tis = {task_id: TIFacts(IDS.get(task_id, 99), state, LATER if state == RETRY else None)
           for task_id, state in states.items()}
    worded = decide_run(CHAIN, tis, leaves=CHAIN_LEAVES, previous_states={}, now=NOW)
    bare = decide_run(CHAIN, tis, leaves=CHAIN_LEAVES, previous_states={}, now=NOW, reasons=False)
    assert (bare.changes, bare.outcome) == (worded.changes, worded.outcome)
    assert bare.waiting == {}


@pytest.mark.parametrize("states", [("success", "skipped"), ("success", "success")], ids=["skipped", "all-success"])
def test_a_stopped_run_ends_failed_once_its_tasks_have_ended_and_says_who_stopped_it(states):
    tasks = [TaskFacts("train"), TaskFacts("serve", ("train",))]
    tis = {"train": TIFacts(1, states[0]), "serve": TIFacts(2, states[1])}
    decision = decide_run(tasks, tis, leaves=["serve"], previous_states={}, now=NOW, stopped_by="ann")
    assert (decision.outcome, decision.reason) == (RunState.FAILED, "stopped by ann")
    running = decide_run(tasks, {**tis, "serve": TIFacts(2, TIState.RUNNING)}, leaves=["serve"],
                         previous_states={}, now=NOW, stopped_by="ann")
    assert running.outcome is None  # its stopped try has not ended yet
    assert decide_run(tasks, tis, leaves=["serve"], previous_states={}, now=NOW).outcome == RunState.SUCCESS
