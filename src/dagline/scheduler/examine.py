"""Loop step 3 and the mini-scheduler: decide the task instances of locked running runs.

For every run: its facts, as `dagline.store.facts.gather_runs` reads them for the whole batch (its TIs,
the signals pending for them, for `dependsOnPast` tasks the TIs of its `previous` run: the very facts
the explanations of `dagline tasks list` are made of), and the decision of
`dagline.domain.run_decision.decide_run` on them (a pure function: a TI in `none` by its trigger rule and
`dependsOnPast`, a TI in `up_for_retry` once its retry time has passed, decisions propagating within
one walk; the run's outcome once its TIs are all finished); then it writes the decisions, grouped by
(from, to) state, as compare-and-sets with events. Loop step 3 looks at the runs unlocked first and
claims only those where the decision changes something (`examine_running_runs`).

Signals: a TI for which a `start` or `restart` action is pending (`signal_action.status`) may be
scheduled by that signal (`run_decision`); the action is then marked done with the try it starts,
in the same transaction, and the TI records the signal (`signal_seq`, for templates) and gets its
`retries` afresh: signal-started tries do not use up retries. A run that finishes drops the actions
still pending for it.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from sqlalchemy.engine import Connection

from dagline.db.claims import lock_running_runs, running_runs
from dagline.db.transitions import change_runs, change_tis
from dagline.domain.run_decision import RunDecision
from dagline.domain.states import RunState, RunType, SignalAction, TIState
from dagline.scheduler.create_runs import refresh_next_runs
from dagline.scheduler.isolation import describe, is_dags_fault, record_import_error
from dagline.scheduler.signal_starts import STARTING
from dagline.store.dags import DagCache, next_runs_of_dags
from dagline.store.facts import REMEMBERED_MAX, RunFacts, gather_runs
from dagline.store.runs import mark_examined
from dagline.store.signal_actions import (
    drop_pending_actions_of_runs,
    record_started_by_signal,
    take_oldest_pending_start,
)


@dataclasses.dataclass
class ExamineResult:
    tis_changed: int = 0
    runs_finished: int = 0
    scheduled: list[int] = dataclasses.field(default_factory=list)  # the TIs made runnable (`scheduled`)


def examine_running_runs(conn: Connection, *, limit: int, backfill_id: int | None, test_run_id: int | None,
                         now: dt.datetime, dags: DagCache, who: str) -> ExamineResult:
    """Loop step 3: decide the running runs in this replica's scope that have something to decide.

    It looks first without locking (`running_runs`, then the same pure decision as below): the runs
    where the decision changes nothing (every TI waiting on its upstream or a signal, running or done)
    are left alone, neither locked nor written, so an examination that finds nothing is a read. The
    rest are claimed (SKIP LOCKED) and decided again under the lock from a fresh read, which alone is
    written. When the scope holds `limit` runs or more, they are all claimed in turn, least recently
    examined first, as `last_scheduling_decision` orders them (no run waits behind others for ever)."""
    seen = running_runs(conn, limit, backfill_id, test_run_id)
    if len(seen) >= limit:
        return examine_runs(conn, lock_running_runs(conn, limit, backfill_id, test_run_id), now=now, dags=dags,
                            who=who)
    decided = _decide(conn, seen, now=now, dags=dags, on_fault=lambda dag_id, exc: None)
    due = [run.id for run in seen
           if run.id not in decided or decided[run.id].decision.changes or decided[run.id].decision.outcome]
    if not due:
        return ExamineResult()
    return examine_runs(conn, lock_running_runs(conn, limit, backfill_id, test_run_id, run_ids=due), now=now,
                        dags=dags, who=who)


def examine_runs(conn: Connection, runs: Sequence, *, now: dt.datetime, dags: DagCache, who: str,
                 tis: Iterable | None = None) -> ExamineResult:
    """Decide the TIs of these (locked) running runs and finish the runs that are done. `tis`: every
    TI of these runs, if the caller has just read them in this transaction, after locking the runs
    (a signal reaction): they are not read again. Reads are facts to decide from; the writes are
    compare-and-sets on the state read."""
    result = ExamineResult()
    if not runs:
        return result

    def record(dag_id: str, exc: Exception) -> None:  # the run is skipped, its DAG's import error recorded
        record_import_error(conn, dag_id, describe(exc, "examining runs"), at=now, who=who)

    changes: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    by_signal: dict[int, tuple[int, object]] = {}  # ti id -> (run id, task) started by a pending signal
    outcomes: dict[tuple[str, str | None], list[int]] = collections.defaultdict(list)  # (state, reason) -> runs
    for run_id, (facts, decision) in _decide(conn, runs, now=now, dags=dags, on_fault=record, tis=tis).items():
        for change in decision.changes:
            changes[(change.from_state, change.to_state)].append(change.ti_id)
            if change.by_signal:
                by_signal[change.ti_id] = (run_id, facts.dag.tasks[_task_of(facts.rows, change.ti_id)])
        if decision.outcome is not None:
            outcomes[(decision.outcome, decision.reason)].append(run_id)

    for (expected, to), ids in changes.items():
        values = {"end_date": now, "start_date": now} if to in TIState.FINISHED else {}
        if to == TIState.SCHEDULED:
            values = {"next_retry_at": None, "scheduled_at": now}
        changed = change_tis(conn, ids, expected=expected, to=to, at=now, who=who, values=values)
        result.tis_changed += len(changed)
        if to == TIState.SCHEDULED:
            result.scheduled += [r.id for r in changed]
        started = [r for r in changed if r.id in by_signal]
        if started:
            kinds = (SignalAction.RESTART,) if expected == TIState.UP_FOR_RETRY else STARTING
            _start_by_signal(conn, started, by_signal, now, kinds)
    finished = []
    for (outcome, reason), ids in outcomes.items():
        finished += change_runs(conn, ids, expected=RunState.RUNNING, to=outcome, at=now, who=who,
                                values={"end_date": now}, detail=reason)
    result.runs_finished = len(finished)
    if finished:
        drop_pending_actions_of_runs(conn, [r.id for r in finished], now=now)
    mark_examined(conn, [run.id for run in runs], now=now)
    _after_runs_finished(conn, finished, dags, now=now, who=who)
    return result


def _decide(conn: Connection, runs: Sequence, *, now: dt.datetime, dags: DagCache,
            on_fault: Callable[[str, Exception], None], tis: Iterable | None = None) -> dict[int, _Decided]:
    """run id -> each run's facts (`store.facts.gather_runs`: its TIs, read now unless given, and the
    signals pending for them as read now; reads only) and its `decide_run` decision on them. A run whose
    version cannot be read, or whose decision raises, has none: `on_fault(dag_id, error)`."""

    def fault(dag_id: str, exc: Exception) -> None:
        if not is_dags_fault(exc):
            raise exc
        on_fault(dag_id, exc)

    decided: dict[int, _Decided] = {}
    remembered = dags.decisions
    for run_id, facts in gather_runs(conn, runs, dags=dags, on_fault=fault, tis=tis).items():
        # decide_run is pure, and reads `now` only for TIs waiting to retry: without one, the same facts
        # give the same decision, so a run nothing happened to since the last look is not decided again
        retrying = any(f.state == TIState.UP_FOR_RETRY for f in facts.tis.values())
        key = None if retrying else (facts.run.dag_version_id, tuple(facts.tis.items()),
                                     tuple(sorted(facts.previous_states.items())), facts.stopped_by)
        decision = remembered.get(key) if key is not None else None
        if decision is None:
            try:
                decision = facts.decide(now=now)
            except Exception as exc:
                fault(facts.run.dag_id, exc)
                continue
            if key is not None:
                if len(remembered) >= REMEMBERED_MAX:
                    remembered.clear()
                remembered[key] = decision
        decided[run_id] = _Decided(facts, decision)
    return decided


class _Decided(NamedTuple):
    facts: RunFacts
    decision: RunDecision


def _task_of(tis: dict, ti_id: int) -> str:
    return next(task_id for task_id, ti in tis.items() if ti.id == ti_id)


def _start_by_signal(conn: Connection, rows: Sequence, by_signal: dict, now: dt.datetime,
                     kinds: Sequence[str] = STARTING) -> None:
    """The TIs just scheduled by a pending signal: per TI, the oldest pending start or restart action
    becomes `done` with the try it starts (one compare-and-set on `pending` that picks it and returns
    its signal); the TI records its signal and gets its retries afresh."""
    for row in rows:
        run_id, task = by_signal[row.id]
        next_try = row.try_number + 1
        action = take_oldest_pending_start(conn, run_id, row.task_id, kinds=kinds, next_try=next_try, now=now)
        if action is None:
            continue
        record_started_by_signal(conn, row.id, seq=action.signal_seq, max_tries=row.try_number + task.retries + 1)


def _guarded(conn: Connection, dag_id: str, doing: str, fn, *, now: dt.datetime, who: str):
    """`fn()` (reads and pure decisions only), or None after recording the DAG's import error."""
    try:
        return fn()
    except Exception as exc:
        if not is_dags_fault(exc):
            raise
        record_import_error(conn, dag_id, describe(exc, doing), at=now, who=who)
        return None


def _after_runs_finished(conn: Connection, finished: Sequence, dags: DagCache, *, now: dt.datetime,
                         who: str) -> None:
    """A finished scheduled or manual run frees a `maxActiveRuns` place: let the DAG create runs again.
    A DAG without a schedule whose row names no next run has nothing to refresh (manual runs only)."""
    dag_ids = sorted({r.dag_id for r in finished if r.run_type != RunType.BACKFILL})
    if not dag_ids:
        return
    rows = next_runs_of_dags(conn, dag_ids)
    dags.prefetch(conn, [row.current_version_id for row in rows])
    wanted = []
    for row in rows:
        if row.current_version_id is None:
            continue
        dag = _guarded(conn, row.dag_id, "planning the next run",
                       lambda row=row: dags.get(conn, row.current_version_id), now=now, who=who)
        if dag is None:
            continue
        if dag.spec.schedule is None and all(value is None for value in (
                row.next_dagrun, row.next_dagrun_data_interval_start, row.next_dagrun_data_interval_end,
                row.next_dagrun_create_after)):
            continue  # refreshing would write these same empty values (no savepoint, no statement)
        wanted.append(row)
    refresh_next_runs(conn, wanted, now=now, dags=dags, who=who)  # set-based; a DAG that fails: its import error
