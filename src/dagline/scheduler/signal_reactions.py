"""Loop step 0: react to new signals. For each signal not yet handled, in `seq` order per key, find
the rules that match it and act, in one transaction per batch:

* a DAG `trigger` creates a run (type `signal`, conf = the value; queued, so `maxActiveRuns` holds
  and a signal beyond the limit waits as a queued run: none is dropped);
* a task `start` rule leaves a `pending` start action for the task instance in every running run of
  the DAG (only runs of the sending try, with `scope: run`); the examine step (`examine_runs`, called
  here on the same locked runs) starts a try with it as soon as the TI is free and its upstream
  allows, marking the action `done` with that try. `handling: latest` supersedes the start actions
  still pending for the TI; `each` keeps them, one try per signal, in order;
* `restart` asks the running try to stop (`stop_requested_at`) and leaves a pending restart: the
  new try starts, with this signal, once the old one has ended: one recorded action. A newer
  restart supersedes a pending one (a restart always means "with the newest");
* `stop` asks the running try to stop and supersedes what was pending for the TI.

Exactly once: a signal is claimed (`claims.claim_unhandled_signals`, skipping what others hold)
and marked handled, by one statement, in the transaction that writes its actions and the state
changes they cause (and, from `phases.reaction`, queues the tries they made runnable);
each (signal, rule, run, task) has one `signal_action` row at most (a unique constraint: an insert
that finds it there is a signal already acted on, and does nothing more). A replica that dies before
its commit leaves the signals unhandled, and another replica takes them.

Wake-ups: the reaction's transaction does not wake idle peers (`notify.hold_announcements`): the
replica that reacted queues the tries it made runnable in the same transaction, and goes on with a
full pass (runs a trigger created); peers woken to find nothing would only slow it down on a busy
machine. A stop request (restart, stop) does wake them: the replica running the try must stop it.
If the caller queues nothing, it wakes the peers itself (`phases.reaction`).

Namespaces (ADR 92): a signal's key carries its sender's namespace, and a rule's the namespace it
listens to (its DAG's own, or another written `namespace/key`), so a rule hears only the key of the
namespace it names. A rule of a DAG in another namespace than the signal's acts only where the
platform's export rules (`DAGLINE_SIGNAL_EXPORTS`, `domain.signal_exports`) let that key out to the
DAG's namespace; otherwise the signal is handled as if the rule did not exist.

Order: within one key, `seq` order is commit order (`claims.lock_signal_key`); a claimed signal is
acted on only if every earlier unhandled signal of its key is in the same claim, else it is left for
the replica that holds the earlier one (the claim's statement checks this itself). Runs are locked in
id order, then DAG rows in id order, so two replicas reacting at once wait on each other in one
direction only.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import json
import logging

from sqlalchemy.engine import Connection

from dagline.db.claims import claim_unhandled_signals, lock_dag, lock_run_for_signal
from dagline.db.notify import hold_announcements
from dagline.db.transitions import request_stop
from dagline.domain import names
from dagline.domain.signal_exports import NO_EXPORTS, SignalExports
from dagline.domain.states import RunState, RunType, SignalAction, SignalActionStatus, TIState
from dagline.scheduler.examine import examine_runs
from dagline.scheduler.signal_starts import STARTING, StartActions, action_row, insert_actions, supersede_pending
from dagline.store.dags import DagCache
from dagline.store.runs import run_named
from dagline.store.signal_actions import (
    action_exists,
    listeners,
    set_try_signal,
    supersede_done_starts,
    task_instance,
    task_instances_of_runs,
)
from dagline.store.timeline import NewRun, insert_runs, live_run_at, timetable_for

log = logging.getLogger(__name__)

BUSY = frozenset({TIState.QUEUED, TIState.RUNNING})


@dataclasses.dataclass
class ReactionResult:
    signals: int = 0  # signals handled
    actions: int = 0  # action rows written
    runs_created: int = 0
    tis_changed: int = 0
    runs_finished: int = 0
    scheduled: list[int] = dataclasses.field(default_factory=list)  # the TIs made runnable


def react_to_signals(conn: Connection, *, now: dt.datetime, dags: DagCache, who: str, limit: int,
                     exports: SignalExports = NO_EXPORTS) -> ReactionResult:
    """React to up to `limit` unhandled signals; a rule of another namespace's DAG acts only where
    `exports` lets the signal's key out to it (the scheduler's `signal_exports` setting)."""
    result = ReactionResult()
    signals = claim_unhandled_signals(conn, limit, now=now)  # in key order, marked handled
    if not signals:
        return result
    hold_announcements(conn)  # the caller queues what this makes runnable; only stop requests wake peers
    result.signals = len(signals)

    triggers, rules = _listeners(conn, sorted({s.key for s in signals}), exports)

    run_ids = sorted({r.run_pk for s in signals for r in _for(rules, s) if _in_scope(r, s)})
    locked = {}
    for run_pk in run_ids:  # id order: see the module docstring
        run = lock_run_for_signal(conn, run_pk)
        if run is not None and run.state == RunState.RUNNING:
            locked[run_pk] = run
    trigger_dags = sorted({t.dag_id for s in signals for t in _for(triggers, s)})
    for dag_id in trigger_dags:
        lock_dag(conn, dag_id)

    tis: dict[tuple[int, str], object] = {}
    if locked:
        for ti in task_instances_of_runs(conn, list(locked)):
            tis[(ti.dag_run_id, ti.task_id)] = ti

    starts = StartActions(conn, now)  # written per task instance, a few statements for a whole claim
    for s in signals:
        for listener in _for(triggers, s):
            if _trigger(conn, s, listener, now=now, dags=dags, who=who):
                result.runs_created += 1
                result.actions += 1
        for r in _for(rules, s):
            if r.run_pk not in locked or not _in_scope(r, s):
                continue
            ti = tis.get((r.run_pk, r.task_id))
            if ti is None:
                continue  # the task did not exist at the run's logical date (a later startDate)
            if r.action == SignalAction.START:
                starts.add(s, r, busy=ti.state in BUSY)
                continue
            result.actions += starts.flush((r.run_pk, r.task_id))  # its starts come first: they are earlier
            if _act(conn, s, r, ti, now=now, who=who):
                result.actions += 1
                # a restart or stop changed the row (stop request, signal): the decision below reads it
                tis[(r.run_pk, r.task_id)] = task_instance(conn, ti.id)
    result.actions += starts.flush()
    if locked:
        examined = examine_runs(conn, list(locked.values()), now=now, dags=dags, who=who,
                                tis=tis.values())  # as read and kept up to date above
        result.tis_changed += examined.tis_changed
        result.scheduled += examined.scheduled
        result.runs_finished += examined.runs_finished
    return result


def _listeners(conn: Connection, keys: list[str], exports: SignalExports) -> tuple[dict, dict]:
    """The rules listening to `keys` (qualified keys), in one statement: key -> DAG triggers of the
    current versions of active DAGs (by DAG id, rule), and key -> (task rule, run) for each running run
    (`dags test` runs left out: their own process drives them) of the versions that have the rule (by
    run id, rule). A rule of a DAG outside the key's namespace is kept only where `exports` lets the key
    out to the DAG's namespace."""
    triggers, rules = collections.defaultdict(list), collections.defaultdict(list)
    for row in listeners(conn, keys):
        if _exported(row, exports):
            (triggers if row.run_pk is None else rules)[row.key].append(row)
    return triggers, rules


