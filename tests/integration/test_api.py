"""The HTTP API (`POST`/`GET /api/v1/signals`) on SQLite and PostgreSQL, through FastAPI's TestClient
(the app itself is the point here; `test_api_server.py` runs a real uvicorn). Every refusal is
checked to leave the signal log as it was."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select, update

from dagline.api import ApiSettings, create_app
from dagline.clock import FixedClock
from dagline.db.models import signal_t, ti_t
from dagline.store.runs import trigger_run
from dagline.store.tokens import create_token, issue_try_tokens, revoke_token
from tests.helpers.harness import apply, write_dag

NOW = dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)
LISTENER = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: ml}
spec:
  schedule: null
  paused: false
  tasks:
    - id: evaluate
      onSignal: [{signal: model.published, action: start}]
      spark: {mainApplicationFile: evaluate.py}
"""


def token(db, name="sender", *scopes):
    with db.begin() as conn:
        return create_token(conn, name, scopes or ("signals:send",), now=NOW)


def client(db, **settings) -> TestClient:
    return TestClient(create_app(db, ApiSettings(**settings), clock=FixedClock(NOW)))


def bearer(secret: str) -> dict:
    return {"Authorization": f"Bearer {secret}"}


def stored(db) -> list[tuple]:
    with db.begin() as conn:
        return [tuple(r) for r in conn.execute(select(signal_t.c.seq, signal_t.c.key, signal_t.c.value,
                                                      signal_t.c.sender_id, signal_t.c.source)
                                               .order_by(signal_t.c.seq))]


def test_one_signal_then_a_batch_stored_and_read_back(db, tmp_path):
    apply(db, write_dag(tmp_path, LISTENER))
    api, send = client(db), token(db)
    answer = api.post("/api/v1/signals", json={"key": "model.published", "value": {"path": "/m/1"}, "id": "m1"},
                      headers=bearer(send))
    assert answer.status_code == 201
    assert answer.json() == {"seq": 1, "key": "model.published", "namespace": "default", "id": "m1", "created": True}
    batch = api.post("/api/v1/signals", headers=bearer(send), json=[
        {"key": "model.published", "value": {"path": "/m/2"}}, {"key": "nobody.listens", "value": [1, 2]}])
    assert batch.status_code == 201
    rows = batch.json()["signals"]
    assert [r["seq"] for r in rows] == [2, 3] and [r["created"] for r in rows] == [True, True]
    assert "warning" not in rows[0] and "no DAG listens to 'nobody.listens'" in rows[1]["warning"]
    assert stored(db) == [(1, "model.published", '{"path":"/m/1"}', "m1", "token:sender"),
                          (2, "model.published", '{"path":"/m/2"}', None, "token:sender"),
                          (3, "nobody.listens", "[1,2]", None, "token:sender")]

    reader = bearer(token(db, "reader", "read"))
    listed = api.get("/api/v1/signals", headers=reader).json()["signals"]
    assert [s["seq"] for s in listed] == [1, 2, 3]
    assert set(listed[0]) >= {"seq", "key", "namespace", "value", "id", "source", "sent_at", "actions"}
    assert listed[0]["value"] == {"path": "/m/1"} and listed[0]["sent_at"] == "2026-05-01T00:00:00+00:00"
    assert listed[2]["why_nothing"] == "no DAG listens to this key"
    assert [s["seq"] for s in api.get("/api/v1/signals?key=model.published&since=1", headers=reader)
            .json()["signals"]] == [2]
    assert [s["seq"] for s in api.get("/api/v1/signals?limit=1", headers=reader).json()["signals"]] == [3]
    assert api.get("/api/v1/signals/2", headers=reader).json()["value"] == {"path": "/m/2"}
    missing = api.get("/api/v1/signals/99", headers=reader)
    assert missing.status_code == 404 and "no signal with seq 99" in missing.json()["error"]


def test_a_retry_with_the_same_id_is_the_same_signal_and_another_value_is_a_conflict(db):
    api, headers = client(db), bearer(token(db))
    first = api.post("/api/v1/signals", json={"key": "a.b", "value": {"x": 1, "y": 2}, "id": "once"}, headers=headers)
    again = api.post("/api/v1/signals", json={"key": "a.b", "value": {"y": 2, "x": 1.0}, "id": "once"}, headers=headers)
    assert first.status_code == 201 and again.status_code == 200
    assert again.json() == {"seq": first.json()["seq"], "key": "a.b", "namespace": "default", "id": "once",
                            "created": False,
                            "warning": again.json()["warning"]}
    before = stored(db)
    clash = api.post("/api/v1/signals", json={"key": "a.b", "value": 3, "id": "once"}, headers=headers)
    assert clash.status_code == 409 and clash.json()["field"] == "id"
    assert "with another value" in clash.json()["error"]
    # a batch is all or nothing: the new signal before the conflicting one is not stored either
    mixed = api.post("/api/v1/signals", headers=headers, json=[{"key": "c.d", "value": 1, "id": "new"},
                                                               {"key": "a.b", "value": 4, "id": "once"}])
    assert mixed.status_code == 409 and mixed.json()["field"] == "[1].id"
    assert stored(db) == before
    replay = api.post("/api/v1/signals", headers=headers, json=[{"key": "a.b", "value": {"x": 1, "y": 2}, "id": "once"}])
    assert replay.status_code == 200 and replay.json()["signals"][0]["created"] is False


