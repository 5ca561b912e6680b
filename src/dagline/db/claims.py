"""Every row-lock statement dagline issues, each a named function (the procrastinate way).

On PostgreSQL these are `FOR UPDATE SKIP LOCKED` / `NOWAIT` claims: two replicas never hold the same
rows, and each caller re-checks its caps (max active runs, pool slots...) while holding them. Every
ORDER BY ends in the primary key so claims are deterministic. On SQLite, SQLAlchemy drops the lock
clauses; there, `BEGIN IMMEDIATE` (see `engine`) serialises the one scheduler with the CLI instead.
No other module writes `with_for_update`: a new lock is a new function here, with its docstring.
The claims on a signal's way to its try are built once, at import, with bind parameters (`_PREBUILT`
statements): SQLAlchemy then neither rebuilds them nor computes their cache key at every call, which
costs more than the round trip itself on a busy machine.

| claim | rows | how | protects |
|---|---|---|---|
| `lock_dag` | one DAG | wait | its timeline (`previous`, `next_dagrun`) |
| `lock_pool` | one pool | wait | resizing a pool against the critical section |
| `lock_due_dags` | due DAGs | SKIP LOCKED | one run per interval, `maxActiveRuns` |
| `lock_scheduled_dags` | scheduled DAGs | SKIP LOCKED | `next_dagrun` planned at one clock at a time |
| `lock_dags_with_startable_runs` | DAGs | SKIP LOCKED | `maxActiveRuns` per DAG and backfill |
| `lock_running_runs`, `lock_runs_by_id` | runs | SKIP LOCKED | one decider per run (`running_runs` looks first) |
| `lock_pools_nowait` | all pools | NOWAIT | pool slots and task limits (critical section) |
| `lock_pools_if_free` | all pools | SKIP LOCKED, all or none | the same, inside a transaction that must go on |
| `lock_schedulable_tis` | TIs | SKIP LOCKED | one queueing per try (`schedulable_tis`: the look, to explain) |
| `claim_stale_replicas` | replicas | SKIP LOCKED | a dead replica is declared dead once |
| `claim_orphaned_tis` | TIs | SKIP LOCKED | one adopter per orphaned try |
| `claim_due_callbacks` | outbox rows | SKIP LOCKED + lease | one deliverer per callback at a time |
| `lock_signal_key` | one signal key (advisory) | wait | per key, `seq` order is commit order |
| `claim_unhandled_signals` | signals | SKIP LOCKED, marked handled | one reaction per signal, in `seq` order per key |
| `lock_run_for_signal` | one run | wait | a signal's action against the run's own decisions |
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import and_, bindparam, func, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError

from dagline.db.models import callback_outbox_t, dag_run_t, dag_t, pool_t, replica_t, signal_t, ti_t
from dagline.domain.states import OutboxState, ReplicaState, RunState, TIState
from dagline.errors import Unavailable


def lock_dag(conn: Connection, dag_id: str) -> Any | None:
    """Wait for and hold one DAG row. Protects the DAG's timeline while runs are inserted or replaced
    (manual triggers, backfills, DAG updates), so `previous` links and `next_dagrun` stay consistent."""
    return conn.execute(_LOCK_DAG, {"dag_id": dag_id}).first()


_LOCK_DAG = select(dag_t).where(dag_t.c.dag_id == bindparam("dag_id")).with_for_update()  # built once


def lock_due_dags(conn: Connection, now: dt.datetime, limit: int, dag_ids: Sequence[str] | None = None) -> list[Any]:
    """Claim active, unpaused DAGs whose next run may be created (`next_dagrun_create_after <= now`).
    Protects: one run per interval (only the holder creates it) and the DAG's `maxActiveRuns`,
    counted by the holder before each creation."""
    stmt = (
        select(dag_t)
        .where(dag_t.c.is_active.is_(True), dag_t.c.is_paused.is_(False), dag_t.c.next_dagrun_create_after <= now)
        .order_by(dag_t.c.next_dagrun_create_after, dag_t.c.dag_id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    if dag_ids is not None:
        stmt = stmt.where(dag_t.c.dag_id.in_(dag_ids))
    return conn.execute(stmt).all()


def lock_scheduled_dags(conn: Connection) -> list[Any]:
    """Claim the active, unpaused DAGs that have a schedule and a current version (with their next-run
    fields), in dag_id order,
    skipping those a peer holds (a peer holding one is creating its runs, at its own clock). A starting
    scheduler plans their next run again at its clock (`create_runs.plan_at_this_clock`)."""
    return conn.execute(
        select(dag_t.c.dag_id, dag_t.c.current_version_id, dag_t.c.next_dagrun, dag_t.c.next_dagrun_data_interval_start,
               dag_t.c.next_dagrun_data_interval_end, dag_t.c.next_dagrun_create_after)
        .where(dag_t.c.is_active.is_(True), dag_t.c.is_paused.is_(False), dag_t.c.schedule.is_not(None),
               dag_t.c.current_version_id.is_not(None))
        .order_by(dag_t.c.dag_id)
        .with_for_update(skip_locked=True)
    ).all()


def lock_dags_with_startable_runs(
    conn: Connection, now: dt.datetime, limit: int, backfill_id: int | None = None,
    waited_since: dt.datetime | None = None,
) -> list[Any]:
    """Claim unpaused DAGs that have queued runs due to start (`run_after <= now`); with `waited_since`,
    only runs due and queued since then at the latest (`startable_runs`).
    Protects `maxActiveRuns` (per DAG and per backfill): only the holder of a DAG row promotes its
    queued runs, after counting its running ones."""
    startable = select(dag_run_t.c.dag_id).where(*startable_runs(now, waited_since))
    if backfill_id is not None:
        startable = startable.where(dag_run_t.c.backfill_id == backfill_id)
    stmt = (
        select(dag_t.c.dag_id)
        .where(dag_t.c.is_paused.is_(False), dag_t.c.dag_id.in_(startable.distinct()))
        .order_by(dag_t.c.dag_id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return [row.dag_id for row in conn.execute(stmt)]


def startable_runs(now: dt.datetime, waited_since: dt.datetime | None = None) -> list:
    """The conditions on a queued run that may start now; with `waited_since`, one that has been due
    and queued since then at least (a replica leaving new runs to a peer at work takes only those)."""
    due = min(now, waited_since) if waited_since is not None else now
    conditions = [dag_run_t.c.state == RunState.QUEUED, dag_run_t.c.run_after <= due]
    if waited_since is not None:
        conditions.append(or_(dag_run_t.c.queued_at.is_(None), dag_run_t.c.queued_at <= waited_since))
    return conditions


# What deciding a run's task instances reads of the run (`scheduler.examine`): not its conf or times.
RUN_FOR_DECISION = (dag_run_t.c.id, dag_run_t.c.dag_id, dag_run_t.c.dag_version_id, dag_run_t.c.previous_run_id,
                    dag_run_t.c.run_type, dag_run_t.c.backfill_id, dag_run_t.c.stopped_by)


def running_runs(conn: Connection, limit: int, backfill_id: int | None = None,
                 test_run_id: int | None = None) -> list[Any]:
    """The runs `lock_running_runs` would claim, in its order, WITHOUT locking them (a look, not a claim:
    loop step 3 decides from it which runs are worth claiming)."""
    return conn.execute(_running_runs_stmt(limit, backfill_id, test_run_id)).all()


def lock_running_runs(conn: Connection, limit: int, backfill_id: int | None = None,
                      test_run_id: int | None = None, *, run_ids: Sequence[int] | None = None) -> list[Any]:
    """Claim running runs of unpaused DAGs, least recently examined first; test runs are left out.
    With `test_run_id`, only that test run, paused DAG or not (`dagline dags test` runs it alone);
    with `run_ids`, only those of them still in that scope.
    Protects: one replica at a time decides a run's task instances and finishes the run."""
    stmt = _running_runs_stmt(limit, backfill_id, test_run_id)
    if run_ids is not None:
        stmt = stmt.where(dag_run_t.c.id.in_(list(run_ids)))
    return conn.execute(stmt.with_for_update(of=dag_run_t, skip_locked=True)).all()


