"""Storing many signals in one transaction with a few statements, for the HTTP API's batches.

The same rules as `signal_store.send_signal` (each signal in its sender's namespace: stored under
`names.qualify(namespace, key)`, so ids are per namespace) (and `signal_log.insert_signal`, the one-at-a-time
path): keys and ids checked, values encoded and bounded, the same key and id again is the same
signal (its seq, `created` False), another value under them is a `SignalConflict`, a signal no rule
listens to is stored already handled, and a transaction that stored a signal some rule listens to
announces itself (NOTIFY; one that stored only unheard signals wakes nobody: each wake-up costs every
replica a loop). What differs
is the cost: the keys' locks are taken once each, in sorted order (`claims.lock_signal_key`: two
batches never wait on each other in a circle, and within a key `seq` order is commit order), the
listeners and the ids already stored are read with one query each, and the new rows are inserted
with one multi-row INSERT. Holding every key's lock, no other sender can store one of these keys
before this commit, so "not stored yet" read here stays true until the insert.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from sqlalchemy import bindparam, insert, select, tuple_
from sqlalchemy.engine import Connection

from dagline.db.claims import lock_signal_key
from dagline.db.models import signal_listener_t, signal_t
from dagline.db.notify import SIGNALS_ONLY, announce
from dagline.db.signal_log import SignalConflict
from dagline.domain import names
from dagline.domain.signal_keys import encode_value, same_value, validate_key, validate_sender_id


def send_signals(
    conn: Connection, signals: Sequence[dict], *, source: str, now: dt.datetime,
    source_dag_run_id: int | None = None, source_ti_id: int | None = None,
    namespace: str = names.DEFAULT_NAMESPACE,
) -> list[tuple[int, bool]]:
    """Store `signals` ({key, value, id, and optionally namespace}: the sender's, else `namespace`) in
    order; returns (seq, created) per signal. Raises InvalidInput (nothing stored) or SignalConflict,
    whose `index` names the signal at fault."""
    encoded, qualified = [], []
    for i, s in enumerate(signals):
        validate_key(s["key"], field=f"[{i}].key")
        validate_sender_id(s.get("id"), field=f"[{i}].id")
        sender = names.check_namespace(s.get("namespace") or namespace, field=f"[{i}].namespace")
        encoded.append(encode_value(s.get("value"), field=f"[{i}].value"))
        qualified.append((sender, names.qualify(sender, s["key"])))
    keys = sorted({key for _, key in qualified})
    for key in keys:
        lock_signal_key(conn, key)
    heard = set(conn.execute(_HEARD, {"keys": keys}).scalars())
    ids = {(key, s["id"]) for s, (_, key) in zip(signals, qualified, strict=True) if s.get("id") is not None}
    stored: dict[tuple[str, str], Any] = {}
    pairs = sorted(ids)
    for start in range(0, len(pairs), 500):
        for row in conn.execute(select(signal_t.c.seq, signal_t.c.key, signal_t.c.sender_id, signal_t.c.value)
                                .where(tuple_(signal_t.c.key, signal_t.c.sender_id).in_(pairs[start:start + 500]))):
            stored[(row.key, row.sender_id)] = row

    answers: list[Any] = [None] * len(signals)
    new_rows, new_index, first_in_batch = [], [], {}
    for i, (s, text, (sender, key)) in enumerate(zip(signals, encoded, qualified, strict=True)):
        pair = (key, s.get("id"))
        if pair in stored:
            row = stored[pair]
            if not same_value(row.value, s.get("value")):
                raise _conflict(row.seq, pair, i)
            answers[i] = (row.seq, False)
            continue
        if s.get("id") is not None and pair in first_in_batch:  # the same id twice in this batch
            j = first_in_batch[pair]
            if not same_value(encoded[j], s.get("value")):
                raise _conflict(None, pair, i)
            answers[i] = ("same-as", j)
            continue
        if s.get("id") is not None:
            first_in_batch[pair] = i
        new_index.append(i)
        new_rows.append(dict(key=key, value=text, sender_id=s.get("id"), source=source, sent_at=now,
                             source_dag_run_id=source_dag_run_id, source_ti_id=source_ti_id, namespace=sender,
                             handled_at=None if key in heard else now))
    if new_rows:
        seqs = conn.execute(_INSERT, new_rows).scalars().all()
        for i, seq in zip(new_index, seqs, strict=True):
            answers[i] = (seq, True)
        if any(row["handled_at"] is None for row in new_rows):
            announce(conn, SIGNALS_ONLY)  # wake the replicas only for something to act on
    for i, answer in enumerate(answers):
        if answer[0] == "same-as":
            answers[i] = (answers[answer[1]][0], False)
    return answers


# Built once with bind parameters: no rebuilding and no cache key at every request (see `db.claims`).
_HEARD = select(signal_listener_t.c.key).distinct().where(
    signal_listener_t.c.key.in_(bindparam("keys", expanding=True)))
_INSERT = insert(signal_t).returning(signal_t.c.seq, sort_by_parameter_order=True)


def _conflict(seq: int | None, pair: tuple[str, str], index: int) -> SignalConflict:
    error = SignalConflict(seq or 0, names.name_of(pair[0]), pair[1])
    if seq is None:
        error.args = (f"signal {names.name_of(pair[0])!r} with id {pair[1]!r} appears twice in this batch with "
                      "different values",)
    error.index = index
    return error
