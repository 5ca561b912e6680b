"""Operations on runs that people ask for: trigger a manual run, create a test run (`dags test`),
clear task instances to run again, stop running tries (`tasks stop`, `runs stop`), and cancel runs
that have not started (a cancelled backfill, a deleted DAG)."""

from __future__ import annotations

import datetime as dt
import weakref
from collections.abc import Iterable

from sqlalchemy import and_, bindparam, func, or_, select, update
from sqlalchemy.engine import Connection

from dagline.db.claims import lock_dag, lock_run_for_signal
from dagline.db.engine import Database
from dagline.db.models import dag_run_t, dag_t, signal_action_t, ti_t
from dagline.db.transitions import change_runs, change_tis, request_stop
from dagline.domain.states import RunState, RunType, SignalActionStatus, TIState
from dagline.errors import InvalidInput, NotFound, OperationFailed
from dagline.limits import MAX_ROW_ID
from dagline.store.dags import DagCache, require_dag
from dagline.store.timeline import NewRun, insert_runs, make_run_id, on_timeline, timetable_for

# DAG versions never change: one cache per database for every trigger this process makes
_versions: weakref.WeakKeyDictionary[Database, DagCache] = weakref.WeakKeyDictionary()


def trigger_run(
    db: Database, dag_id: str, *, now: dt.datetime, logical_date: dt.datetime | None = None,
    conf: dict | None = None, who: str = "cli", run_id: str | None = None,
):
    """Create a manual run (queued; it starts once its logical date has come). Returns the run row.

    With `run_id` the trigger is idempotent: if the DAG already has a run of that id, that run is
    returned and nothing is written (a Kubernetes DagRun object handled by two replicas, or again
    after a restart, triggers once; the unique index on (dag_id, run_id) backs this up). The same run
    id with another logical date or conf is a conflict, refused: a run id names one request."""
    if conf is not None and not isinstance(conf, dict):
        raise InvalidInput("must be a JSON object, e.g. '{\"out\": \"/tmp/x\"}'", field="--conf")
    with db.begin() as conn:
        row = lock_dag(conn, dag_id)
        if row is None or not row.is_active:
            require_dag(conn, dag_id)  # the error that says why
        if run_id is not None:
            seen = conn.execute(select(dag_run_t).where(dag_run_t.c.dag_id == dag_id,
                                                        dag_run_t.c.run_id == run_id)).first()
            if seen is not None:
                _refuse_other_arguments(seen, logical_date, conf)
                return seen
        version_id = row.current_version_id
        dag = _versions.setdefault(db, DagCache()).get(conn, version_id)
        when = logical_date or now
        wanted = run_id or make_run_id(RunType.MANUAL, when)
        # one look for both: a live run at this date (refused), and whether the run id is free
        found = conn.execute(_AT_DATE_OR_NAMED, {"dag_id": dag_id, "when": when, "run_id": wanted}).all()
        existing = next((row for row in found if row.logical_date == when and not row.is_test
                         and row.state != RunState.OVERRIDDEN), None)
        taken = any(row.run_id == wanted for row in found)
        if existing is not None:
            raise OperationFailed(
                f"DAG {dag_id!r} already has run {existing.run_id!r} ({existing.state}) at logical date "
                f"{when.isoformat()}; clear it (`dagline tasks clear {existing.id}`) or backfill with --reprocess")
        interval = timetable_for(dag).manual_interval(when)
        chosen = None if taken and run_id is None else wanted  # a generated id taken: `insert_runs` numbers it
        [run_pk] = insert_runs(conn, dag=dag, version_id=version_id, run_type=RunType.MANUAL,
                               runs=[NewRun(when, interval, when, conf=conf, run_id=chosen)], now=now, who=who)
        return conn.execute(_RUN_BY_ID, {"id": run_pk}).one()


_R = dag_run_t.c
_AT_DATE_OR_NAMED = select(_R.id, _R.run_id, _R.state, _R.logical_date, _R.is_test).where(  # built once
    _R.dag_id == bindparam("dag_id"),
    or_(and_(_R.logical_date == bindparam("when", type_=_R.logical_date.type), on_timeline()),
        _R.run_id == bindparam("run_id")))
_RUN_BY_ID = select(dag_run_t).where(_R.id == bindparam("id"))