def _running_runs_stmt(limit: int, backfill_id: int | None, test_run_id: int | None):
    return (
        select(*RUN_FOR_DECISION)
        .join(dag_t, dag_t.c.dag_id == dag_run_t.c.dag_id)
        .where(dag_run_t.c.state == RunState.RUNNING, *_in_scope(backfill_id, test_run_id))
        .order_by(dag_run_t.c.last_scheduling_decision.asc().nulls_first(), dag_run_t.c.id)
        .limit(limit)
    )


def _in_scope(backfill_id: int | None, test_run_id: int | None) -> list:
    """Conditions on joined `dag_run` and `dag` rows: the runs a replica works on. A scheduler replica
    works on every run of an unpaused DAG but test runs (or one backfill's runs); `dagline dags test`
    on its own test run only, even in a paused DAG."""
    if test_run_id is not None:
        return [dag_run_t.c.id == test_run_id]
    conditions = [dag_t.c.is_paused.is_(False), ~dag_run_t.c.is_test]
    if backfill_id is not None:
        conditions.append(dag_run_t.c.backfill_id == backfill_id)
    return conditions


def lock_runs_by_id(conn: Connection, run_ids: Sequence[int]) -> list[Any]:
    """Claim specific running runs, skipping those another replica holds (the mini-scheduler: a
    replica that records a task's end schedules its downstream tasks at once, if it can get the run)."""
    if not run_ids:
        return []
    stmt = (
        select(*RUN_FOR_DECISION)
        .where(dag_run_t.c.id.in_(list(run_ids)), dag_run_t.c.state == RunState.RUNNING)
        .order_by(dag_run_t.c.id)
        .with_for_update(skip_locked=True)
    )
    return conn.execute(stmt).all()


