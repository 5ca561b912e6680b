"""Loop step 3 and the mini-scheduler: decide the task instances of locked running runs.

For every run: read its TIs (and, for `dependsOnPast` tasks, the TIs of its `previous` run), let
`dagline.domain.run_decision.decide_run` decide (a pure function: a TI in `none` by its trigger rule and
`dependsOnPast`, a TI in `up_for_retry` once its retry time has passed, decisions propagating within
one walk; the run's outcome once its TIs are all finished), then write the decisions, grouped by
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

from sqlalchemy import bindparam, select, update
from sqlalchemy.engine import Connection

from dagline.db.claims import lock_running_runs, running_runs
from dagline.db.models import dag_run_t, dag_t, signal_action_t, ti_t
from dagline.db.transitions import change_runs, change_tis
from dagline.domain.run_decision import RunDecision, TaskFacts, TIFacts, decide_run
from dagline.domain.states import RunState, TIState
from dagline.scheduler.isolation import DagFailed, describe, is_dags_fault, isolated, record_import_error
from dagline.store.dags import DagCache
from dagline.store.timeline import refresh_next_dagrun
from dagline.store.waiting import previous_states


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
    decided = _decide(conn, seen, now=now, dags=dags, on_fault=lambda dag_id, exc: None).decisions
    due = [run.id for run in seen if run.id not in decided or decided[run.id].changes or decided[run.id].outcome]
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

    facts = _decide(conn, runs, now=now, dags=dags, on_fault=record, tis=tis)
    changes: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    by_signal: dict[int, tuple[int, object]] = {}  # ti id -> (run id, task) started by a pending signal
    outcomes: dict[str, list[int]] = collections.defaultdict(list)
    for run_id, decision in facts.decisions.items():
        dag = facts.dag_by_run[run_id]
        for change in decision.changes:
            changes[(change.from_state, change.to_state)].append(change.ti_id)
            if change.by_signal:
                by_signal[change.ti_id] = (run_id, dag.tasks[_task_of(facts.tis_by_run[run_id], change.ti_id)])
        if decision.outcome is not None:
            outcomes[decision.outcome].append(run_id)

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
            kinds = ("restart",) if expected == TIState.UP_FOR_RETRY else ("start", "restart")
            _start_by_signal(conn, started, by_signal, now, kinds)
    finished = []
    for outcome, ids in outcomes.items():
        finished += change_runs(conn, ids, expected=RunState.RUNNING, to=outcome, at=now, who=who,
                                values={"end_date": now})
    result.runs_finished = len(finished)
    if finished:
        conn.execute(update(signal_action_t)
                     .where(signal_action_t.c.dag_run_id.in_([r.id for r in finished]),
                            signal_action_t.c.status == "pending")
                     .values(status="dropped", done_at=now, detail="the run ended first"))
    conn.execute(_EXAMINED, {"run_ids": [run.id for run in runs], "now": now})
    _after_runs_finished(conn, finished, dags, now=now, who=who)
    return result


@dataclasses.dataclass
class _Facts:
    decisions: dict[int, RunDecision]
    tis_by_run: dict  # run id -> {task id: TI row}
    dag_by_run: dict  # run id -> Dag


def _decide(conn: Connection, runs: Sequence, *, now: dt.datetime, dags: DagCache,
            on_fault: Callable[[str, Exception], None], tis: Iterable | None = None) -> _Facts:
    """Each run's `decide_run` decision, from its TIs (read now, unless given) and pending signals as
    read now (reads only). A run whose version cannot be read, or whose decision raises, has none:
    `on_fault(dag_id, error)`."""
    facts = _Facts({}, collections.defaultdict(dict), {})
    if not runs:
        return facts
    tis_by_run = facts.tis_by_run
    if tis is None:
        tis = conn.execute(_TIS_FOR_DECISION, {"run_ids": [run.id for run in runs]})
    for ti in tis:
        tis_by_run[ti.dag_run_id][ti.task_id] = ti

    def guarded(dag_id: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            if not is_dags_fault(exc):
                raise
            on_fault(dag_id, exc)
            return None

    dags.prefetch(conn, {run.dag_version_id for run in runs})
    dag_by_run = facts.dag_by_run
    for run in runs:
        dag = guarded(run.dag_id, dags.get, conn, run.dag_version_id)
        if dag is not None:
            dag_by_run[run.id] = dag
    with_rules = [run.id for run in runs if run.id in dag_by_run and dag_by_run[run.id].has_task_rules]
    pending = pending_signals(conn, with_rules) if with_rules else Pending.none()
    previous_states = _previous_states(conn, [run for run in runs if run.id in dag_by_run], dag_by_run)

    task_facts = dags.task_facts
    remembered = dags.decisions
    for run in runs:
        dag = dag_by_run.get(run.id)
        if dag is None:
            continue
        tasks = task_facts.get(run.dag_version_id)
        if tasks is None:
            if len(task_facts) >= _REMEMBERED_MAX:
                task_facts.clear()
            tasks = task_facts[run.dag_version_id] = [
                TaskFacts(task_id, task.upstream, task.trigger_rule, task.depends_on_past, task.waits_for_signal)
                for task_id, task in dag.tasks.items()]
        ti_facts = {task_id: TIFacts(ti.id, ti.state, ti.next_retry_at, (run.id, task_id) in pending,
                                     (run.id, task_id) in pending.restarts)
                    for task_id, ti in tis_by_run.get(run.id, {}).items()}
        previous = previous_states.get(run.previous_run_id, {})
        # decide_run is pure, and reads `now` only for TIs waiting to retry: without one, the same facts
        # give the same decision, so a run nothing happened to since the last look is not decided again
        retrying = any(f.state == TIState.UP_FOR_RETRY for f in ti_facts.values())
        key = None if retrying else (run.dag_version_id, tuple(ti_facts.items()), tuple(sorted(previous.items())))
        decision = remembered.get(key) if key is not None else None
        if decision is None:
            decision = guarded(run.dag_id, decide_run, tasks, ti_facts, leaves=dag.leaves, previous_states=previous,
                               now=now, reasons=False)
            if decision is None:
                continue
            if key is not None:
                if len(remembered) >= _REMEMBERED_MAX:
                    remembered.clear()
                remembered[key] = decision
        facts.decisions[run.id] = decision
    return facts


_REMEMBERED_MAX = 10_000  # decisions a replica remembers (`DagCache.decisions`), then it starts afresh


class Pending(set):
    """(run id, task id) of the TIs a start or restart signal waits for; `restarts`: those a restart waits for."""

    restarts: set

    @classmethod
    def none(cls) -> Pending:
        pending = cls()
        pending.restarts = set()
        return pending


def pending_signals(conn: Connection, run_ids: Sequence[int]) -> Pending:
    pending = Pending.none()
    for row in conn.execute(_PENDING_SIGNALS, {"run_ids": list(run_ids)}):
        pending.add((row.dag_run_id, row.task_id))
        if row.action == "restart":
            pending.restarts.add((row.dag_run_id, row.task_id))
    return pending


def _task_of(tis: dict, ti_id: int) -> str:
    return next(task_id for task_id, ti in tis.items() if ti.id == ti_id)


def _start_by_signal(conn: Connection, rows: Sequence, by_signal: dict, now: dt.datetime,
                     kinds: Sequence[str] = ("start", "restart")) -> None:
    """The TIs just scheduled by a pending signal: per TI, the oldest pending start or restart action
    becomes `done` with the try it starts (one compare-and-set on `pending` that picks it and returns
    its signal); the TI records its signal and gets its retries afresh."""
    for row in rows:
        run_id, task = by_signal[row.id]
        next_try = row.try_number + 1
        action = conn.execute(_START_ACTION, {"run": run_id, "task": row.task_id, "kinds": list(kinds),
                                              "next_try": next_try, "now": now}).first()
        if action is None:
            continue
        conn.execute(_STARTED_BY_SIGNAL, {"ti": row.id, "seq": action.signal_seq,
                                          "tries": row.try_number + task.retries + 1})


# Statements of every examination, built once with bind parameters: SQLAlchemy then neither rebuilds
# them nor computes their cache key at each call (see `db.claims`).
_TIS_FOR_DECISION = (
    select(ti_t.c.id, ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.state, ti_t.c.next_retry_at, ti_t.c.try_number)
    .where(ti_t.c.dag_run_id.in_(bindparam("run_ids", expanding=True))))
_A = signal_action_t.c
_PENDING_SIGNALS = (
    select(_A.dag_run_id, _A.task_id, _A.action).distinct()
    .where(_A.dag_run_id.in_(bindparam("run_ids", expanding=True)), _A.status == "pending",
           _A.action.in_(("start", "restart"))))
_OLDEST_PENDING = (
    select(_A.id)
    .where(_A.dag_run_id == bindparam("run"), _A.task_id == bindparam("task"), _A.status == "pending",
           _A.action.in_(bindparam("kinds", expanding=True)))
    .order_by(_A.signal_seq, _A.id).limit(1).scalar_subquery())
_START_ACTION = (  # the oldest pending action of the TI becomes done, still only if pending
    update(signal_action_t).where(_A.id == _OLDEST_PENDING, _A.status == "pending")
    .values(status="done", try_number=bindparam("next_try", type_=_A.try_number.type),
            done_at=bindparam("now", type_=_A.done_at.type))
    .returning(_A.id, _A.signal_seq))
_STARTED_BY_SIGNAL = (
    update(ti_t).where(ti_t.c.id == bindparam("ti"))
    .values(signal_seq=bindparam("seq", type_=ti_t.c.signal_seq.type),
            max_tries=bindparam("tries", type_=ti_t.c.max_tries.type),
            stop_requested_at=None, start_date=None, end_date=None))
_EXAMINED = (update(dag_run_t).where(dag_run_t.c.id.in_(bindparam("run_ids", expanding=True)))
             .values(last_scheduling_decision=bindparam("now", type_=dag_run_t.c.last_scheduling_decision.type)))


def _guarded(conn: Connection, dag_id: str, doing: str, fn, *, now: dt.datetime, who: str):
    """`fn()` (reads and pure decisions only), or None after recording the DAG's import error."""
    try:
        return fn()
    except Exception as exc:
        if not is_dags_fault(exc):
            raise
        record_import_error(conn, dag_id, describe(exc, doing), at=now, who=who)
        return None