def _exported(listener, exports: SignalExports) -> bool:
    """Whether the signals of the listener's key reach its DAG: its own namespace's, or exported to it."""
    namespace, key = names.split(listener.key)
    return exports.allows(namespace, key, names.namespace_of(listener.dag_id))


def _for(by_key: dict, signal) -> list:
    """The listeners of the signal's key (in its namespace) that it reaches (see `_listeners`)."""
    return by_key.get(signal.key, ())


def _in_scope(rule, signal) -> bool:
    return rule.scope != "run" or signal.source_dag_run_id == rule.run_pk


def _insert_action(conn: Connection, sent_at: dt.datetime, **row) -> bool:
    """Insert one action row; False if the (signal, rule, run, task) already has one."""
    return bool(insert_actions(conn, [row], [sent_at]))


def _act(conn: Connection, s, r, ti, *, now: dt.datetime, who: str) -> bool:
    """Apply one `restart` or `stop` rule to one TI (`start` rules: `StartActions`); False if this
    signal already acted on it (nothing done)."""
    row = action_row(s, r, now=now)
    if r.action == SignalAction.RESTART:
        if _already(conn, s, r):
            return False
        supersede_pending(conn, ti.dag_run_id, ti.task_id, actions=(SignalAction.RESTART,), now=now, by=s.seq)
        if ti.state in BUSY:
            _request_stop(conn, ti, now=now, who=who, why=f"restart by signal {s.seq} ({s.key})")
            return _insert_action(conn, s.sent_at, **row, status=SignalActionStatus.PENDING,
                                  detail=f"stopping try {ti.try_number}")
        if ti.state in (TIState.SCHEDULED, TIState.UP_FOR_RETRY):
            # not started yet: the try about to start takes this signal (and no longer an earlier one)
            supersede_done_starts(conn, ti.dag_run_id, ti.task_id, starting=STARTING, next_try=ti.try_number + 1,
                                  detail=f"superseded by signal {s.seq} before its try started")
            set_try_signal(conn, ti.id, s.seq)
            return _insert_action(conn, s.sent_at, **row, status=SignalActionStatus.DONE, try_number=ti.try_number + 1,
                                  done_at=now, detail="the next try starts with this signal")
        return _insert_action(conn, s.sent_at, **row, status=SignalActionStatus.PENDING)
    # stop
    if _already(conn, s, r):
        return False
    supersede_pending(conn, ti.dag_run_id, ti.task_id, actions=STARTING, now=now, by=s.seq)
    if ti.state in BUSY:
        _request_stop(conn, ti, now=now, who=who, why=f"stop by signal {s.seq} ({s.key})")
        return _insert_action(conn, s.sent_at, **row, status=SignalActionStatus.DONE, try_number=ti.try_number,
                              done_at=now, detail=f"stop requested for try {ti.try_number}")
    return _insert_action(conn, s.sent_at, **row, status=SignalActionStatus.DONE, done_at=now,
                          detail=f"nothing to stop: the task is {ti.state}")