def test_tokens_and_scopes(db):
    api = client(db)
    sender, reader, admin = token(db, "s"), token(db, "r", "read"), token(db, "a", "admin")
    one = {"key": "a.b", "value": 1}
    no_token = api.post("/api/v1/signals", json=one)
    assert no_token.status_code == 401 and no_token.headers["www-authenticate"] == "Bearer"
    assert api.get("/api/v1/signals").status_code == 401
    wrong = sender[:-4] + ("AAAA" if not sender.endswith("AAAA") else "BBBB")
    assert api.post("/api/v1/signals", json=one, headers=bearer(wrong)).status_code == 401
    assert api.post("/api/v1/signals", json=one, headers=bearer("not-a-token")).status_code == 401
    assert api.post("/api/v1/signals", json=one, headers={"Authorization": f"Basic {sender}"}).status_code == 401
    refused = api.post("/api/v1/signals", json=one, headers=bearer(reader))
    assert refused.status_code == 403 and "signals:send" in refused.json()["error"]
    assert api.get("/api/v1/signals", headers=bearer(sender)).status_code == 403
    assert api.get("/api/v1/signals", headers=bearer(reader)).status_code == 200
    assert api.post("/api/v1/signals", json=one, headers=bearer(admin)).status_code == 201
    assert api.get("/api/v1/signals", headers=bearer(admin)).status_code == 200
    with db.begin() as conn:
        revoke_token(conn, "s")
    assert api.post("/api/v1/signals", json=one, headers=bearer(sender)).status_code == 401
    assert len(stored(db)) == 1


def test_anonymous_reads_only_with_the_flag_and_never_anonymous_writes(db):
    open_api = client(db, anonymous_read=True)
    assert open_api.get("/api/v1/signals").status_code == 200
    assert open_api.post("/api/v1/signals", json={"key": "a.b"}).status_code == 401
    assert open_api.get("/api/v1/signals", headers=bearer("dgl_1_" + "x" * 43)).status_code == 401
    assert client(db).get("/api/v1/signals").status_code == 401
    assert stored(db) == []


@pytest.mark.parametrize("body, status, field", [
    (b"{nope", 400, "body"),
    (b'{"key": "a.b", "value": NaN}', 400, "body"),
    (b'{"key": "Model.Published"}', 422, "key"),
    (b'{"key": "dagline.task.x.y.success"}', 422, "key"),
    (b'{"value": 1}', 422, "key"),
    (b'{"key": "a.b", "colour": "red"}', 422, "colour"),
    (b'{"key": "a.b", "id": 7}', 422, "id"),
    (b'[{"key": "a.b"}, {"key": "a b"}]', 422, "[1].key"),
    (b'[{"key": "a.b"}, 3]', 422, "[1]"),
    (b"[]", 422, "body"),
    (b'"a.b"', 422, "body"),
    (json.dumps({"key": "a.b", "value": "x" * 70_000}).encode(), 413, "value"),
    (json.dumps([{"key": "a.b", "value": "x" * 60_000}] * 40).encode(), 413, None),
    (json.dumps([{"key": "a.b"}] * 1001).encode(), 413, "body"),
])
def test_bad_input_is_refused_naming_the_field_and_nothing_is_stored(db, body, status, field):
    api, headers = client(db), bearer(token(db))
    api.post("/api/v1/signals", json={"key": "kept", "value": 1}, headers=headers)
    before = stored(db)
    answer = api.post("/api/v1/signals", content=body, headers={**headers, "Content-Type": "application/json"})
    assert answer.status_code == status, answer.text
    assert answer.json()["field"] == field and answer.json()["error"]
    assert stored(db) == before


