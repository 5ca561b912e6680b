"""Signal actions: what each signal did (or waits to do) to each task instance or DAG its rules name
(`signal_action`: pending, done, superseded, dropped), and the task instance's record of the signal its
try started with (`task_instance.signal_seq`). The rules deciding them are `dagline.scheduler`'s
(`signal_reactions`, `signal_starts`, `examine`); every statement they run is here, in the caller's
transaction.

An action row is unique per (signal, rule, run, task): inserting one twice writes nothing, so a reaction
replayed after a crash acts once. A status change is a compare-and-set on the status it expects (a
pending action becomes done or superseded only while it is pending).

Every statement is built once with bind parameters: SQLAlchemy then neither rebuilds them nor computes
their cache key at each call (see `db.claims`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import and_, bindparam, func, null, select, tuple_, union_all, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from dagline.db.models import dag_run_t, dag_t, signal_action_t, signal_listener_t, ti_t
from dagline.domain.states import RunState, SignalAction, SignalActionStatus

_A = signal_action_t.c
ACTION_COLUMNS = ("signal_seq", "rule", "dag_id", "dag_run_id", "run_id", "task_id", "action", "status",
                  "try_number", "decided_at", "done_at", "detail")


def _insert_statement(dialect_insert):
    return (dialect_insert(signal_action_t).values({c: bindparam(c, type_=_A[c].type) for c in ACTION_COLUMNS})
            .on_conflict_do_nothing(index_elements=["signal_seq", "rule", "dag_run_id", "task_id"])
            .returning(_A.signal_seq, _A.rule))


_INSERT = {"postgresql": _insert_statement(pg_insert), "sqlite": _insert_statement(sqlite_insert)}
_SUPERSEDE = (update(signal_action_t)
              .where(_A.dag_run_id == bindparam("run"), _A.task_id == bindparam("task"),
                     _A.status == SignalActionStatus.PENDING, _A.action.in_(bindparam("actions", expanding=True)))
              .values(status=SignalActionStatus.SUPERSEDED, done_at=bindparam("now", type_=_A.done_at.type),
                      detail=bindparam("detail")))


def insert_action_rows(conn: Connection, rows: list[dict]) -> set[tuple[int, str]]:
    """Insert action rows (every column of `ACTION_COLUMNS` given), one statement; a (signal, rule, run,
    task) that has its row already is left as it is (the unique key: an action is written once).
    Returns (signal seq, rule) of the rows written."""
    stmt = _INSERT["postgresql" if conn.dialect.name == "postgresql" else "sqlite"]
    return {(r.signal_seq, r.rule) for r in conn.execute(stmt, rows)}


def supersede_pending_actions(conn: Connection, run_pk: int, task_id: str, *, actions: Sequence[str],
                              now: dt.datetime, detail: str) -> None:
    """The task instance's pending actions of these kinds become superseded at `now` (a compare-and-set
    on `pending`: an action already done stays done)."""
    conn.execute(_SUPERSEDE, {"run": run_pk, "task": task_id, "actions": list(actions), "now": now,
                              "detail": detail})


def actions_taken(conn: Connection, run_pk: int, task_id: str, pairs: Sequence[tuple[int, str]]) -> set:
    """Which of the (signal seq, rule) pairs already have an action row for this task instance."""
    return {(row.signal_seq, row.rule) for row in conn.execute(
        select(_A.signal_seq, _A.rule).where(_A.dag_run_id == run_pk, _A.task_id == task_id,
                                             tuple_(_A.signal_seq, _A.rule).in_(pairs)))}


_ALREADY = select(func.count()).select_from(signal_action_t).where(
    _A.signal_seq == bindparam("seq"), _A.rule == bindparam("rule"), _A.dag_run_id == bindparam("run"),
    _A.task_id == bindparam("task"))


def action_exists(conn: Connection, seq: int, rule: str, run_pk: int, task_id: str) -> bool:
    """Whether signal `seq` already has an action row for `rule` on this task instance."""
    return conn.execute(_ALREADY, {"seq": seq, "rule": rule, "run": run_pk, "task": task_id}).scalar_one() > 0


def supersede_done_starts(conn: Connection, run_pk: int, task_id: str, *, starting: Sequence[str],
                          next_try: int, detail: str) -> None:
    """The done start or restart actions (`starting`) that were to start try `next_try` of the task
    instance become superseded (a restart took their place before the try started)."""
    conn.execute(update(signal_action_t)
                 .where(_A.dag_run_id == run_pk, _A.task_id == task_id,
                        _A.status == SignalActionStatus.DONE, _A.action.in_(starting),
                        _A.try_number == next_try)
                 .values(status=SignalActionStatus.SUPERSEDED, detail=detail))


def set_try_signal(conn: Connection, ti_id: int, seq: int) -> None:
    """The task instance's next try starts with signal `seq` (`task_instance.signal_seq`)."""
    conn.execute(update(ti_t).where(ti_t.c.id == ti_id).values(signal_seq=seq))