def lock_pool(conn: Connection, name: str) -> Any | None:
    """Wait for and hold one pool row (or None if there is no such pool). Protects a pool's size while
    it is created or changed: the critical section, which holds every pool row, sees it before or after."""
    return conn.execute(select(pool_t).where(pool_t.c.name == name).with_for_update()).first()


class PoolsBusy(Unavailable):
    """Another replica holds the pool rows: it is in the critical section."""


def lock_pools_nowait(conn: Connection) -> dict[str, int]:
    """Hold every pool row, or raise `PoolsBusy` at once (SQLSTATE 55P03) if another replica does.
    Protects pool slots, `maxActiveTasks`, `maxActiveTisPerDag`: the critical section that counts and
    queues task instances runs in one replica at a time. After `PoolsBusy` the transaction is aborted:
    the caller must let it roll back (the exception leaves the `with db.begin()` block) and queue
    nothing this round; it is not a failure."""
    stmt = select(pool_t.c.name, pool_t.c.slots).order_by(pool_t.c.name).with_for_update(nowait=True)
    try:
        return {row.name: row.slots for row in conn.execute(stmt)}
    except DBAPIError as exc:
        if getattr(exc.orig, "pgcode", None) == "55P03":
            raise PoolsBusy("another replica holds the pool rows (it is queueing task instances)") from exc
        raise


def lock_pools_if_free(conn: Connection) -> dict[str, int] | None:
    """Hold every pool row, or return None if another replica holds any: `lock_pools_nowait` for a
    transaction that must not be aborted (a signal reaction that queues its tries in its own
    transaction, and commits its reaction either way). SKIP LOCKED never waits and never fails; the
    rows it got are compared with the number of pools in the same statement's snapshot, so the
    caller goes on only while it holds them all, as after a NOWAIT. Protects what `lock_pools_nowait`
    protects. With None, the rows it did get stay held until the caller's commit, a few statements
    later: a peer's NOWAIT meanwhile finds the pools busy, as it would while this replica queued."""
    rows = conn.execute(_POOLS_IF_FREE).all()
    if not rows or len(rows) != rows[0].pools:
        if not rows and conn.execute(select(func.count()).select_from(pool_t)).scalar_one() == 0:
            return {}  # no pool at all: nothing to hold
        return None
    return {row.name: row.slots for row in rows}