def _refuse_other_arguments(run, logical_date: dt.datetime | None, conf: dict | None) -> None:
    differences = []
    if logical_date is not None and run.logical_date != logical_date:
        differences.append(f"logical date {logical_date.isoformat()}, not {run.logical_date.isoformat()}")
    if (conf or {}) != (run.conf or {}):
        differences.append(f"conf {conf or {}}, not {run.conf or {}}")
    if differences:
        raise InvalidInput(f"run {run.run_id!r} of DAG {run.dag_id!r} exists with other arguments "
                           f"({'; '.join(differences)}): a run id names one trigger; choose another id",
                           field="run_id")


def create_test_run(
    db: Database, dag_id: str, *, now: dt.datetime, logical_date: dt.datetime | None = None,
    conf: dict | None = None, who: str = "dags-test",
):
    """Create the run of `dagline dags test`: a `manual` run flagged `is_test`, on the DAG's current
    version, already `running` (a test runs now: paused or not, whatever `maxActiveRuns` and its
    logical date say). It is not on the timeline (see `timeline`): it has no `previous`, holds no
    logical date and is left alone by scheduler replicas. Returns the run row."""
    if conf is not None and not isinstance(conf, dict):
        raise InvalidInput("must be a JSON object, e.g. '{\"out\": \"/tmp/x\"}'", field="--conf")
    cache = DagCache()
    with db.begin() as conn:
        require_dag(conn, dag_id)
        version_id, dag = cache.current(conn, dag_id)
        when = logical_date or now
        interval = timetable_for(dag).manual_interval(when)
        [run_pk] = insert_runs(conn, dag=dag, version_id=version_id, run_type=RunType.MANUAL, is_test=True,
                               runs=[NewRun(when, interval, now, conf=conf)], now=now, who=who)
        change_runs(conn, [run_pk], expected=RunState.QUEUED, to=RunState.RUNNING, at=now, who=who,
                    values={"start_date": now}, detail="a test run starts at once")
        return conn.execute(select(dag_run_t).where(dag_run_t.c.id == run_pk)).one()


def end_test_run(db: Database, run_pk: int, *, now: dt.datetime, reason: str, who: str = "dags-test") -> bool:
    """Fail a test run its `dags test` process leaves unfinished (interrupted, or nothing could move it):
    its task instances that never started are `skipped`, those queued, running or waiting for a retry
    `failed`, each with `reason`. Returns whether the run was still running."""
    with db.begin() as conn:
        tis = conn.execute(select(ti_t.c.id, ti_t.c.state).where(ti_t.c.dag_run_id == run_pk)).all()
        for state in sorted({ti.state for ti in tis} - TIState.FINISHED):
            to = TIState.SKIPPED if state in (TIState.NONE, TIState.SCHEDULED) else TIState.FAILED
            change_tis(conn, [ti.id for ti in tis if ti.state == state], expected=state, to=to, at=now, who=who,
                       values={"end_date": now}, detail=reason)
        return bool(change_runs(conn, [run_pk], expected=RunState.RUNNING, to=RunState.FAILED, at=now, who=who,
                                values={"end_date": now}, detail=reason))


def find_run(conn: Connection, run_ref: str, *, namespaces: Iterable[str] | None = None):
    """A run by numeric id or by run id string (`scheduled__2026-...`). With `namespaces`, only the runs of
    those namespaces' DAGs are looked at: one of another namespace is not found, and a run id string that
    other namespaces' DAGs share too is ambiguous only among these (no refusal names another's DAG)."""
    cond = dag_run_t.c.run_id == run_ref
    if str(run_ref).isascii() and str(run_ref).isdigit() and int(run_ref) <= MAX_ROW_ID:
        cond = or_(dag_run_t.c.id == int(run_ref), cond)
    stmt = select(dag_run_t).where(cond).order_by(dag_run_t.c.id)
    if namespaces is not None:
        owned = select(dag_t.c.dag_id).where(dag_t.c.namespace.in_(sorted(namespaces)))
        stmt = stmt.where(dag_run_t.c.dag_id.in_(owned))
    rows = conn.execute(stmt).all()
    if not rows:
        where = "" if namespaces is None else f" in namespace {', '.join(map(repr, sorted(namespaces)))}"
        raise NotFound(f"unknown run {run_ref!r}{where} (see `dagline runs list`)")
    if len(rows) > 1:
        numeric = [r for r in rows if str(r.id) == str(run_ref)]
        if numeric:
            return numeric[0]
        shared = ", ".join(sorted({r.dag_id for r in rows}))
        raise OperationFailed(f"run id {run_ref!r} exists in several DAGs ({shared}): use the numeric id")
    return rows[0]