def drop_pending_actions_of_runs(conn: Connection, run_ids: list[int], *, now: dt.datetime) -> None:
    """The pending actions of these runs (just ended) are dropped: nothing will act on them."""
    conn.execute(update(signal_action_t)
                 .where(signal_action_t.c.dag_run_id.in_(run_ids),
                        signal_action_t.c.status == SignalActionStatus.PENDING)
                 .values(status=SignalActionStatus.DROPPED, done_at=now, detail="the run ended first"))


_OLDEST_PENDING = (
    select(_A.id)
    .where(_A.dag_run_id == bindparam("run"), _A.task_id == bindparam("task"), _A.status == SignalActionStatus.PENDING,
           _A.action.in_(bindparam("kinds", expanding=True)))
    .order_by(_A.signal_seq, _A.id).limit(1).scalar_subquery())
_START_ACTION = (  # the oldest pending action of the TI becomes done, still only if pending
    update(signal_action_t).where(_A.id == _OLDEST_PENDING, _A.status == SignalActionStatus.PENDING)
    .values(status=SignalActionStatus.DONE, try_number=bindparam("next_try", type_=_A.try_number.type),
            done_at=bindparam("now", type_=_A.done_at.type))
    .returning(_A.id, _A.signal_seq))
_STARTED_BY_SIGNAL = (
    update(ti_t).where(ti_t.c.id == bindparam("ti"))
    .values(signal_seq=bindparam("seq", type_=ti_t.c.signal_seq.type),
            max_tries=bindparam("tries", type_=ti_t.c.max_tries.type),
            stop_requested_at=None, start_date=None, end_date=None))


def take_oldest_pending_start(conn: Connection, run_pk: int, task_id: str, *, kinds: Sequence[str],
                              next_try: int, now: dt.datetime):
    """The task instance's oldest pending action of these kinds becomes done with try `next_try` (a
    compare-and-set on `pending`); returns its (id, signal_seq), or None when none was pending."""
    return conn.execute(_START_ACTION, {"run": run_pk, "task": task_id, "kinds": list(kinds),
                                        "next_try": next_try, "now": now}).first()


def record_started_by_signal(conn: Connection, ti_id: int, *, seq: int, max_tries: int) -> None:
    """The task instance's try was started by signal `seq`: it records the signal, gets `max_tries`
    (its retries afresh) and forgets the last try's stop request and dates."""
    conn.execute(_STARTED_BY_SIGNAL, {"ti": ti_id, "seq": seq, "tries": max_tries})


def _listeners_statement():
    lst = signal_listener_t.c
    keys = bindparam("keys", expanding=True)
    trigger_rows = (
        select(signal_listener_t, null().label("run_pk"), null().label("run_name"))
        .join(dag_t, and_(dag_t.c.current_version_id == lst.dag_version_id, dag_t.c.is_active.is_(True)))
        .where(lst.key.in_(keys), lst.action == SignalAction.TRIGGER))
    rule_rows = (
        select(signal_listener_t, dag_run_t.c.id, dag_run_t.c.run_id)
        .join(dag_run_t, dag_run_t.c.dag_version_id == lst.dag_version_id)
        .where(lst.key.in_(keys), lst.action != SignalAction.TRIGGER, dag_run_t.c.state == RunState.RUNNING,
               dag_run_t.c.is_test.is_(False)))
    both = union_all(trigger_rows, rule_rows).subquery()
    return select(both).order_by(both.c.run_pk.nulls_first(), both.c.dag_id, both.c.rule)


_LISTENERS = _listeners_statement()


def listeners(conn: Connection, keys: list[str]) -> list:
    """The rules listening to `keys`, in one statement: DAG triggers of the current versions of active
    DAGs (`run_pk` None), then one row per (task rule, running run) for the runs of the versions that have
    the rule (`dags test` runs left out), ordered by run, DAG id and rule."""
    return conn.execute(_LISTENERS, {"keys": keys}).all()


_TIS_OF_RUNS = select(ti_t).where(ti_t.c.dag_run_id.in_(bindparam("run_ids", expanding=True)))
_TI = select(ti_t).where(ti_t.c.id == bindparam("ti_id"))


def task_instances_of_runs(conn: Connection, run_ids: list[int]) -> list:
    """Every column of the task instances of these runs."""
    return conn.execute(_TIS_OF_RUNS, {"run_ids": run_ids}).all()


def task_instance(conn: Connection, ti_id: int):
    """Every column of task instance `ti_id` (which must exist)."""
    return conn.execute(_TI, {"ti_id": ti_id}).one()
