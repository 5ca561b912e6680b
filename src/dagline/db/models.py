"""The schema, as SQLAlchemy tables. Rows are plain data: decisions live in the scheduler modules.

Invariants are also constraints, so a bug in Python cannot break them silently:
- a task instance always belongs to a run (`task_instance.dag_run_id` is NOT NULL);
- at most one run per `(dag_id, logical_date)` that is not `overridden` nor a test run (a partial unique index);
- one task instance per `(dag_run_id, task_id)`; one version row per `(dag_id, version)`;
- one outbox row per callback delivery id (`callback_outbox.delivery_id`);
- a DAG's key carries its namespace (`dag.dag_id` is `namespace/name` outside `default`, checked against
  `dag.namespace`), and so does every row keyed by it, and a signal's key its sender's namespace (ADR 92);
- one signal per `(key, sender_id)` (a sender's retry is the same signal), at most 64 KiB of value;
- at most one action per `(signal, rule, run, task)`: the exactly-once guard of signal reactions;
- one launch record per try (`try_launch`: `(ti_id, try_number)`).
Every stored time is UTC (`UTCDateTime` returns aware datetimes on both databases).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from dagline.domain import states
from dagline.domain.states import (
    BackfillState,
    OutboxState,
    Reprocess,
    RunState,
    RunType,
    SignalActionStatus,
    TIState,
)
from dagline.times import UTC


class UTCDateTime(TypeDecorator):
    """Aware UTC datetimes on both databases (SQLite stores them naive, in UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value, dialect):
        if value is None:
            return None
        tz = value.tzinfo
        if tz is None:
            raise ValueError(f"naive datetime {value!r} given to the database; dagline stores aware UTC times")
        if tz is not UTC:  # most are UTC already (the clock's); converting costs more than the rest of a bind
            value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value, dialect):
        if value is None:
            return None
        tz = value.tzinfo
        if tz is None:
            return value.replace(tzinfo=UTC)
        return value if tz is UTC else value.astimezone(UTC)


NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# BigInteger ids on PostgreSQL, INTEGER (rowid alias, autoincrement) on SQLite.
Id = BigInteger().with_variant(Integer(), "sqlite")
# A DAG's key: its name, or `namespace/name` outside `default` (`dagline.domain.names`, ADR 92).
DagKey = String(127)
# A signal's key in its sender's namespace: the key, or `namespace/key` outside `default`.
SignalKey = String(264)

RUN_TYPES = tuple(RunType)
RUN_STATES = tuple(RunState)
TI_STATES = tuple(TIState)


# Runs on the timeline: not replaced by a backfill, not a test run (`dagline dags test`).
LIVE_RUN_SQL = f"state != '{RunState.OVERRIDDEN}' AND NOT is_test"


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(str(v)) for v in values)})"  # str(): a member's repr names its enum


# Runs and task instances whose deadline may still be missed: the partial indexes hold only these, so
# the housekeeping query that finds missed deadlines reads only rows that are due.
RUN_DEADLINE_OPEN_STATES = (RunState.QUEUED, RunState.RUNNING)
TI_DEADLINE_OPEN_STATES = (TIState.NONE, TIState.SCHEDULED, TIState.QUEUED, TIState.RUNNING, TIState.UP_FOR_RETRY)
_DEADLINE_DUE = "deadline_at IS NOT NULL AND deadline_missed_at IS NULL"
_RUN_DEADLINE_OPEN = f"{_DEADLINE_DUE} AND {_in('state', RUN_DEADLINE_OPEN_STATES)}"
_TI_DEADLINE_OPEN = f"{_DEADLINE_DUE} AND {_in('state', TI_DEADLINE_OPEN_STATES)}"
# Outbox rows still to deliver (the partial index the deliverers' claim reads).
_OUTBOX_DUE = f"state = '{OutboxState.PENDING}'"