def clear_tasks(
    db: Database, run_ref: str, task_ids: list[str] | None = None, *, downstream: bool = False,
    failed_only: bool = False, now: dt.datetime, who: str = "cli", dry_run: bool = False,
) -> tuple[list[str], list[str]]:
    """Reset task instances so they run again on the run's own DAG version; the run returns to running.
    Returns (cleared task ids, task ids left alone because they are queued or running). With `dry_run`,
    what would be cleared, and nothing is written."""
    cache = DagCache()
    with db.begin() as conn:
        run = find_run(conn, run_ref)
        if run.state == RunState.OVERRIDDEN:
            raise OperationFailed(f"run {run.run_id!r} was overridden by a backfill; clear the run that replaced it")
        require_dag(conn, run.dag_id)
        lock_dag(conn, run.dag_id)
        dag = cache.get(conn, run.dag_version_id)
        tis = {row.task_id: row for row in conn.execute(select(ti_t).where(ti_t.c.dag_run_id == run.id))}
        wanted = list(task_ids or tis)
        unknown = [t for t in wanted if t not in tis]
        if unknown:
            raise InvalidInput(f"run {run.run_id!r} has no task {', '.join(map(repr, unknown))} "
                               f"(it has: {', '.join(tis)})", field="TASK_ID")
        selected = set(wanted)
        if downstream:
            stack = list(wanted)
            while stack:
                for child in dag.downstream.get(stack.pop(), ()):
                    if child not in selected and child in tis:
                        selected.add(child)
                        stack.append(child)
        if failed_only:
            selected = {t for t in selected if tis[t].state in (TIState.FAILED, TIState.UPSTREAM_FAILED)}
        busy = sorted(t for t in selected if tis[t].state in TIState.ACTIVE)
        cleared = []
        for task_id in sorted(selected - set(busy)):
            ti = tis[task_id]
            if ti.state == TIState.NONE:
                continue
            if dry_run:
                cleared.append(task_id)
                continue
            retries = dag.tasks[task_id].retries if task_id in dag.tasks else ti.max_tries - 1
            if change_tis(conn, [ti.id], expected=ti.state, to=TIState.NONE, at=now, who=who, detail="cleared",
                          values={"max_tries": ti.try_number + retries + 1, "next_retry_at": None,
                                  "start_date": None, "end_date": None}):
                cleared.append(task_id)
        if dry_run:
            return cleared, busy
        if cleared and run.state in RunState.FINISHED:
            change_runs(conn, [run.id], expected=run.state, to=RunState.RUNNING, at=now, who=who,
                        values={"end_date": None}, detail="task instances cleared")
        # cleared tasks run again: the run is no longer one someone stopped
        values = {"last_scheduling_decision": None, **({"stopped_by": None} if cleared else {})}
        conn.execute(update(dag_run_t).where(dag_run_t.c.id == run.id).values(**values))
    return cleared, busy


def stop_task(db: Database, run_ref: str, task_id: str, *, now: dt.datetime, who: str = "cli") -> str:
    """Ask a task's queued or running try to stop (a streaming try then ends `success`, a batch try
    `failed` without a retry; the replica running it stops the job cooperatively: SIGTERM,
    `stopGracePeriod`, SIGKILL). Start or restart signals still waiting for the task are dropped.
    Returns what happened, for people."""
    with db.begin() as conn:
        run = find_run(conn, run_ref)
        lock_run_for_signal(conn, run.id)
        ti = conn.execute(select(ti_t).where(ti_t.c.dag_run_id == run.id, ti_t.c.task_id == task_id)).first()
        if ti is None:
            tasks = conn.execute(select(ti_t.c.task_id).where(ti_t.c.dag_run_id == run.id)).scalars().all()
            raise InvalidInput(f"run {run.run_id!r} has no task {task_id!r} (it has: {', '.join(tasks)})",
                               field="TASK_ID")
        _drop_pending(conn, run.id, [task_id], now=now, why=f"task stopped by {who}")
        if ti.state not in TIState.ACTIVE:
            return f"{task_id} is {ti.state}: nothing running to stop"
        if not request_stop(conn, [ti.id], at=now, who=who, detail=f"stop asked by {who}"):
            return f"{task_id} try {ti.try_number}: a stop was already asked"
        return f"{task_id} try {ti.try_number}: stop asked"