def _previous_states(conn: Connection, runs: Sequence, dag_by_run: dict) -> dict[int, dict[str, str]]:
    """previous run id -> {task id: state}, for runs that have `dependsOnPast` tasks."""
    return previous_states(conn, [
        run.previous_run_id for run in runs
        if run.previous_run_id is not None and any(t.depends_on_past for t in dag_by_run[run.id].tasks.values())
    ])


def _after_runs_finished(conn: Connection, finished: Sequence, dags: DagCache, *, now: dt.datetime,
                         who: str) -> None:
    """A finished scheduled or manual run frees a `maxActiveRuns` place: let the DAG create runs again.
    A DAG without a schedule whose row names no next run has nothing to refresh (manual runs only)."""
    dag_ids = sorted({r.dag_id for r in finished if r.run_type != "backfill"})
    if not dag_ids:
        return
    rows = conn.execute(select(dag_t.c.dag_id, dag_t.c.current_version_id, dag_t.c.next_dagrun,
                               dag_t.c.next_dagrun_data_interval_start, dag_t.c.next_dagrun_data_interval_end,
                               dag_t.c.next_dagrun_create_after)
                        .where(dag_t.c.dag_id.in_(dag_ids)).order_by(dag_t.c.dag_id)).all()
    dags.prefetch(conn, [row.current_version_id for row in rows])
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
        try:
            with isolated(conn, row.dag_id, "planning the next run", at=now, who=who):
                refresh_next_dagrun(conn, row.dag_id, dag, now=now)
        except DagFailed:
            continue