# The `dag_id` a DAG of `namespace` has: its name in `default`, else `namespace/name` (no name holds '/').
DAG_KEY_CHECK = ("(namespace = 'default' AND dag_id NOT LIKE '%/%') OR (namespace <> 'default' AND "
                 "dag_id LIKE namespace || '/%' AND substr(dag_id, length(namespace) + 2) NOT LIKE '%/%')")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Dag(Base):
    """A pipeline as the scheduler sees it: its current version and where its schedule stands."""

    __tablename__ = "dag"

    dag_id: Mapped[str] = mapped_column(DagKey, primary_key=True)
    # -> dag_version.id; no foreign key, as the two tables refer to each other
    current_version_id: Mapped[int | None] = mapped_column(Id)
    is_paused: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    is_active: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    schedule: Mapped[str | None] = mapped_column(String(100))
    timezone: Mapped[str] = mapped_column(String(64), nullable=False, default="UTC")
    source_path: Mapped[str | None] = mapped_column(Text)
    # The namespace whose DAG it is (`default` unless a DAG object or `--namespace` says otherwise); part of
    # its key (`dag_id` is `namespace/name` outside `default`), so it never changes.
    namespace: Mapped[str] = mapped_column(String(63), index=True, nullable=False,
                                           server_default=text("'default'"))
    next_dagrun: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    next_dagrun_data_interval_start: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    next_dagrun_data_interval_end: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    next_dagrun_create_after: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    # Why the scheduler could not load or schedule the current version (None: it can); cleared by an apply.
    import_error: Mapped[str | None] = mapped_column(Text)
    import_error_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)

    __table_args__ = (
        Index(None, "is_active", "is_paused", "next_dagrun_create_after"),
        CheckConstraint(DAG_KEY_CHECK, name="key_of_namespace"),
    )


class DagVersion(Base):
    """One normalized spec of a DAG, kept forever: runs point at the version they were created with."""

    __tablename__ = "dag_version"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(DagKey, ForeignKey("dag.dag_id"), nullable=False)
    version: Mapped[str] = mapped_column(String(64), nullable=False)
    spec: Mapped[dict] = mapped_column(JSON, nullable=False)
    source_dir: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)

    __table_args__ = (UniqueConstraint("dag_id", "version"),)


class Pool(Base):
    """A named number of slots; queued and running task instances hold `pool_slots` of theirs."""

    __tablename__ = "pool"

    name: Mapped[str] = mapped_column(String(256), primary_key=True)
    slots: Mapped[int] = mapped_column(Integer, nullable=False)
    description: Mapped[str | None] = mapped_column(Text)
    # The namespace owning it (`name` is then `namespace/<its name>`; only that namespace's tasks use it);
    # None: a platform pool (`default`, `dagline pools set` without --namespace, the chart), shared by all.
    namespace: Mapped[str | None] = mapped_column(String(63))

    __table_args__ = (CheckConstraint("slots >= 0", name="slots_not_negative"),)


class Backfill(Base):
    """A request to (re)process a range of logical dates; its runs carry `backfill_id`."""

    __tablename__ = "backfill"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(DagKey, ForeignKey("dag.dag_id"), nullable=False)
    # `<namespace>/<request id>`: a request id names one request within its DAG's namespace (ADR 92)
    request_id: Mapped[str | None] = mapped_column(String(320), unique=True)
    from_date: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    to_date: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    reprocess: Mapped[str] = mapped_column(String(16), nullable=False, default=Reprocess.NONE)
    max_active_runs: Mapped[int | None] = mapped_column(Integer)
    run_backwards: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    is_paused: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False, default=BackfillState.RUNNING)
    total: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    skipped_existing: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    overridden: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    completed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        CheckConstraint(_in("reprocess", tuple(Reprocess)), name="reprocess_known"),
        CheckConstraint(_in("state", tuple(BackfillState)), name="state_known"),
    )