_POOLS_IF_FREE = (  # _PREBUILT
    select(pool_t.c.name, pool_t.c.slots, select(func.count()).select_from(pool_t).scalar_subquery().label("pools"))
    .order_by(pool_t.c.name).with_for_update(of=pool_t, skip_locked=True))


def lock_schedulable_tis(conn: Connection, limit: int, backfill_id: int | None = None,
                         test_run_id: int | None = None) -> list[Any]:
    """Claim `scheduled` task instances of running runs of unpaused DAGs, by priority (highest first),
    then logical date (oldest first), then id; of the runs `lock_running_runs` would claim with the same
    scope. Called inside the critical section; SKIP LOCKED keeps it safe against a mini-scheduler
    touching the same rows."""
    if backfill_id is None and test_run_id is None:  # a scheduler replica's own scope: built once
        return conn.execute(_SCHEDULABLE_TIS, {"limit": limit}).all()
    return conn.execute(_schedulable_tis_statement(limit, backfill_id, test_run_id)).all()


def schedulable_tis(conn: Connection, limit: int, *, pools: Sequence[str], dag_id: str,
                    test_run_id: int | None = None) -> list[Any]:
    """The task instances `lock_schedulable_tis` would claim, in its order, WITHOUT locking them (a look,
    not a claim), of those that compete with DAG `dag_id`'s scheduled task instances: those of `pools`
    or of that DAG. What an explanation of a wait hands to the critical section's decision."""
    stmt = _schedulable_tis_select(None, test_run_id).where(or_(ti_t.c.pool.in_(list(pools)), ti_t.c.dag_id == dag_id))
    return conn.execute(stmt.limit(limit)).all()


def _schedulable_tis_select(backfill_id: int | None, test_run_id: int | None):
    return (
        select(
            ti_t.c.id, ti_t.c.dag_id, ti_t.c.task_id, ti_t.c.pool, ti_t.c.pool_slots, ti_t.c.priority_weight,
            ti_t.c.try_number, ti_t.c.dag_run_id, dag_run_t.c.dag_version_id, dag_run_t.c.logical_date,
            dag_t.c.current_version_id, ti_t.c.scheduled_at,
        )
        .join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
        .join(dag_t, dag_t.c.dag_id == ti_t.c.dag_id)
        .where(and_(ti_t.c.state == TIState.SCHEDULED, dag_run_t.c.state == RunState.RUNNING,
                    *_in_scope(backfill_id, test_run_id)))
        .order_by(ti_t.c.priority_weight.desc(), dag_run_t.c.logical_date, ti_t.c.id)
    )


def _schedulable_tis_statement(limit, backfill_id: int | None, test_run_id: int | None):
    return _schedulable_tis_select(backfill_id, test_run_id).limit(limit).with_for_update(of=ti_t, skip_locked=True)


_SCHEDULABLE_TIS = _schedulable_tis_statement(bindparam("limit"), None, None)  # _PREBUILT


def claim_stale_replicas(conn: Connection, *, replica_id: int, now: dt.datetime, timeout_s: float) -> list[Any]:
    """Declare dead every `running` replica (other than `replica_id`) whose latest heartbeat is older than
    `timeout_s` at database time `now`; returns the rows changed (id, hostname, pid, latest_heartbeat).
    Protects: a replica is declared dead once, by one peer, with one event (SKIP LOCKED, then a
    compare-and-set on `state = 'running'`: a replica heartbeating at this moment holds its row and is
    skipped; one whose heartbeat waited on ours finds its row `dead` and stops).
    The caller checks first that it has itself been alive for `timeout_s` (`alive_since`), so that
    after a database outage nobody judges peers that had no chance to heartbeat."""
    replica = replica_t.c
    stale = (
        select(replica.id)
        .where(replica.state == ReplicaState.RUNNING, replica.id != replica_id,
               replica.latest_heartbeat < now - dt.timedelta(seconds=timeout_s))
        .order_by(replica.id)
        .with_for_update(skip_locked=True)
    )
    return conn.execute(
        update(replica_t).where(replica.id.in_(stale.scalar_subquery()), replica.state == ReplicaState.RUNNING)
        .values(state=ReplicaState.DEAD, ended_at=now)
        .returning(replica.id, replica.hostname, replica.pid, replica.latest_heartbeat)
    ).all()


