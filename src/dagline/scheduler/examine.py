"""Loop step 3 and the mini-scheduler: decide the task instances of locked running runs.

For every run: read its TIs (and, for `dependsOnPast` tasks, the TIs of its `previous` run), let
`dagline.run_decision.decide_run` decide (a pure function: a TI in `none` by its trigger rule and
`dependsOnPast`, a TI in `up_for_retry` once its retry time has passed, decisions propagating within
one walk; the run's outcome once its TIs are all finished), then write the decisions, grouped by
(from, to) state, as compare-and-sets with events. Loop step 3 looks at the runs unlocked first and
claims only those where the decision changes something (`examine_running_runs`).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence

from sqlalchemy import select, update
from sqlalchemy.engine import Connection

from dagline.dagstore import DagCache
from dagline.db.claims import lock_running_runs, running_runs
from dagline.db.models import dag_run_t, dag_t, ti_t
from dagline.db.transitions import change_runs, change_tis
from dagline.run_decision import RunDecision, TaskFacts, TIFacts, decide_run
from dagline.scheduler.isolation import DagFailed, describe, is_dags_fault, isolated, record_import_error
from dagline.states import RunState, TIState
from dagline.timeline import refresh_next_dagrun
from dagline.waiting import previous_states


@dataclasses.dataclass
class ExamineResult:
    tis_changed: int = 0
    runs_finished: int = 0


def examine_running_runs(conn: Connection, *, limit: int, backfill_id: int | None, test_run_id: int | None,
                         now: dt.datetime, dags: DagCache, who: str) -> ExamineResult:
    """Loop step 3: decide the running runs in this replica's scope that have something to decide.

    It looks first without locking (`running_runs`, then the same pure decision as below): the runs
    where the decision changes nothing (every TI waiting on its upstream, running or done) are left
    alone, neither locked nor written, so an examination that finds nothing is a read. The rest are
    claimed (SKIP LOCKED) and decided again under the lock from a fresh read, which alone is written.
    When the scope holds `limit` runs or more, they are all claimed in turn, least recently examined
    first, as `last_scheduling_decision` orders them (no run waits behind others for ever)."""
    seen = running_runs(conn, limit, backfill_id, test_run_id)
    if len(seen) >= limit:
        return examine_runs(conn, lock_running_runs(conn, limit, backfill_id, test_run_id), now=now, dags=dags,
                            who=who)
    decided = _decide(conn, seen, now=now, dags=dags, on_fault=lambda dag_id, exc: None)
    due = [run.id for run in seen if run.id not in decided or decided[run.id].changes or decided[run.id].outcome]
    if not due:
        return ExamineResult()
    return examine_runs(conn, lock_running_runs(conn, limit, backfill_id, test_run_id, run_ids=due), now=now,
                        dags=dags, who=who)


def examine_runs(conn: Connection, runs: Sequence, *, now: dt.datetime, dags: DagCache, who: str) -> ExamineResult:
    """Decide the TIs of these (locked) running runs and finish the runs that are done."""
    result = ExamineResult()
    if not runs:
        return result

    def record(dag_id: str, exc: Exception) -> None:  # the run is skipped, its DAG's import error recorded
        record_import_error(conn, dag_id, describe(exc, "examining runs"), at=now, who=who)

    changes: dict[tuple[str, str], list[int]] = collections.defaultdict(list)
    outcomes: dict[str, list[int]] = collections.defaultdict(list)
    for run_id, decision in _decide(conn, runs, now=now, dags=dags, on_fault=record).items():
        for change in decision.changes:
            changes[(change.from_state, change.to_state)].append(change.ti_id)
        if decision.outcome is not None:
            outcomes[decision.outcome].append(run_id)

    for (expected, to), ids in changes.items():
        values = {"end_date": now, "start_date": now} if to in TIState.FINISHED else {}
        if to == TIState.SCHEDULED:
            values = {"next_retry_at": None, "scheduled_at": now}
        result.tis_changed += len(change_tis(conn, ids, expected=expected, to=to, at=now, who=who, values=values))
    finished = []
    for outcome, ids in outcomes.items():
        finished += change_runs(conn, ids, expected=RunState.RUNNING, to=outcome, at=now, who=who,
                                values={"end_date": now})
    result.runs_finished = len(finished)
    conn.execute(update(dag_run_t).where(dag_run_t.c.id.in_([run.id for run in runs]))
                 .values(last_scheduling_decision=now))
    _after_runs_finished(conn, finished, dags, now=now, who=who)
    return result


def _decide(conn: Connection, runs: Sequence, *, now: dt.datetime, dags: DagCache,
            on_fault: Callable[[str, Exception], None]) -> dict[int, RunDecision]:
    """run id -> `decide_run`'s decision, from the runs' TIs as read now (reads only). A run whose
    version cannot be read, or whose decision raises, has none: `on_fault(dag_id, error)` is told."""
    if not runs:
        return {}
    tis_by_run: dict[int, dict[str, object]] = collections.defaultdict(dict)
    for ti in conn.execute(
        select(ti_t.c.id, ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.state, ti_t.c.next_retry_at)
        .where(ti_t.c.dag_run_id.in_([run.id for run in runs]))
    ):
        tis_by_run[ti.dag_run_id][ti.task_id] = ti

    def guarded(dag_id: str, fn):
        try:
            return fn()
        except Exception as exc:
            if not is_dags_fault(exc):
                raise
            on_fault(dag_id, exc)
            return None

    dags.prefetch(conn, {run.dag_version_id for run in runs})
    dag_by_run = {}
    for run in runs:
        dag = guarded(run.dag_id, lambda run=run: dags.get(conn, run.dag_version_id))
        if dag is not None:
            dag_by_run[run.id] = dag
    previous_states = _previous_states(conn, [run for run in runs if run.id in dag_by_run], dag_by_run)

    decisions: dict[int, RunDecision] = {}
    task_facts: dict[int, list[TaskFacts]] = {}  # per DAG version
    for run in runs:
        dag = dag_by_run.get(run.id)
        if dag is None:
            continue
        if run.dag_version_id not in task_facts:
            task_facts[run.dag_version_id] = [TaskFacts(task_id, task.upstream, task.trigger_rule, task.depends_on_past)
                                              for task_id, task in dag.tasks.items()]
        tis = tis_by_run.get(run.id, {})
        previous = previous_states.get(run.previous_run_id, {})
        # decide_run is pure, and reads `now` only for TIs waiting to retry: without one, the same facts
        # give the same decision, so a run nothing happened to since the last look is not decided again
        key = None if any(ti.state == TIState.UP_FOR_RETRY for ti in tis.values()) else (
            run.dag_version_id, tuple((task_id, ti.id, ti.state) for task_id, ti in tis.items()),
            tuple(sorted(previous.items())))
        remembered = dags.decisions
        decision = remembered.get(key) if key is not None else None
        if decision is None:
            decision = guarded(run.dag_id, lambda run=run, dag=dag, tis=tis, previous=previous: decide_run(
                task_facts[run.dag_version_id],
                {task_id: TIFacts(ti.id, ti.state, ti.next_retry_at) for task_id, ti in tis.items()},
                leaves=dag.leaves,
                previous_states=previous,
                now=now,
            ))
            if decision is not None and key is not None:
                if len(remembered) >= _REMEMBERED_MAX:
                    remembered.clear()
                remembered[key] = decision
        if decision is not None:
            decisions[run.id] = decision
    return decisions


_REMEMBERED_MAX = 10_000  # decisions a replica remembers (`DagCache.decisions`), then it starts afresh


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