class DagRun(Base):
    """One instantiation of a DAG for a logical date, linked to the `previous` run on its timeline."""

    __tablename__ = "dag_run"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    dag_id: Mapped[str] = mapped_column(DagKey, ForeignKey("dag.dag_id"), nullable=False)
    run_id: Mapped[str] = mapped_column(String(250), nullable=False)
    logical_date: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    data_interval_start: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    data_interval_end: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    run_after: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    run_type: Mapped[str] = mapped_column(String(16), nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    previous_run_id: Mapped[int | None] = mapped_column(Id, ForeignKey("dag_run.id"))
    dag_version_id: Mapped[int] = mapped_column(Id, ForeignKey("dag_version.id"), nullable=False)
    backfill_id: Mapped[int | None] = mapped_column(Id, ForeignKey("backfill.id"))
    conf: Mapped[dict | None] = mapped_column(JSON)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    queued_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    start_date: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    end_date: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    last_scheduling_decision: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    deadline_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)  # `deadline` of the DAG, fixed at creation
    deadline_missed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)  # set once (compare-and-set)
    # a run of `dagline dags test`: not on the timeline, run only by the process that made it
    is_test: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False, server_default=false())
    # who stopped the run (`dagline runs stop`): once its stopped tries end, it ends `failed`, never `success`
    stopped_by: Mapped[str | None] = mapped_column(String(250))

    __table_args__ = (
        UniqueConstraint("dag_id", "run_id"),
        Index("ix_dag_run_deadline_due", "deadline_at",
              sqlite_where=text(_RUN_DEADLINE_OPEN), postgresql_where=text(_RUN_DEADLINE_OPEN)),
        Index(
            "uq_dag_run_live_logical_date", "dag_id", "logical_date", unique=True,
            sqlite_where=text(LIVE_RUN_SQL), postgresql_where=text(LIVE_RUN_SQL),
        ),
        Index(None, "state", "dag_id"),
        Index(None, "backfill_id"),
        Index(None, "previous_run_id"),
        # a DAG's runs in timeline order: `runs list --limit`, the pages' keyset paging, retention
        Index(None, "dag_id", "logical_date", "id"),
        Index(None, "dag_version_id"),  # deleting a version checks no run refers to it
        CheckConstraint(_in("state", RUN_STATES), name="state_known"),
        CheckConstraint(_in("run_type", RUN_TYPES), name="run_type_known"),
    )


class TaskInstance(Base):
    """One task in one run; `try_number` counts the tries launched so far (0 = never launched)."""

    __tablename__ = "task_instance"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    dag_run_id: Mapped[int] = mapped_column(Id, ForeignKey("dag_run.id"), nullable=False)
    dag_id: Mapped[str] = mapped_column(DagKey, nullable=False)
    task_id: Mapped[str] = mapped_column(String(250), nullable=False)
    state: Mapped[str] = mapped_column(String(20), nullable=False, default=TIState.NONE)
    try_number: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    max_tries: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    pool: Mapped[str] = mapped_column(String(256), nullable=False, default="default")
    pool_slots: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    priority_weight: Mapped[int] = mapped_column(Integer, nullable=False, default=1)
    scheduled_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)  # when it last became runnable
    queued_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    start_date: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    end_date: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    next_retry_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    external_id: Mapped[str | None] = mapped_column(String(250))
    queued_by_replica_id: Mapped[int | None] = mapped_column(Id, ForeignKey("replica.id"))
    hostname: Mapped[str | None] = mapped_column(String(250))
    last_heartbeat: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    deadline_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)  # the task's `deadline`, fixed at creation
    deadline_missed_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)  # set once (compare-and-set)
    # -> signal.seq: the signal that started the current try (null: no signal started it); no foreign
    # key, so pruning old signals never touches task instances
    signal_seq: Mapped[int | None] = mapped_column(Id)
    # a stop was asked for the running try (`tasks stop`, `runs stop`, a stop or restart signal)
    stop_requested_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        UniqueConstraint("dag_run_id", "task_id"),
        Index("ix_task_instance_deadline_due", "deadline_at",
              sqlite_where=text(_TI_DEADLINE_OPEN), postgresql_where=text(_TI_DEADLINE_OPEN)),
        Index(None, "state", "pool"),
        Index(None, "dag_id", "state"),
        CheckConstraint(_in("state", TI_STATES), name="state_known"),
        CheckConstraint("pool_slots >= 1", name="pool_slots_positive"),
    )


