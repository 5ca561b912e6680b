"""What the scheduler does with one running DAG run: its task instances' next states and the run's outcome.

A pure function of plain values, the decision behind loop step 3 and the mini-scheduler
(`dagline.scheduler.examine` gathers the rows, calls `decide_run`, and writes what it returns):

* walk the tasks in the order given (topological, as `Dag.tasks` is);
* a TI in `up_for_retry` becomes `scheduled` once its `next_retry_at` has passed (or has none);
* a TI in `none` is decided by `dependsOnPast` (the same task's state in the run's `previous`) and then
  by its trigger rule over its upstream TIs' states: `scheduled`, `skipped`, `upstream_failed`, or wait;
* a task with a `start` signal rule (`start_signals`) is scheduled only when its trigger rule is met
  AND a signal waits for it (`pending_signal`): upstream tasks alone do not start it, a signal alone
  does not start it before its upstream tasks allow; a TI that has finished runs again when a signal
  waits for it (a start or a restart) and its trigger rule is still met; a retry takes a waiting
  restart's signal (a restart means "from now on, with this value"). Such changes are `by_signal`;
* decisions propagate within the walk, so a failure marks the whole downstream `upstream_failed` at once;
* once every TI is finished, the run's outcome (`deps.run_outcome`; a run with no TIs succeeds), but a
  run someone stopped (`stopped_by`) ends `failed`, with the reason `stopped by <who>`, whatever its TIs
  say: its stopped streaming tries end `success` and its tasks not started `skipped`, yet a stopped run
  did not do its work, and `backfill --reprocess failed` must take it again (ADR 0065).

For every TI it leaves waiting it also says why, in the words `dagline tasks list` shows (`reason`):
`waiting for upstream extract`, `depends on past (run 12: load is failed)`, `retry at 2026-...`,
`waiting for its start signal model.published`. The explanations (`dagline.store.waiting`) call this
very function on the facts the scheduler gathers (`dagline.store.facts`), so they cannot disagree.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import NamedTuple

from dagline.domain.deps import (
    Decision,
    TriggerRule,
    UpstreamCounts,
    depends_on_past_met,
    evaluate_trigger_rule,
    run_outcome,
)
from dagline.domain.states import RunState, TIState

_DECISION_STATE = {
    Decision.RUN: TIState.SCHEDULED,
    Decision.SKIP: TIState.SKIPPED,
    Decision.UPSTREAM_FAILED: TIState.UPSTREAM_FAILED,
}


# finished states a signal can start a task again from
_RERUNNABLE = frozenset({TIState.SUCCESS, TIState.FAILED, TIState.SKIPPED, TIState.UPSTREAM_FAILED})


@dataclasses.dataclass(frozen=True)
class TaskFacts:
    """What the decision needs of a task of the run's DAG version."""

    task_id: str
    upstream: tuple[str, ...] = ()
    trigger_rule: TriggerRule | str = TriggerRule.ALL_SUCCESS
    depends_on_past: bool = False
    start_signals: tuple[str, ...] = ()  # the keys of its `start` rules: it waits for one of them

    @property
    def waits_for_signal(self) -> bool:
        """A task with a `start` rule is not started by its upstream tasks alone."""
        return bool(self.start_signals)


class TIFacts(NamedTuple):
    """What the decision needs of a task instance of the run (a named tuple: the scheduler makes one
    per task instance of every run it decides, many thousand a second)."""

    ti_id: int
    state: str
    next_retry_at: dt.datetime | None = None
    pending_signal: bool = False  # a start or restart action waits for this TI
    pending_restart: bool = False  # a restart waits for it: its retry, if it has to retry, takes that signal


@dataclasses.dataclass(frozen=True)
class Change:
    ti_id: int
    from_state: str
    to_state: str
    by_signal: bool = False  # the pending signal starts this try


