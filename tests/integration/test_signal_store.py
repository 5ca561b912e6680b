"""The signal log: stored before the sender is answered, idempotent per key and id, bounded, listed
and pruned; on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from sqlalchemy import insert, select

from dagline.db.models import dag_run_t, dag_t, dag_version_t, signal_t, ti_t
from dagline.db.signal_log import record_task_state_passages
from dagline.errors import InvalidInput
from dagline.store.runs import trigger_run
from dagline.store.signals import SignalConflict, list_signals, prune, send_signal, show_signal
from dagline.times import UTC
from tests.helpers.harness import apply, write_dag

NOW = dt.datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def _send(db, key, value=None, **kw):
    kw.setdefault("source", "user:test")
    kw.setdefault("now", NOW)
    with db.begin() as conn:
        return send_signal(conn, key, value, **kw)


def _count(db):
    with db.begin() as conn:
        return len(conn.execute(select(signal_t.c.seq)).all())


def test_signals_get_increasing_seqs_and_keep_their_value(db):
    first, created = _send(db, "model.published", {"path": "/m/1", "auc": 0.91})
    second, _ = _send(db, "model.published", [1, "two", None])
    assert created and second > first
    with db.begin() as conn:
        shown = show_signal(conn, first)
    assert shown["value"] == {"path": "/m/1", "auc": 0.91}
    assert shown["key"] == "model.published" and shown["source"] == "user:test"
    assert shown["sent_at"] == "2026-05-01T12:00:00+00:00"
    assert shown["actions"] == [] and shown["why_nothing"] == "no DAG listens to this key"


def test_same_key_and_id_again_is_the_same_signal(db):
    seq, created = _send(db, "a.b", {"x": 1, "y": [1, 2]}, sender_id="req-1")
    again, created_again = _send(db, "a.b", {"y": [1, 2.0], "x": 1}, sender_id="req-1")
    assert created and not created_again and again == seq
    assert _count(db) == 1
    # the same id under another key is another signal
    other, created_other = _send(db, "a.c", {"x": 1}, sender_id="req-1")
    assert created_other and other != seq


def test_same_key_and_id_with_another_value_is_a_conflict_and_stores_nothing(db):
    seq, _ = _send(db, "a.b", {"x": 1}, sender_id="req-1")
    with pytest.raises(SignalConflict, match=f"seq {seq}"):
        _send(db, "a.b", {"x": 2}, sender_id="req-1")
    with pytest.raises(SignalConflict):
        _send(db, "a.b", True, sender_id="req-1")
    assert _count(db) == 1


@pytest.mark.parametrize("key, message", [
    ("", "non-empty"),
    ("Model.published", "not a signal key"),
    ("-x", "not a signal key"),
    ("a b", "not a signal key"),
    ("a" * 201, "at most 200"),
    ("dagline.task.d.t.success", "sent by dagline itself"),
])
def test_bad_keys_are_refused_naming_the_key(db, key, message):
    with pytest.raises(InvalidInput, match=message) as info:
        _send(db, key, 1)
    assert info.value.field == "key"
    assert _count(db) == 0


def test_a_value_over_64_kib_is_refused(db):
    _send(db, "big", "x" * (64 * 1024 - 2))  # exactly 64 KiB of JSON with its quotes
    with pytest.raises(InvalidInput, match="the limit is 65,536 bytes") as info:
        _send(db, "big", "x" * (64 * 1024 - 1))
    assert info.value.field == "value"
    with pytest.raises(InvalidInput, match="JSON"):
        _send(db, "big", float("nan"))
    assert _count(db) == 1


def test_list_filters_by_key_and_since_and_keeps_the_newest(db):
    seqs = [_send(db, f"k{i % 2}", i)[0] for i in range(6)]
    with db.begin() as conn:
        assert [s["value"] for s in list_signals(conn, key="k0")] == [0, 2, 4]
        assert [s["seq"] for s in list_signals(conn, since=seqs[3])] == seqs[4:]
        assert [s["value"] for s in list_signals(conn, limit=2)] == [4, 5]


def test_prune_deletes_old_handled_signals_only(db):
    old, _ = _send(db, "k", 1, now=NOW - dt.timedelta(days=10))
    new, _ = _send(db, "k", 2)
    with db.begin() as conn:
        assert prune(conn, older_than=NOW - dt.timedelta(days=1)) == 1
        assert [s["seq"] for s in list_signals(conn)] == [new]


def test_a_run_may_be_of_type_signal(db):
    with db.begin() as conn:
        conn.execute(insert(dag_t).values(dag_id="d", is_paused=False, is_active=True, timezone="UTC",
                                          created_at=NOW, updated_at=NOW))
        vid = conn.execute(insert(dag_version_t).values(dag_id="d", version="v", spec={}, created_at=NOW)
                           .returning(dag_version_t.c.id)).scalar_one()
        conn.execute(insert(dag_run_t).values(
            dag_id="d", run_id="signal__1", logical_date=NOW, data_interval_start=NOW, data_interval_end=NOW,
            run_after=NOW, run_type="signal", state="queued", dag_version_id=vid, created_at=NOW))
    from sqlalchemy.exc import IntegrityError
    with pytest.raises(IntegrityError):
        with db.begin() as conn:
            conn.execute(insert(dag_run_t).values(
                dag_id="d", run_id="x", logical_date=NOW + dt.timedelta(1), data_interval_start=NOW,
                data_interval_end=NOW, run_after=NOW, run_type="bogus", state="queued", dag_version_id=vid,
                created_at=NOW))


def test_a_quick_tries_running_and_success_signals_are_stored_in_order_with_their_listeners(db, tmp_path):
    """One statement stores both passages of tries reported once over: every `running` signal, in task
    instance order, then every `success`; a key some rule listens to waits to be handled, the rest are
    stored handled."""

    apply(db, write_dag(tmp_path, """
        apiVersion: dagline.io/v1alpha1
        kind: DAG
        metadata: {name: up}
        spec:
          schedule: null
          tasks:
            - {id: a, spark: {mainApplicationFile: a.py}}
            - {id: b, spark: {mainApplicationFile: b.py}}
    """, "up.yaml"))
    apply(db, write_dag(tmp_path, """
        apiVersion: dagline.io/v1alpha1
        kind: DAG
        metadata: {name: down}
        spec:
          schedule: null
          triggers: [{signal: dagline.task.up.b.success}]
          tasks: [{id: c, spark: {mainApplicationFile: c.py}}]
    """, "down.yaml"))
    run = trigger_run(db, "up", now=NOW)
    later = NOW + dt.timedelta(seconds=3)
    with db.begin() as conn:
        rows = conn.execute(select(ti_t.c.id, ti_t.c.task_id).where(ti_t.c.dag_run_id == run.id)
                            .order_by(ti_t.c.id)).all()
        record_task_state_passages(conn, rows, [("running", NOW), ("queued", NOW), ("success", later)])
    with db.begin() as conn:
        stored = conn.execute(select(signal_t).order_by(signal_t.c.seq)).all()
    assert [s.key for s in stored] == ["dagline.task.up.a.running", "dagline.task.up.b.running",
                                       "dagline.task.up.a.success", "dagline.task.up.b.success"]
    assert [s.sent_at for s in stored] == [NOW, NOW, later, later]
    assert [s.source_ti_id for s in stored] == [rows[0].id, rows[1].id] * 2
    assert [json.loads(s.value) for s in stored] == [{"run_id": run.run_id, "try_number": 0}] * 4
    assert [s.handled_at for s in stored] == [NOW, NOW, later, None]  # `queued` is no signal