class TryLaunch(Base):
    """What one try was launched with: its Spark job as rendered at launch (application, arguments,
    conf), or why it could not be launched (`error`: a template that did not render). Written by the
    replica that launched it; pages show it from here and never render (ADR 60)."""

    __tablename__ = "try_launch"

    ti_id: Mapped[int] = mapped_column(Id, ForeignKey("task_instance.id"), primary_key=True)
    try_number: Mapped[int] = mapped_column(Integer, primary_key=True)
    launched_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    main_application_file: Mapped[str | None] = mapped_column(Text)
    arguments: Mapped[list | None] = mapped_column(JSON)
    conf: Mapped[dict | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)


class ServerSecret(Base):
    """A secret every replica shares without configuration, made at first use (the web UI's CSRF key
    when `DAGLINE_UI_SECRET` is not set: ADR 61)."""

    __tablename__ = "server_secret"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    secret: Mapped[str] = mapped_column(String(128), nullable=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)


class Replica(Base):
    """A scheduler replica: registered at start (`running`), heartbeating while it runs, then `stopped`
    (a graceful stop) or `dead` (marked by a peer that saw its heartbeat go stale). Every time here is the
    database's clock, never a replica's. `alive_since` is when its current unbroken run of heartbeats
    began: a replica only judges its peers once it has itself been alive for a whole timeout."""

    __tablename__ = "replica"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    hostname: Mapped[str] = mapped_column(String(250), nullable=False)
    pid: Mapped[int] = mapped_column(Integer, nullable=False)
    executor: Mapped[str] = mapped_column(String(32), nullable=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    started_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    latest_heartbeat: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    alive_since: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    ended_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (Index(None, "state"),)


class Event(Base):
    """The append-only audit log: every state change, who made it and when."""

    __tablename__ = "event"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    who: Mapped[str] = mapped_column(String(100), nullable=False)
    entity: Mapped[str] = mapped_column(String(20), nullable=False)
    dag_id: Mapped[str | None] = mapped_column(DagKey)
    dag_run_id: Mapped[int | None] = mapped_column(Id)
    ti_id: Mapped[int | None] = mapped_column(Id)
    task_id: Mapped[str | None] = mapped_column(String(250))
    try_number: Mapped[int | None] = mapped_column(Integer)
    from_state: Mapped[str | None] = mapped_column(String(20))
    to_state: Mapped[str | None] = mapped_column(String(20))
    detail: Mapped[str | None] = mapped_column(Text)

    # a run's events (its page, its task instances' messages, retention): run first, then entity
    __table_args__ = (Index(None, "dag_run_id", "entity"),)


class CallbackOutbox(Base):
    """Callbacks to deliver, written in the transaction of the state change (or deadline miss) that
    fires them, so none is lost and none is sent for a change that rolled back. A deliverer claims due
    rows (`claims.claim_due_callbacks`: `attempts` + 1, `next_attempt_at` pushed out by a lease), sends
    them outside any transaction, then marks them `delivered`, or due again after a backoff, or `failed`
    after the last attempt. `delivery_id` is in the body: receivers deduplicate on it."""

    __tablename__ = "callback_outbox"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    delivery_id: Mapped[str] = mapped_column(String(36), nullable=False, unique=True)
    channel: Mapped[str] = mapped_column(String(20), nullable=False)
    event: Mapped[str] = mapped_column(String(20), nullable=False)
    dag_id: Mapped[str] = mapped_column(DagKey, nullable=False)
    dag_run_id: Mapped[int | None] = mapped_column(Id)
    task_id: Mapped[str | None] = mapped_column(String(250))
    target: Mapped[dict] = mapped_column(JSON, nullable=False)  # the channel's settings: references, never secrets
    payload: Mapped[dict] = mapped_column(JSON, nullable=False)  # the body, the same on every attempt
    state: Mapped[str] = mapped_column(String(16), nullable=False, default=OutboxState.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    next_attempt_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    claimed_by: Mapped[int | None] = mapped_column(Id)  # the replica that made the latest attempt
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    delivered_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)

    __table_args__ = (
        Index("ix_callback_outbox_due", "next_attempt_at", "id",
              sqlite_where=text(_OUTBOX_DUE), postgresql_where=text(_OUTBOX_DUE)),
        Index(None, "dag_run_id"),
        CheckConstraint(_in("state", tuple(OutboxState)), name="state_known"),
        CheckConstraint(_in("channel", ("webhook", "log", "kubernetes_event")), name="channel_known"),
    )


MAX_SIGNAL_VALUE_BYTES = 64 * 1024
SIGNAL_ACTIONS = tuple(states.SignalAction)  # `states.`: the table class below is named SignalAction too
SIGNAL_ACTION_STATUSES = tuple(SignalActionStatus)


class Signal(Base):
    """A named event with a JSON value, stored before its sender is answered. `seq` orders signals;
    within one key it is also the commit order (senders of one key are serialised, see
    `claims.lock_signal_key`). `handled_at` is set once the reaction step decided every action
    the signal causes (the partial index finds the ones still to handle)."""

    __tablename__ = "signal"

    seq: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    # the key in its sender's namespace: `key`, or `namespace/key` outside `default` (ADR 92)
    key: Mapped[str] = mapped_column(SignalKey, nullable=False)
    value: Mapped[str] = mapped_column(Text, nullable=False)  # compact JSON text
    sender_id: Mapped[str | None] = mapped_column(String(200))  # chosen by the sender, for idempotency
    source: Mapped[str] = mapped_column(String(250), nullable=False)  # person, token name, or task try
    # the run and task instance of the try that sent it (null otherwise); no foreign keys: signals
    # outlive the runs they name
    source_dag_run_id: Mapped[int | None] = mapped_column(Id)
    source_ti_id: Mapped[int | None] = mapped_column(Id)
    sent_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    handled_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    # The sender's namespace (also the prefix of `key`): who may read it, whose DAGs it reaches.
    namespace: Mapped[str] = mapped_column(String(63), nullable=False, server_default=text("'default'"))

    __table_args__ = (
        UniqueConstraint("key", "sender_id"),  # per namespace: the key carries it
        Index(None, "key", "seq"),
        Index(None, "namespace", "seq"),
        Index(None, "sent_at"),
        Index("ix_signal_unhandled", "seq",
              sqlite_where=text("handled_at IS NULL"), postgresql_where=text("handled_at IS NULL")),
        CheckConstraint(f"length(value) <= {MAX_SIGNAL_VALUE_BYTES}", name="value_size"),
    )


class SignalListener(Base):
    """One signal rule of one DAG version: a DAG-level trigger (`task_id` '') or a task's `on` rule.
    Written with the version, so "who listens to this key" is a query, not a walk over every spec."""

    __tablename__ = "signal_listener"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    dag_version_id: Mapped[int] = mapped_column(Id, ForeignKey("dag_version.id"), nullable=False)
    dag_id: Mapped[str] = mapped_column(DagKey, nullable=False)
    # the key listened to, in the namespace of the signals it hears (its DAG's, or an exporter's)
    key: Mapped[str] = mapped_column(SignalKey, nullable=False)
    rule: Mapped[str] = mapped_column(String(300), nullable=False)  # e.g. spec.tasks[serve].on[0]
    task_id: Mapped[str] = mapped_column(String(250), nullable=False, default="")
    action: Mapped[str] = mapped_column(String(16), nullable=False)
    handling: Mapped[str] = mapped_column(String(16), nullable=False, default="each")
    scope: Mapped[str] = mapped_column(String(16), nullable=False, default="dag")

    __table_args__ = (
        UniqueConstraint("dag_version_id", "rule"),
        Index(None, "key", "dag_version_id"),
        CheckConstraint(_in("action", SIGNAL_ACTIONS), name="action_known"),
        CheckConstraint(_in("handling", ("each", "latest")), name="handling_known"),
        CheckConstraint(_in("scope", ("dag", "run")), name="scope_known"),
    )


class SignalAction(Base):
    """What a signal caused, one row per (signal, rule, run, task), written in the same transaction as
    the state change it causes: the unique constraint is the exactly-once guard. A `start` or
    `restart` that cannot start its try at once stays `pending` until the task is free (then `done`,
    with the try it started), `superseded` by a newer signal (`handling: latest`) or `dropped` (the
    run ended first). Triggers name the run they created."""

    __tablename__ = "signal_action"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    signal_seq: Mapped[int] = mapped_column(Id, ForeignKey("signal.seq"), nullable=False)
    rule: Mapped[str] = mapped_column(String(300), nullable=False)
    dag_id: Mapped[str] = mapped_column(DagKey, nullable=False)
    dag_run_id: Mapped[int] = mapped_column(Id, nullable=False)  # no foreign key: actions outlive runs
    run_id: Mapped[str] = mapped_column(String(250), nullable=False)
    task_id: Mapped[str] = mapped_column(String(250), nullable=False, default="")
    action: Mapped[str] = mapped_column(String(16), nullable=False)
    status: Mapped[str] = mapped_column(String(16), nullable=False)
    try_number: Mapped[int | None] = mapped_column(Integer)
    decided_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    done_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    detail: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        UniqueConstraint("signal_seq", "rule", "dag_run_id", "task_id"),
        Index(None, "dag_run_id", "task_id", "status"),
        CheckConstraint(_in("action", SIGNAL_ACTIONS), name="action_known"),
        CheckConstraint(_in("status", SIGNAL_ACTION_STATUSES), name="status_known"),
    )