def _already(conn: Connection, s, r) -> bool:
    return action_exists(conn, s.seq, r.rule, r.run_pk, r.task_id)


def _request_stop(conn: Connection, ti, *, now: dt.datetime, who: str, why: str) -> None:
    request_stop(conn, [ti.id], at=now, who=who, detail=why)  # wakes the replica running the try


def _trigger(conn: Connection, s, listener, *, now: dt.datetime, dags: DagCache, who: str) -> bool:
    """Create the run a trigger asks for; False if this signal already created it."""
    dag = dags.get(conn, listener.dag_version_id)
    run_name = f"signal__{s.seq}"
    if run_named(conn, dag.dag_id, run_name) is not None:
        return False
    value = json.loads(s.value)
    conf = value if isinstance(value, dict) else {"value": value}
    when = s.sent_at
    while live_run_at(conn, dag.dag_id, when) is not None:  # one live run per logical date
        when += dt.timedelta(microseconds=1)
    interval = timetable_for(dag).manual_interval(when)
    [run_pk] = insert_runs(conn, dag=dag, version_id=listener.dag_version_id, run_type=RunType.SIGNAL,
                           runs=[NewRun(when, interval, s.sent_at, conf=conf, run_id=run_name)], now=now, who=who)
    return _insert_action(conn, s.sent_at, signal_seq=s.seq, rule=listener.rule, dag_id=dag.dag_id, dag_run_id=run_pk,
                          run_id=run_name, task_id="", action=SignalAction.TRIGGER, status=SignalActionStatus.DONE,
                          decided_at=now, done_at=now, detail="run created (queued: it starts within maxActiveRuns)")
