"""The facts the scheduler decides with, gathered in ONE place for its decisions and for every explanation
of them (`dagline tasks list` reasons, `dagline runs show`, the web run page: `dagline.store.waiting`).

Each decision is a pure function in `dagline.domain`; this module reads what it takes, as it takes it:

* deciding a running run's task instances (`run_decision.decide_run`: loop step 3, the mini-scheduler,
  signal reactions): `gather_runs` gives each run's `RunFacts`: its DAG version's tasks as `TaskFacts`
  (upstream, trigger rule, `dependsOnPast`, the keys of its `start` signal rules), its task instances
  as `TIFacts` (state, retry time, whether a start or restart signal waits for it), and the states of
  its previous run's task instances (`dependsOnPast`);
* queueing scheduled task instances (`admission.admit`: the critical section): `gather_queueing` gives
  the `Candidate`s (with `maxActiveTisPerDag` of their run's version), what is taken (`admission_load`:
  slots per pool, task instances queued or running per DAG and per task) and the `Limits` (pool sizes,
  `maxActiveTasks` of each DAG's current version);
* starting queued runs (`admission.max_active_runs_reason`: loop step 2): `running_run_counts` (by DAG
  and backfill; test runs do not count), `running_backfills` (their own `maxActiveRuns`, paused or not).

No decision reads a deadline: a missed one is recorded (housekeeping) and fires callbacks, and holds
nothing back, so none is gathered here.

The scheduler gathers for a whole batch of runs at once: one statement per kind of fact (task
instances, pending signals, previous runs' states), never one per run or task instance, and only where
the fact can matter (pending signals for runs whose DAG has signal rules, previous states for runs with
`dependsOnPast` tasks). An explanation gathers for one run with these same functions and hands the
result to the same decision, asking for its words (`reasons=True`). Which rows the scheduler looks at
and locks is `dagline.db.claims`'s; what it learns from them is this module's. Reads only.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import bindparam, func, or_, select
from sqlalchemy.engine import Connection

from dagline.db.claims import startable_runs
from dagline.db.models import backfill_t, dag_run_t, dag_t, pool_t, signal_action_t, ti_t
from dagline.domain.admission import Candidate, Limits, Load
from dagline.domain.run_decision import RunDecision, TaskFacts, TIFacts, decide_run
from dagline.domain.states import BackfillState, RunState, SignalAction, SignalActionStatus, TIState
from dagline.spec import Dag
from dagline.store.dags import DagCache

OnFault = Callable[[str, Exception], None]
"""Told of an error met while reading one DAG's version (dag id, error); it raises what is not that DAG's
fault, else the DAG's runs or task instances are left out of the facts."""

REMEMBERED_MAX = 10_000  # entries of `DagCache.task_facts` (and the scheduler's `DagCache.decisions`), then afresh


# --- deciding the task instances of running runs ------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunFacts:
    """One running run, as `decide_run` takes it."""

    run: Any  # the run's row (`claims.RUN_FOR_DECISION` at least)
    dag: Dag  # the run's DAG version
    tasks: Sequence[TaskFacts]  # in the version's (topological) order
    tis: Mapping[str, TIFacts]  # task id -> its task instance in the run
    rows: Mapping[str, Any]  # task id -> the task instance's row, as read
    previous_states: Mapping[str, str]  # task id -> state in the previous run (read for `dependsOnPast` tasks)

    def decide(self, *, now: dt.datetime, reasons: bool = False, previous_run: str | None = None) -> RunDecision:
        """The scheduler's decision on these facts; with `reasons`, worded for people (`previous_run`: the
        run id of the previous run, named in a `dependsOnPast` wait)."""
        return decide_run(self.tasks, self.tis, leaves=self.dag.leaves, previous_states=self.previous_states,
                          now=now, previous_run=previous_run, reasons=reasons, stopped_by=self.stopped_by)

    @property
    def stopped_by(self) -> str | None:
        """Who stopped the run (`dagline runs stop`), if someone did."""
        return getattr(self.run, "stopped_by", None)