class ApiToken(Base):
    """A bearer token of the HTTP API, stored as a hash only. Named tokens are made by
    `dagline tokens create`; a try's token (`ti_id`, `try_number` set) may only send signals, names
    that try as their source, and expires when the try ends (`expires_at`, or `revoked_at`)."""

    __tablename__ = "api_token"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), nullable=False, unique=True)
    secret_hash: Mapped[str] = mapped_column(String(128), nullable=False, unique=True)
    scope: Mapped[str] = mapped_column(String(64), nullable=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, nullable=False)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    last_used_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    expires_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    dag_run_id: Mapped[int | None] = mapped_column(Id)
    ti_id: Mapped[int | None] = mapped_column(Id)
    try_number: Mapped[int | None] = mapped_column(Integer)
    # Space-separated namespaces the token is limited to; None: every namespace (and DAGs of none).
    namespaces: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index(None, "ti_id", "try_number"),)


dag_t = Dag.__table__
dag_version_t = DagVersion.__table__
pool_t = Pool.__table__
backfill_t = Backfill.__table__
dag_run_t = DagRun.__table__
ti_t = TaskInstance.__table__
try_launch_t = TryLaunch.__table__
server_secret_t = ServerSecret.__table__
replica_t = Replica.__table__
event_t = Event.__table__
callback_outbox_t = CallbackOutbox.__table__
signal_t = Signal.__table__
signal_listener_t = SignalListener.__table__
signal_action_t = SignalAction.__table__
api_token_t = ApiToken.__table__

