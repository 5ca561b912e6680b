"""Signals as people and programs see them: send one, list them, show one with what it caused, prune
old ones. Each function works inside the caller's transaction (`conn`) and validates before it
writes; the rows are dicts whose keys are the CLI's and the API's JSON contract (shared/CLI.md).

A signal lives in its sender's namespace (ADR 92): it is stored under `names.qualify(namespace, key)`
with `signal.namespace`, so everything below is per namespace by construction. Sending is idempotent
per `(namespace, key, id)`: the same key, id and value again is the same signal (its seq, `created`
False, no second effect); the same key and id with another value is a `SignalConflict` (exit 1). The
same key and id sent in another namespace is another signal: no answer depends on another namespace's
signals. Keys under `dagline.` are dagline's own and cannot be sent. In JSON, `key` is the bare key and
`namespace` the sender's namespace; readers limited to namespaces (`namespaces`) see only theirs.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import and_, bindparam, delete, exists, func, or_, select
from sqlalchemy.engine import Connection

from dagline.db.models import dag_run_t, dag_t, signal_action_t, signal_listener_t, signal_t
from dagline.db.signal_log import SignalConflict, insert_signal
from dagline.domain import names
from dagline.domain.signal_exports import NO_EXPORTS, SignalExports
from dagline.domain.signal_keys import encode_value, same_value, validate_key, validate_sender_id
from dagline.domain.states import RunState, SignalActionStatus
from dagline.errors import InvalidInput, NotFound
from dagline.times import isoformat

__all__ = ["SignalConflict", "send_signal", "list_signals", "show_signal", "prune", "listeners"]

NO_LISTENER = "no DAG listens to this key"
MAX_LIST = 10_000


def send_signal(
    conn: Connection,
    key: str,
    value: Any = None,
    *,
    sender_id: str | None = None,
    source: str,
    now: dt.datetime,
    source_dag_run_id: int | None = None,
    source_ti_id: int | None = None,
    namespace: str = names.DEFAULT_NAMESPACE,
) -> tuple[int, bool]:
    """Store a signal of `key` in the sender's `namespace`; returns (seq, created). Raises InvalidInput
    (bad key, id, namespace or value; nothing stored) or SignalConflict (same namespace, key and id,
    another value)."""
    validate_key(key)
    validate_sender_id(sender_id)
    names.check_namespace(namespace, field="namespace")
    if not isinstance(source, str) or not source or len(source) > 250:
        raise InvalidInput("a signal's source is a string of 1 to 250 characters", field="source")
    text = encode_value(value)
    return insert_signal(conn, key=names.qualify(namespace, key), value_text=text, sender_id=sender_id,
                         source=source, sent_at=now, source_dag_run_id=source_dag_run_id, source_ti_id=source_ti_id,
                         same_value=lambda stored: same_value(stored, value), namespace=namespace)


def listeners(conn: Connection, key: str, *, namespace: str = names.DEFAULT_NAMESPACE,
              exports: SignalExports = NO_EXPORTS) -> list[dict]:
    """The rules that would act on a signal of `key` sent in `namespace` now: DAG triggers and task
    rules of the active DAGs' current versions, and task rules of the versions running runs use; those
    of `namespace`'s DAGs, and of another namespace's DAGs naming `namespace/key` only where `exports`
    lets the key out to them (the reaction step's rule: `signal_reactions`)."""
    out = []
    for r in conn.execute(_LISTENERS, {"key": names.qualify(namespace, key)}).all():
        dag_namespace, dag_name = names.split(r.dag_id)
        if exports.allows(namespace, key, dag_namespace):
            out.append({"dag_id": dag_name, "rule": r.rule, "task_id": r.task_id or None, "action": r.action,
                        "namespace": dag_namespace})
    return out


def _listeners_statement():
    lst = signal_listener_t.c
    current = select(dag_t.c.current_version_id).where(dag_t.c.is_active.is_(True))
    running = select(dag_run_t.c.dag_version_id).where(dag_run_t.c.state.in_(RunState.ACTIVE))
    return (select(lst.dag_id, lst.rule, lst.task_id, lst.action).distinct()
            .where(lst.key == bindparam("key"), or_(lst.dag_version_id.in_(current), lst.dag_version_id.in_(running)))
            .order_by(lst.dag_id, lst.rule))


_LISTENERS = _listeners_statement()  # built once: the API asks at every request (no rebuilding, no cache key)


def _action_dict(a) -> dict:
    return {
        "rule": a.rule, "dag_id": names.name_of(a.dag_id), "run_id": a.run_id, "task_id": a.task_id or None,
        "action": a.action, "status": a.status, "try_number": a.try_number,
        "decided_at": isoformat(a.decided_at), "done_at": isoformat(a.done_at), "detail": a.detail,
        "namespace": names.namespace_of(a.dag_id),  # last, as every JSON object's namespace (CLI.md)
    }


def _signal_dict(s, actions: list[dict], why: str | None) -> dict:
    return {
        "seq": s.seq, "key": names.name_of(s.key), "value": json.loads(s.value), "id": s.sender_id,
        "source": s.source, "sent_at": isoformat(s.sent_at), "handled_at": isoformat(s.handled_at), "actions": actions,
        **({"why_nothing": why} if why else {}), "namespace": s.namespace,  # last (CLI.md)
    }


def _with_actions(conn: Connection, rows) -> list[dict]:
    seqs = [r.seq for r in rows]
    by_seq: dict[int, list[dict]] = {seq: [] for seq in seqs}
    for i in range(0, len(seqs), 500):
        for a in conn.execute(select(signal_action_t).where(signal_action_t.c.signal_seq.in_(seqs[i:i + 500]))
                              .order_by(signal_action_t.c.signal_seq, signal_action_t.c.id)):
            by_seq[a.signal_seq].append(_action_dict(a))
    heard = set()
    keys = {r.key for r in rows if not by_seq[r.seq]}
    if keys:
        heard = set(conn.execute(select(signal_listener_t.c.key).distinct()
                                 .where(signal_listener_t.c.key.in_(keys))).scalars())
    out = []
    for r in rows:
        why = None
        if not by_seq[r.seq]:
            if r.handled_at is None:
                why = "not handled yet"
            elif r.key not in heard:
                why = NO_LISTENER
            else:
                why = "no rule applied: no matching DAG was active or no run was running when it was handled"
        out.append(_signal_dict(r, by_seq[r.seq], why))
    return out


def _visible(stmt, namespaces: Iterable[str] | None):
    """Only the signals sent in `namespaces` (None: every signal)."""
    if namespaces is None:
        return stmt
    return stmt.where(signal_t.c.namespace.in_(sorted(set(namespaces))))


def _of_key(key: str, namespaces: Iterable[str] | None):
    """The condition: a signal of bare `key`, in any of `namespaces` (None: in any namespace)."""
    if namespaces is not None:
        return signal_t.c.key.in_(sorted({names.qualify(ns, key) for ns in namespaces}))
    return or_(signal_t.c.key == key, signal_t.c.key.endswith(names.SEPARATOR + key, autoescape=True))


def _key_starts(prefix: str):
    """The condition: a signal whose bare key starts with `prefix` (a key holds one '/' at most: the
    one after its namespace)."""
    return or_(and_(signal_t.c.namespace == names.DEFAULT_NAMESPACE,
                    signal_t.c.key.startswith(prefix, autoescape=True)),
               and_(signal_t.c.namespace != names.DEFAULT_NAMESPACE,
                    signal_t.c.key.contains(names.SEPARATOR + prefix, autoescape=True)))


def list_signals(conn: Connection, *, key: str | None = None, since: int | None = None,
                 limit: int | None = None, namespaces: Iterable[str] | None = None) -> list[dict]:
    """Signals in seq order (after `since`, of bare `key` in any namespace read), the newest `limit` of
    them, each with its actions; with `namespaces`, only the signals sent in them."""
    stmt = _visible(select(signal_t), namespaces)
    if key is not None:
        stmt = stmt.where(_of_key(key, namespaces))
    if since is not None:
        stmt = stmt.where(signal_t.c.seq > since)
    limit = min(limit or MAX_LIST, MAX_LIST)
    rows = list(reversed(conn.execute(stmt.order_by(signal_t.c.seq.desc()).limit(limit)).all()))
    return _with_actions(conn, rows)


INTERNAL_PREFIX = "dagline."  # the keys dagline sends itself (a task changed state: `dagline.task.*`)


def signal_page_rows(conn: Connection, *, key_prefix: str = "", source_prefix: str = "", internal: bool = False,
                     before: int | None = None, limit: int = 100,
                     namespaces: Iterable[str] | None = None) -> tuple[list[dict], bool]:
    """One page of the signal log, newest first: the `limit` signals before seq `before` (keyset: a page's
    address stays valid as new signals arrive) whose bare key and source start with the prefixes given,
    each with its actions; dagline's own `dagline.*` signals only with `internal` (or a key prefix naming
    them); with `namespaces`, only the signals sent in them. Returns (signals, whether older ones
    match)."""
    stmt = _visible(select(signal_t), namespaces)
    if key_prefix:
        stmt = stmt.where(_key_starts(key_prefix))
    if source_prefix:
        stmt = stmt.where(signal_t.c.source.startswith(source_prefix, autoescape=True))
    if not internal and not key_prefix.startswith(INTERNAL_PREFIX):
        stmt = stmt.where(~_key_starts(INTERNAL_PREFIX))
    if before is not None:
        stmt = stmt.where(signal_t.c.seq < before)
    rows = conn.execute(stmt.order_by(signal_t.c.seq.desc()).limit(limit + 1)).all()
    return _with_actions(conn, rows[:limit]), len(rows) > limit


def show_signal(conn: Connection, seq: int, *, namespaces: Iterable[str] | None = None) -> dict:
    """One signal with its actions; one sent outside `namespaces` is not found, as a missing one."""
    row = conn.execute(_visible(select(signal_t).where(signal_t.c.seq == seq), namespaces)).first()
    if row is None:
        raise NotFound(f"no signal with seq {seq}")
    return _with_actions(conn, [row])[0]


def prune(conn: Connection, *, older_than: dt.datetime) -> int:
    """Delete the handled signals sent before `older_than` and their action rows; returns how many
    signals. Signals not handled yet and those with a `pending` action are kept: pruning never
    loses work. Task instances keep the seq of the signal that started them."""
    if older_than.tzinfo is None:
        raise InvalidInput("an aware time is needed", field="--older-than")
    pending = exists().where(signal_action_t.c.signal_seq == signal_t.c.seq,
                             signal_action_t.c.status == SignalActionStatus.PENDING)
    old = (select(signal_t.c.seq).where(signal_t.c.sent_at < older_than, signal_t.c.handled_at.is_not(None), ~pending))
    seqs = list(conn.execute(old).scalars())
    for i in range(0, len(seqs), 500):
        chunk = seqs[i:i + 500]
        conn.execute(delete(signal_action_t).where(signal_action_t.c.signal_seq.in_(chunk)))
        conn.execute(delete(signal_t).where(signal_t.c.seq.in_(chunk)))
    return len(seqs)


def count_signals(conn: Connection) -> int:
    return conn.execute(select(func.count()).select_from(signal_t)).scalar_one()