@pytest.mark.parametrize("body, status, field, says", [
    (b"[" * 100_000, 400, "body", "nested more than"),  # counted before parsing: no RecursionError, no 500
    (b'{"key": "a.b", "value": ' + b"[" * 33 + b"]" * 33 + b"}", 422, "value", "nested more than 32 levels"),
    (b'{"key": "a.b", "value": "\\ud800"}', 422, "value", "a lone surrogate (\\ud800) in a string"),
    (b'[{"key": "a.b"}, {"key": "a.b", "value": {"\\udc00": 1}}]', 422, "[1].value",
     "a lone surrogate (\\udc00) in a key"),
    (b'{"key": "a.b", "value": {"p": ["\\u0000"]}}', 422, "value", "p[0]: a NUL character"),
    (b'{"key": "a.b", "id": "x\\u0000"}', 422, "id", "a NUL character"),
    (b'{"key": "a.b", "\\ud800": 1}', 422, '["\\ud800"]', "unknown field"),
    (b'{"key": "a.b", "value": 9223372036854775808}', 422, "value", "out of range"),
    (b'{"key": "a.b", "value": 1e999}', 422, "value", "inf is not a JSON number"),
    (b'{"key": "a.b", "value": "\xed\xa0\x80"}', 400, "body", "not valid UTF-8"),  # a surrogate encoded as bytes
])
def test_hostile_json_is_refused_naming_the_field_and_nothing_is_stored(db, body, status, field, says):
    api, headers = client(db), bearer(token(db))
    api.post("/api/v1/signals", json={"key": "kept", "value": 1}, headers=headers)
    before = stored(db)
    answer = api.post("/api/v1/signals", content=body, headers={**headers, "Content-Type": "application/json"})
    assert answer.status_code == status, answer.text
    assert answer.json()["field"] == field and says in answer.json()["error"], answer.text
    assert stored(db) == before


def test_bad_query_parameters_name_the_parameter(db):
    api, headers = client(db), bearer(token(db, "r", "read"))
    for query, field in (("since=-1", "since"), ("limit=0", "limit"), ("limit=x", "limit"), ("key=A", "key")):
        answer = api.get(f"/api/v1/signals?{query}", headers=headers)
        assert answer.status_code == 422 and answer.json()["field"] == field, query


def test_a_try_token_sends_as_its_try_only_while_the_try_runs(db, tmp_path):
    apply(db, write_dag(tmp_path, LISTENER.replace("on: [{signal: model.published, action: start}]", "")))
    trigger_run(db, "ml", now=NOW)
    with db.begin() as conn:  # the try running, as the scheduler would have made it
        ti = conn.execute(select(ti_t.c.id, ti_t.c.dag_run_id).order_by(ti_t.c.id)).first()
        conn.execute(update(ti_t).where(ti_t.c.id == ti.id).values(state="running", try_number=1))
        secret = issue_try_tokens(conn, [(ti.id, 1)], now=NOW)[ti.id]
    api = client(db)
    sent = api.post("/api/v1/signals", json={"key": "model.published", "value": 1}, headers=bearer(secret))
    assert sent.status_code == 201
    with db.begin() as conn:
        row = conn.execute(select(signal_t)).one()
    assert row.source.startswith("try:ml/") and row.source.endswith("/evaluate/1")
    assert (row.source_dag_run_id, row.source_ti_id) == (ti.dag_run_id, ti.id)
    assert api.get("/api/v1/signals", headers=bearer(secret)).status_code == 403  # it may only send
    with db.begin() as conn:
        conn.execute(update(ti_t).where(ti_t.c.id == ti.id).values(state="success"))
    expired = api.post("/api/v1/signals", json={"key": "model.published", "value": 2}, headers=bearer(secret))
    assert expired.status_code == 401 and "expired" in expired.json()["error"]
    with db.begin() as conn:
        assert conn.execute(select(func.count()).select_from(signal_t)).scalar_one() == 1


def test_one_id_twice_in_a_batch_is_one_signal_unless_the_values_differ(db):
    api, headers = client(db), bearer(token(db))
    twice = api.post("/api/v1/signals", headers=headers, json=[{"key": "a.b", "value": 1, "id": "x"},
                                                               {"key": "a.b", "value": 1.0, "id": "x"}])
    assert twice.status_code == 201
    [first, second] = twice.json()["signals"]
    assert first["seq"] == second["seq"] and (first["created"], second["created"]) == (True, False)
    before = stored(db)
    clash = api.post("/api/v1/signals", headers=headers, json=[{"key": "c.d", "value": 1, "id": "y"},
                                                               {"key": "c.d", "value": 2, "id": "y"}])
    assert clash.status_code == 409 and clash.json()["field"] == "[1].id" and "twice" in clash.json()["error"]
    assert stored(db) == before == [(first["seq"], "a.b", "1", "x", "token:sender")]