def gather_runs(conn: Connection, runs: Sequence, *, dags: DagCache, on_fault: OnFault,
                tis: Iterable | None = None) -> dict[int, RunFacts]:
    """run id -> `RunFacts` of these running runs, in a few statements for the whole batch: their task
    instances (unless `tis` gives them all, as just read in this transaction), the start and restart
    actions pending for them, their previous runs' task instance states, and the missing DAG versions.
    A run whose version cannot be read (`on_fault`) is left out."""
    if not runs:
        return {}
    rows_by_run: dict[int, dict[str, Any]] = collections.defaultdict(dict)
    if tis is None:
        tis = conn.execute(_TIS_FOR_DECISION, {"run_ids": [run.id for run in runs]})
    for ti in tis:
        rows_by_run[ti.dag_run_id][ti.task_id] = ti
    dags.prefetch(conn, {run.dag_version_id for run in runs})
    dag_by_run: dict[int, Dag] = {}
    for run in runs:
        try:
            dag_by_run[run.id] = dags.get(conn, run.dag_version_id)
        except Exception as exc:  # noqa: BLE001 - `on_fault` raises what is not the DAG's fault
            on_fault(run.dag_id, exc)
    readable = [run for run in runs if run.id in dag_by_run]
    with_rules = [run.id for run in readable if dag_by_run[run.id].has_task_rules]
    pending = pending_signals(conn, with_rules) if with_rules else Pending.none()
    previous = previous_states(conn, [
        run.previous_run_id for run in readable
        if run.previous_run_id is not None and any(t.depends_on_past for t in dag_by_run[run.id].tasks.values())])

    found = {}
    for run in readable:
        rows = rows_by_run.get(run.id, {})
        found[run.id] = RunFacts(
            run, dag_by_run[run.id], task_facts(dags, run.dag_version_id, dag_by_run[run.id]),
            {task_id: TIFacts(ti.id, ti.state, ti.next_retry_at, (run.id, task_id) in pending,
                              (run.id, task_id) in pending.restarts)
             for task_id, ti in rows.items()},
            rows, previous.get(run.previous_run_id, {}))
    return found


def task_facts(dags: DagCache, version_id: int, dag: Dag) -> list[TaskFacts]:
    """What a run decision needs of each task of a DAG version, made once per version (`DagCache.task_facts`)."""
    known = dags.task_facts.get(version_id)
    if known is None:
        if len(dags.task_facts) >= REMEMBERED_MAX:
            dags.task_facts.clear()
        known = dags.task_facts[version_id] = [
            TaskFacts(task_id, task.upstream, task.trigger_rule, task.depends_on_past,
                      tuple(rule.signal for rule in task.on if rule.action == SignalAction.START))
            for task_id, task in dag.tasks.items()]
    return known


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
        if row.action == SignalAction.RESTART:
            pending.restarts.add((row.dag_run_id, row.task_id))
    return pending


def previous_states(conn: Connection, previous_run_ids: Iterable[int]) -> dict[int, dict[str, str]]:
    """previous run id -> {task id: state} (for `dependsOnPast`)."""
    wanted = sorted(set(previous_run_ids))
    if not wanted:
        return {}
    found: dict[int, dict[str, str]] = collections.defaultdict(dict)
    for row in conn.execute(_STATES_OF_RUNS, {"run_ids": wanted}):
        found[row.dag_run_id][row.task_id] = row.state
    return found


# --- queueing scheduled task instances ------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class QueueingFacts:
    """What `admission.admit` takes."""

    candidates: list[Candidate]  # in the order given; those of DAGs whose versions cannot be read left out
    load: Load
    limits: Limits