@dataclasses.dataclass(frozen=True)
class RunDecision:
    changes: tuple[Change, ...]  # in walk order
    outcome: str | None  # RunState.SUCCESS / FAILED once every TI is finished, else None
    waiting: Mapping[int, str] = dataclasses.field(default_factory=dict)  # ti id -> why it stays (none, up_for_retry)
    reason: str | None = None  # why the run ends as `outcome`, when its TIs alone do not say (a stop)


def decide_run(
    tasks: Sequence[TaskFacts],
    tis: Mapping[str, TIFacts],
    *,
    leaves: Sequence[str],
    previous_states: Mapping[str, str | None],
    now: dt.datetime,
    previous_run: str | None = None,
    reasons: bool = True,
    stopped_by: str | None = None,
) -> RunDecision:
    """Decide one run. `tis` maps task id -> its TI in this run (a task without one is left alone; a TI
    whose task is not in `tasks` still counts for the outcome); `previous_states` maps task id -> the state
    of its TI in the run's previous run (absent or None: there is none), `previous_run` names that run.
    `reasons=False` leaves `waiting` empty (the scheduler acts on the changes alone; wording why each
    waiting TI waits is for `dagline tasks list`). `stopped_by`: who stopped the run, if someone did: once
    its TIs are all finished it ends `failed`."""
    states = {task_id: ti.state for task_id, ti in tis.items()}
    changes: list[Change] = []
    waiting: dict[int, str] = {}
    for task in tasks:
        ti = tis.get(task.task_id)
        if ti is None:
            continue
        state = states[task.task_id]
        if state == TIState.UP_FOR_RETRY:
            if ti.next_retry_at is None or ti.next_retry_at <= now:
                changes.append(Change(ti.ti_id, state, TIState.SCHEDULED, by_signal=ti.pending_restart))
                states[task.task_id] = TIState.SCHEDULED
            elif reasons:
                waiting[ti.ti_id] = f"retry at {ti.next_retry_at.isoformat()}"
            continue
        rerun = ti.pending_signal and state in _RERUNNABLE
        if state != TIState.NONE and not rerun:
            continue
        if task.depends_on_past and not depends_on_past_met(previous_states.get(task.task_id)):
            if reasons:
                run = f"run {previous_run}" if previous_run else "the previous run"
                waiting[ti.ti_id] = (f"depends on past ({run} not done: its {task.task_id} is "
                                     f"{previous_states.get(task.task_id)})")
            continue
        counts = UpstreamCounts.from_states(states[u] for u in task.upstream if u in states)
        decision = evaluate_trigger_rule(task.trigger_rule, counts)
        if rerun and decision != Decision.RUN:
            continue  # finished, and its trigger rule no longer allows a new try
        if decision == Decision.WAIT:
            if reasons:
                unfinished = [u for u in task.upstream if u in states and states[u] not in TIState.FINISHED]
                waiting[ti.ti_id] = f"waiting for upstream {', '.join(unfinished)}" if unfinished else \
                    f"waiting for its trigger rule {TriggerRule(task.trigger_rule).value}"
            continue
        if decision == Decision.RUN and task.waits_for_signal and not ti.pending_signal:
            if reasons:  # its upstream allows it; it waits for its signal
                waiting[ti.ti_id] = _waiting_for_signal(task.start_signals)
            continue
        new_state = _DECISION_STATE[decision]
        changes.append(Change(ti.ti_id, state, new_state, by_signal=decision == Decision.RUN and ti.pending_signal))
        states[task.task_id] = new_state
    outcome = run_outcome(states, [t for t in leaves if t in states]) if states else RunState.SUCCESS
    if outcome is not None and stopped_by:
        return RunDecision(tuple(changes), RunState.FAILED, waiting, reason=f"stopped by {stopped_by}")
    return RunDecision(tuple(changes), outcome, waiting)


def _waiting_for_signal(keys: Sequence[str]) -> str:
    if len(keys) == 1:
        return f"waiting for its start signal {keys[0]}"
    return f"waiting for a start signal: {' or '.join(keys)}"