def stop_run(db: Database, run_ref: str, *, now: dt.datetime, who: str = "cli") -> tuple[list[str], list[str]]:
    """Stop a run: ask every queued or running try to stop, skip the task instances that have not
    started (`none`, `scheduled`, `up_for_retry`), drop waiting signals, and record who stopped it
    (`stopped_by`). A queued run ends `failed` at once; a running one ends `failed` ("stopped by
    <who>") once its stopped tries have ended (`run_decision`: a stopped run is never `success`, though
    a stopped streaming try ends `success`), so `backfill --reprocess failed` takes it again and the
    tries still stop gracefully. Returns (stopping, skipped) task ids."""
    with db.begin() as conn:
        run = find_run(conn, run_ref)
        if run.state not in RunState.ACTIVE:
            raise OperationFailed(f"run {run.run_id!r} is {run.state}: nothing to stop")
        lock_run_for_signal(conn, run.id)
        tis = conn.execute(select(ti_t).where(ti_t.c.dag_run_id == run.id).order_by(ti_t.c.task_id)).all()
        _drop_pending(conn, run.id, [t.task_id for t in tis], now=now, why=f"run stopped by {who}")
        stopping = [t.task_id for t in tis if t.state in TIState.ACTIVE]
        request_stop(conn, [t.id for t in tis if t.state in TIState.ACTIVE], at=now, who=who,
                     detail=f"run stopped by {who}")
        skipped = []
        for state in (TIState.NONE, TIState.SCHEDULED, TIState.UP_FOR_RETRY):
            skipped += [r.task_id for r in change_tis(
                conn, [t.id for t in tis if t.state == state], expected=state, to=TIState.SKIPPED, at=now, who=who,
                values={"end_date": now}, detail=f"run stopped by {who}")]
        if run.state == RunState.QUEUED:
            change_runs(conn, [run.id], expected=RunState.QUEUED, to=RunState.FAILED, at=now, who=who,
                        values={"end_date": now}, detail=f"stopped by {who} before it started")
        conn.execute(update(dag_run_t).where(dag_run_t.c.id == run.id)
                     .values(last_scheduling_decision=None, stopped_by=who))
    return stopping, sorted(skipped)


def _drop_pending(conn: Connection, run_pk: int, task_ids: list[str], *, now: dt.datetime, why: str) -> None:
    a = signal_action_t.c
    conn.execute(update(signal_action_t)
                 .where(a.dag_run_id == run_pk, a.task_id.in_(task_ids), a.status == SignalActionStatus.PENDING)
                 .values(status=SignalActionStatus.DROPPED, done_at=now, detail=why))


def run_state(conn: Connection, run_pk: int) -> str:
    """The state of run `run_pk` (which must exist)."""
    return conn.execute(select(dag_run_t.c.state).where(dag_run_t.c.id == run_pk)).scalar_one()


def run_task_instances(conn: Connection, run_pk: int) -> list:
    """Every column of run `run_pk`'s task instances, in id order (the DAG's task order)."""
    return conn.execute(select(ti_t).where(ti_t.c.dag_run_id == run_pk).order_by(ti_t.c.id)).all()


def newest_run_id(conn: Connection) -> int:
    """The newest run id, 0 when there is none (a primary-key lookup)."""
    return conn.execute(select(func.max(dag_run_t.c.id))).scalar() or 0


def run_named(conn: Connection, dag_id: str, run_id: str) -> int | None:
    """The id of the DAG's run named `run_id`, or None."""
    row = conn.execute(select(dag_run_t.c.id).where(dag_run_t.c.dag_id == dag_id,
                                                    dag_run_t.c.run_id == run_id)).first()
    return None if row is None else row.id


_EXAMINED = (update(dag_run_t).where(dag_run_t.c.id.in_(bindparam("run_ids", expanding=True)))
             .values(last_scheduling_decision=bindparam("now", type_=dag_run_t.c.last_scheduling_decision.type)))


def mark_examined(conn: Connection, run_ids: list[int], *, now: dt.datetime) -> None:
    """These runs were examined at `now` (`last_scheduling_decision`). Built once with bind parameters:
    it runs at every examination."""
    conn.execute(_EXAMINED, {"run_ids": run_ids, "now": now})