def gather_queueing(conn: Connection, rows: Sequence, *, pools: Mapping[str, int], dags: DagCache,
                    executor_slots: int, on_fault: OnFault) -> QueueingFacts:
    """The admission facts of these scheduled task instances (rows as `claims.lock_schedulable_tis` gives
    them, in that order; `pools`: pool -> slots, as read or locked by the caller). A DAG whose current
    version, or a candidate's run's version, cannot be read (`on_fault`) has no candidate."""
    dag_ids = sorted({row.dag_id for row in rows})
    load = admission_load(conn, dag_ids)
    current = {row.dag_id: row.current_version_id for row in rows}  # maxActiveTasks: the current spec's
    dags.prefetch(conn, {row.dag_version_id for row in rows} | set(current.values()))
    max_active_tasks: dict[str, int] = {}
    broken: set[str] = set()
    for dag_id in dag_ids:
        try:
            version_id = current[dag_id]
            dag = dags.get(conn, version_id) if version_id is not None else dags.current(conn, dag_id)[1]
            max_active_tasks[dag_id] = dag.spec.max_active_tasks
        except Exception as exc:  # noqa: BLE001 - `on_fault` raises what is not the DAG's fault
            on_fault(dag_id, exc)
            broken.add(dag_id)
    per_task: dict[int, int | None] = {}  # maxActiveTisPerDag: of the run's version
    for row in rows:
        if row.dag_id in broken:
            continue
        try:
            per_task[row.id] = dags.get(conn, row.dag_version_id).tasks[row.task_id].max_active_tis_per_dag
        except Exception as exc:  # noqa: BLE001 - as above
            on_fault(row.dag_id, exc)
            broken.add(row.dag_id)
    candidates = [Candidate(row.id, row.dag_id, row.task_id, row.pool, row.pool_slots, per_task[row.id])
                  for row in rows if row.dag_id not in broken]
    return QueueingFacts(candidates, load, Limits(pool_slots=pools, max_active_tasks=max_active_tasks,
                                                  executor_slots=executor_slots))


def admission_load(conn: Connection, dag_ids: Iterable[str]) -> Load:
    """What is taken now: slots per pool (all DAGs), TIs queued or running per DAG and per (DAG, task)
    of `dag_ids`; in one read of the queued and running TIs, grouped."""
    wanted = set(dag_ids)
    pool_used: collections.Counter = collections.Counter()
    dag_active: collections.Counter = collections.Counter()
    task_active: collections.Counter = collections.Counter()
    for pool, dag_id, task_id, count, slots in conn.execute(_ACTIVE_LOAD):
        pool_used[pool] += slots or 0
        if dag_id in wanted:
            dag_active[dag_id] += count
            task_active[(dag_id, task_id)] += count
    return Load(pool_used=pool_used, dag_active=dag_active, task_active=task_active)


_ANY_SCHEDULED = select(ti_t.c.id).where(ti_t.c.state == TIState.SCHEDULED).limit(1)  # built once


def any_scheduled(conn: Connection) -> bool:
    """Whether any task instance at all is `scheduled` (one row of an index, no lock): when none is, the
    critical section has nothing to queue and leaves the pool rows alone."""
    return conn.execute(_ANY_SCHEDULED).first() is not None


def pool_sizes(conn: Connection) -> dict[str, int]:
    """pool -> slots, as read (the critical section has them from its lock: `claims.lock_pools_nowait`)."""
    return dict(conn.execute(select(pool_t.c.name, pool_t.c.slots)).all())


# --- starting queued runs ------------------------------------------------------------------------


def running_run_counts(conn: Connection, dag_ids: Sequence[str]) -> dict[str, dict[int | None, int]]:
    """dag id -> backfill id (None for scheduled and manual runs) -> running runs; test runs do not count."""
    counts: dict[str, dict[int | None, int]] = collections.defaultdict(dict)
    for dag_id, backfill, count in conn.execute(
        select(dag_run_t.c.dag_id, dag_run_t.c.backfill_id, func.count())
        .where(dag_run_t.c.dag_id.in_(list(dag_ids)), dag_run_t.c.state == RunState.RUNNING, ~dag_run_t.c.is_test)
        .group_by(dag_run_t.c.dag_id, dag_run_t.c.backfill_id)
    ):
        counts[dag_id][backfill] = count
    return counts


