"""The signal log's writes: storing a signal (idempotent per key and sender id) and the signals
dagline sends itself when a task instance changes state.

`insert_signal` is the one way a signal enters the database. It takes the key's lock
(`claims.lock_signal_key`, so `seq` order is commit order within a key), inserts with
`ON CONFLICT DO NOTHING` on `(key, sender_id)`, and, when the row exists already, tells the caller
whether it holds the same value (the same signal: nothing new) or another (a conflict). An insert
announces itself (`notify.announce`, payload `SIGNALS_ONLY`) unless it is stored already handled: on
PostgreSQL idle replicas wake at commit. Values arrive here already encoded and checked
(`signal_keys.encode_value`).

A signal no rule of any stored DAG version listens to is stored already handled (`handled_at` set):
the reaction step never looks at it. Rules are matched when a signal is handled, so this is the
same decision taken at once; a DAG version stored after the signal does not react to it.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import String, Text, bindparam, case, cast, exists, func, insert, literal, null, select, union_all
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from dagline.db.claims import lock_signal_key
from dagline.db.models import UTCDateTime, dag_run_t, dag_t, signal_listener_t, signal_t, ti_t
from dagline.db.notify import SIGNALS_ONLY, announce
from dagline.domain import names
from dagline.domain.signal_keys import TASK_PREFIX, TASK_SIGNAL_STATES
from dagline.errors import OperationFailed

DAGLINE_SOURCE = "dagline"


class SignalConflict(OperationFailed):
    """The same key and sender id were sent before with another value: 409, exit 1."""

    def __init__(self, seq: int, key: str, sender_id: str):
        self.seq = seq
        super().__init__(f"signal {key!r} with id {sender_id!r} was sent before (seq {seq}) with another value")


def insert_signal(
    conn: Connection,
    *,
    key: str,
    value_text: str,
    sender_id: str | None,
    source: str,
    sent_at: dt.datetime,
    source_dag_run_id: int | None = None,
    source_ti_id: int | None = None,
    same_value=None,
    namespace: str,
) -> tuple[int, bool]:
    """Store one signal under `key` (already qualified by the sender's `namespace`: `names.qualify`);
    returns (seq, created). With a `sender_id` already stored for `key` (so in the same namespace),
    returns the stored seq and False if `same_value(stored_text)` holds, else raises `SignalConflict`."""
    lock_signal_key(conn, key)
    row = dict(key=key, value=value_text, sender_id=sender_id, source=source, sent_at=sent_at,
               source_dag_run_id=source_dag_run_id, source_ti_id=source_ti_id, namespace=namespace,
               handled_at=None if listened(conn, key) else sent_at)
    if sender_id is None:
        seq = conn.execute(insert(signal_t).values(**row).returning(signal_t.c.seq)).scalar_one()
        _announce(conn, row)
        return seq, True
    dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    stmt = (dialect_insert(signal_t).values(**row)
            .on_conflict_do_nothing(index_elements=["key", "sender_id"]).returning(signal_t.c.seq))
    seq = conn.execute(stmt).scalar()
    if seq is not None:
        _announce(conn, row)
        return seq, True
    stored = conn.execute(select(signal_t.c.seq, signal_t.c.value)
                          .where(signal_t.c.key == key, signal_t.c.sender_id == sender_id)).one()
    if same_value is not None and not same_value(stored.value):
        raise SignalConflict(stored.seq, names.name_of(key), sender_id)
    return stored.seq, False


def _announce(conn: Connection, row: dict) -> None:
    """Wake the replicas for a signal they have to handle (one stored already handled needs no one)."""
    if row["handled_at"] is None:
        announce(conn, SIGNALS_ONLY)


def record_task_state_signals(conn: Connection, rows: Sequence[Any], *, to: str, at: dt.datetime) -> None:
    """dagline's own signals for task instances that just entered `to`: key
    `dagline.task.<dag name>.<task_id>.<state>` sent in the DAG's namespace (stored qualified with it,
    `names.qualify`: its own namespace's DAGs hear it, others only where it is exported), value
    `{"run_id": ..., "try_number": ...}` (the run's run id string), source `dagline`. One
    `INSERT ... SELECT` per call, whatever the number of rows: the
    key, the value and whether any rule listens (else the signal is stored already handled) are all
    computed by the database. Only the states in `TASK_SIGNAL_STATES` are signals. Unlike a sender's
    signals, their commit order is not serialised per key (no `lock_signal_key`: these are written
    inside the scheduler's own state changes, and a key lock there could wait in a circle with row
    locks); each names its run and try, so their order across runs carries no meaning. When a rule
    listens to any of them, the transaction announces `signal` (PostgreSQL), so idle replicas react at
    once: the scheduler replica writing them is busy with its own work, and its peers' ordinary
    changes wake no one (`notify`)."""
    record_task_state_passages(conn, rows, [(to, at)])


def record_task_state_passages(conn: Connection, rows: Sequence[Any],
                               states: Sequence[tuple[str, dt.datetime]]) -> None:
    """`record_task_state_signals` for task instances that entered each of `states` ((state, at), in
    order) in one change (a quick try reported once it was over: `running`, then `success`), in one
    statement: the signals of the first state, in task instance order, then those of the next."""
    states = [(to, at) for to, at in states if to in TASK_SIGNAL_STATES]
    if not states or not rows:
        return
    postgresql = conn.dialect.name == "postgresql"
    stmt = _task_state_insert(postgresql, len(states))
    params = {f"state_{n}": to for n, (to, _) in enumerate(states)}
    params.update({f"at_{n}": at for n, (_, at) in enumerate(states)})
    listened_to = False
    for start in range(0, len(rows), 500):
        chunk = {**params, "ids": [r.id for r in rows[start:start + 500]]}
        if postgresql and not listened_to:  # where wake-ups exist
            handled = conn.execute(stmt.returning(signal_t.c.handled_at), chunk).scalars()
            listened_to = any(at_ is None for at_ in handled)
        else:
            conn.execute(stmt, chunk)
    if listened_to:
        announce(conn, SIGNALS_ONLY)  # a peer's task ended: idle replicas react (peers' changes wake no one)


@functools.lru_cache(maxsize=8)
def _task_state_insert(postgresql: bool, count: int):
    """The `INSERT ... SELECT` of `record_task_state_passages` for `count` states, built once per
    dialect and count: bind parameters `ids` (expanding), `state_<n>` and `at_<n>`."""
    ti, run, dag = ti_t.c, dag_run_t.c, dag_t.c
    passages = union_all(*[
        select(bindparam(f"state_{n}", type_=String()).label("state"),
               bindparam(f"at_{n}", type_=UTCDateTime()).label("at"), literal(n).label("ord"))
        for n in range(count)]).subquery("passage")
    # names.qualify(namespace, "dagline.task.<name>.<task>.<state>"), the DAG's key being qualify(namespace, name)
    in_default = dag.namespace == names.DEFAULT_NAMESPACE
    name = case((in_default, ti.dag_id), else_=func.substr(ti.dag_id, func.length(dag.namespace) + 2))
    qualifier = case((in_default, literal("")), else_=dag.namespace + literal(names.SEPARATOR))
    key = qualifier + literal(TASK_PREFIX) + name + literal(".") + ti.task_id + literal(".") + passages.c.state
    if postgresql:
        value = cast(func.json_build_object("run_id", run.run_id, "try_number", ti.try_number), Text)
    else:
        value = func.json_object("run_id", run.run_id, "try_number", ti.try_number)
    heard = exists().where(signal_listener_t.c.key == key)
    columns = ["key", "value", "source", "sent_at", "source_dag_run_id", "source_ti_id", "handled_at", "namespace"]
    return insert(signal_t).from_select(columns, select(
        key, value, literal(DAGLINE_SOURCE), passages.c.at, ti.dag_run_id, ti.id,
        case((heard, null()), else_=passages.c.at), dag.namespace,
    ).select_from(ti_t.join(dag_run_t, run.id == ti.dag_run_id).join(dag_t, dag.dag_id == ti.dag_id)
                  .join(passages, literal(True)))
        .where(ti.id.in_(bindparam("ids", expanding=True))).order_by(passages.c.ord, ti.id))


def listened(conn: Connection, key: str) -> bool:
    """Whether any stored DAG version has a rule for `key` (cheap: an index lookup)."""
    return conn.execute(select(exists().where(signal_listener_t.c.key == key))).scalar()