def claim_orphaned_tis(
    conn: Connection, *, replica_id: int, limit: int, executor: str | None = None, hostname: str | None = None
) -> list[Any]:
    """Take over `queued` and `running` task instances whose replica has ended (`dead` or `stopped`, or
    none recorded; test runs' task instances are their `dagline dags test` process's alone): they
    become `replica_id`'s (`queued_by_replica_id`), in id order, at most `limit`.
    Returns (id, dag_run_id, dag_id, task_id, try_number, state, max_tries, dag_version_id,
    previous_replica_id). Protects: one replica adopts each orphaned try, so a try is followed, launched
    again or settled by one replica only (SKIP LOCKED; the state and the owner are checked under the
    lock by the query itself). With `executor`, only tries of replicas that used that executor (a
    replica can only follow jobs of its own kind); with `hostname`, only those of replicas on that
    host (the local executor's jobs can be found on their host only)."""
    owner = replica_t.alias("owner")
    stmt = (
        select(ti_t.c.id, ti_t.c.dag_run_id, ti_t.c.dag_id, ti_t.c.task_id, ti_t.c.try_number, ti_t.c.state,
               ti_t.c.max_tries, dag_run_t.c.dag_version_id,
               ti_t.c.queued_by_replica_id.label("previous_replica_id"))
        .join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
        .outerjoin(owner, owner.c.id == ti_t.c.queued_by_replica_id)
        .where(ti_t.c.state.in_((TIState.QUEUED, TIState.RUNNING)), ~dag_run_t.c.is_test,
               ti_t.c.queued_by_replica_id.is_(None) | owner.c.state.in_((ReplicaState.DEAD, ReplicaState.STOPPED)))
        .order_by(ti_t.c.id)
        .limit(limit)
        .with_for_update(of=ti_t, skip_locked=True)
    )
    if executor is not None:
        stmt = stmt.where(owner.c.executor == executor)
    if hostname is not None:
        stmt = stmt.where(owner.c.hostname == hostname)
    rows = conn.execute(stmt).all()
    if rows:
        conn.execute(update(ti_t).where(ti_t.c.id.in_([r.id for r in rows])).values(queued_by_replica_id=replica_id))
    return rows