def running_backfills(conn: Connection, dag_ids: Sequence[str], only: int | None = None) -> dict[str, list]:
    """dag id -> its running backfills (paused ones too: `is_paused`), by id; with `only`, that one alone."""
    stmt = (
        select(backfill_t.c.id, backfill_t.c.dag_id, backfill_t.c.max_active_runs, backfill_t.c.run_backwards,
               backfill_t.c.is_paused)
        .where(backfill_t.c.dag_id.in_(list(dag_ids)), backfill_t.c.state == BackfillState.RUNNING)
        .order_by(backfill_t.c.id)
    )
    if only is not None:
        stmt = stmt.where(backfill_t.c.id == only)
    found: dict[str, list] = collections.defaultdict(list)
    for row in conn.execute(stmt):
        found[row.dag_id].append(row)
    return found


# Statements of every examination, built once with bind parameters: SQLAlchemy then neither rebuilds them
# nor computes their cache key at each call (see `db.claims`).
_TIS_FOR_DECISION = (
    select(ti_t.c.id, ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.state, ti_t.c.next_retry_at, ti_t.c.try_number)
    .where(ti_t.c.dag_run_id.in_(bindparam("run_ids", expanding=True))))
_A = signal_action_t.c
_PENDING_SIGNALS = (
    select(_A.dag_run_id, _A.task_id, _A.action).distinct()
    .where(_A.dag_run_id.in_(bindparam("run_ids", expanding=True)), _A.status == SignalActionStatus.PENDING,
           _A.action.in_((SignalAction.START, SignalAction.RESTART))))
_STATES_OF_RUNS = (select(ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.state)
                   .where(ti_t.c.dag_run_id.in_(bindparam("run_ids", expanding=True))))
_ACTIVE_LOAD = (  # the critical section reads it at every queueing
    select(ti_t.c.pool, ti_t.c.dag_id, ti_t.c.task_id, func.count(), func.sum(ti_t.c.pool_slots))
    .where(ti_t.c.state.in_(TIState.ACTIVE)).group_by(ti_t.c.pool, ti_t.c.dag_id, ti_t.c.task_id))


def current_version_ids(conn: Connection, dag_ids: Sequence[str]) -> dict[str, int | None]:
    """dag_id -> its current version id, for those of `dag_ids` that exist."""
    return dict(conn.execute(
        select(dag_t.c.dag_id, dag_t.c.current_version_id).where(dag_t.c.dag_id.in_(dag_ids))).all())


def first_queued_runs(conn: Connection, dag_ids: Sequence[str], now: dt.datetime, cap: int,
                      only: int | None, waited_since: dt.datetime | None) -> list:
    """(id, dag_id, backfill_id, oldest, newest) of the due queued runs (`claims.startable_runs`) of
    `dag_ids` (of backfill `only` alone, if given) among the first `cap` of their (DAG, backfill) in either
    direction of logical date (ties by id): `oldest`/`newest` are their ranks. One query (window
    functions, on both databases)."""
    partition = (dag_run_t.c.dag_id, dag_run_t.c.backfill_id)
    oldest = func.row_number().over(partition_by=partition, order_by=(dag_run_t.c.logical_date, dag_run_t.c.id))
    newest = func.row_number().over(partition_by=partition,
                                    order_by=(dag_run_t.c.logical_date.desc(), dag_run_t.c.id))
    due = (
        select(dag_run_t.c.id, dag_run_t.c.dag_id, dag_run_t.c.backfill_id, oldest.label("oldest"),
               newest.label("newest"))
        .where(dag_run_t.c.dag_id.in_(dag_ids), *startable_runs(now, waited_since))
    )
    if only is not None:
        due = due.where(dag_run_t.c.backfill_id == only)
    due = due.subquery()
    return conn.execute(select(due).where(or_(due.c.oldest <= cap, due.c.newest <= cap))).all()