def claim_due_callbacks(
    conn: Connection, *, now: dt.datetime, limit: int, channels: Sequence[str], replica_id: int | None, lease_s: float,
) -> list[Any]:
    """Claim `pending` outbox rows due for an attempt (`next_attempt_at <= now`) on `channels`, oldest
    first, at most `limit`: each gets `attempts + 1`, `claimed_by = replica_id` and a lease
    (`next_attempt_at = now + lease_s`). Returns (id, delivery_id, channel, event, target, payload,
    attempts). Protects: one replica delivers a callback at a time (SKIP LOCKED, then the lease keeps
    the row from every claimer once the claim commits), so the sending happens outside any transaction
    and never twice at once. At least once: a replica that dies mid-delivery leaves the row pending, and
    once its lease has passed another replica claims it again, with the same delivery id; the caller
    reports the outcome with `outbox.settle_*` for the attempt number it claimed, so a late outcome of
    an expired lease cannot undo a newer attempt's."""
    box = callback_outbox_t.c
    due = (
        select(box.id)
        .where(box.state == OutboxState.PENDING, box.next_attempt_at <= now, box.channel.in_(list(channels)))
        .order_by(box.next_attempt_at, box.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    ids = list(conn.execute(due).scalars())
    if not ids:
        return []
    rows = conn.execute(
        update(callback_outbox_t).where(box.id.in_(ids), box.state == OutboxState.PENDING)
        .values(attempts=box.attempts + 1, claimed_by=replica_id, next_attempt_at=now + dt.timedelta(seconds=lease_s))
        .returning(box.id, box.delivery_id, box.channel, box.event, box.target, box.payload, box.attempts)
    ).all()
    return sorted(rows, key=lambda row: row.id)


SIGNAL_KEY_LOCK_CLASS = 0x5167  # the advisory-lock namespace of signal keys ("Sg")


def lock_signal_key(conn: Connection, key: str) -> None:
    """Serialise the senders of one signal key until commit (a transaction-level advisory lock on
    PostgreSQL; SQLite's `BEGIN IMMEDIATE` serialises every writer already). Protects: within a key,
    `seq` order is commit order. A sequence hands out numbers before commit, so without this lock
    signal 8 of a key could become visible after signal 9 had been acted on; with it, once a signal
    is visible every earlier signal of its key is too, and the reaction step can apply them in order."""
    if conn.dialect.name == "postgresql":
        conn.execute(_LOCK_SIGNAL_KEY, {"key": key})


_LOCK_SIGNAL_KEY = select(func.pg_advisory_xact_lock(SIGNAL_KEY_LOCK_CLASS, func.hashtext(bindparam("key"))))


def claim_unhandled_signals(conn: Connection, limit: int, *, now: dt.datetime) -> list[Any]:
    """Claim signals not yet handled, lowest `seq` first, skipping those another replica holds, and
    mark handled (`handled_at = now`) those of them that may be acted on now: per key, the claimed ones
    before the first unhandled signal of that key this claim does not hold (that one is another
    replica's, which acts on it first; the later ones are left for it or the next claim). Returns those
    (seq, key, value, source, source_dag_run_id, sent_at, namespace), in `seq` order. One statement: the claim (a
    CTE, `FOR UPDATE SKIP LOCKED`), the per-key order check and the update. Protects: one replica
    decides a signal's actions (the unique `signal_action` row is the database's own guard behind
    this), and per key they are acted on in `seq` order. Claimed signals left for later stay
    locked until the caller's commit, then are free again."""
    return sorted(conn.execute(_CLAIM_SIGNALS, {"limit": limit, "now": now}).all(), key=lambda row: row.seq)


def _claim_signals_statement():
    s = signal_t.c
    claimed = (select(s.seq, s.key).where(s.handled_at.is_(None)).order_by(s.seq).limit(bindparam("limit"))
               .with_for_update(skip_locked=True).cte("claimed"))
    # Per key claimed, the first unhandled signal of that key outside the claim (another replica's, or
    # later than the claim), looked up once per key (MATERIALIZED: not once per claimed signal) with
    # LIMIT 1 in `seq` order, so the walk stops at the first one. The claimed signals before it are ready.
    keys = select(claimed.c.key).distinct().subquery("keys")
    other = signal_t.alias("other")
    first_other = (select(other.c.seq)
                   .where(other.c.key == keys.c.key, other.c.handled_at.is_(None),
                          other.c.seq.not_in(select(claimed.c.seq)))
                   .order_by(other.c.seq).limit(1).scalar_subquery())
    blocked = (select(keys.c.key, first_other.label("first_other")).cte("blocked")
               .prefix_with("MATERIALIZED", dialect="postgresql"))  # once per key, not per claimed signal
    ready = (select(claimed.c.seq).join(blocked, blocked.c.key == claimed.c.key)
             .where(or_(blocked.c.first_other.is_(None), claimed.c.seq < blocked.c.first_other)))
    return (update(signal_t).where(s.seq.in_(ready)).values(handled_at=bindparam("now", type_=s.handled_at.type))
            .returning(s.seq, s.key, s.value, s.source, s.source_dag_run_id, s.sent_at, s.namespace))


_CLAIM_SIGNALS = _claim_signals_statement()  # _PREBUILT: run at every pass of every replica


def lock_run_for_signal(conn: Connection, run_id: int) -> Any | None:
    """Wait for and hold one run row, whatever its state (None if it is gone). Protects a signal's
    action on a run's task instance against the replica deciding that run (`lock_running_runs`,
    `lock_runs_by_id`): a run is not finished while a signal starts one of its tasks, and a task
    started by a signal is seen by the next decision. Waiting, not skipping: signals of one key
    must be applied in order, so this one cannot be left for later."""
    return conn.execute(_LOCK_RUN_FOR_SIGNAL, {"run_id": run_id}).first()


_LOCK_RUN_FOR_SIGNAL = select(dag_run_t).where(dag_run_t.c.id == bindparam("run_id")).with_for_update()  # _PREBUILT

