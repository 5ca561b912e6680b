"""The findings of the hostile-input review (issue 27), each a regression test named after it, on SQLite and
PostgreSQL: every one was a 500 or a traceback (or a stored value that broke a page for good); each is now a
4xx naming the field (exit 2 from the command line), and nothing is stored."""

from __future__ import annotations

import datetime as dt

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from dagline.api import ApiSettings, create_app
from dagline.clock import FixedClock
from dagline.db.models import dag_run_t, signal_t
from dagline.store.runs import trigger_run
from dagline.store.tokens import create_token
from tests.helpers.cli import cli, snapshot
from tests.helpers.harness import apply, write_dag
from tests.helpers.web_session import sign_in

NOW = dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)
OVER_INT64 = str(2**63)  # 9223372036854775808: one more than a BIGINT holds
DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: box}
spec:
  schedule: null
  tasks:
    - id: t
      spark: {mainApplicationFile: t.py}
"""
JSON = {"content-type": "application/json"}


@pytest.fixture
def scene(db, tmp_path):
    """The DAG `box` with one triggered run (numeric id 1), and a token that may do everything."""
    apply(db, write_dag(tmp_path, DAG))
    trigger_run(db, "box", now=NOW)
    with db.begin() as conn:
        token = create_token(conn, "all", ("read", "operate", "signals:send"), now=NOW)
    return {"token": token, "auth": {"Authorization": f"Bearer {token}"}}


def client(db, **settings) -> TestClient:
    return TestClient(create_app(db, ApiSettings(**settings), clock=FixedClock(NOW)), follow_redirects=False)


def signals_stored(db) -> int:
    with db.begin() as conn:
        return len(conn.execute(select(signal_t.c.seq)).all())


def runs_stored(db) -> int:
    with db.begin() as conn:
        return len(conn.execute(select(dag_run_t.c.id)).all())


def refused(answer, status: int, field: str | None, words: str) -> None:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["field"] == field and words in body["error"], body


# -- a deeply nested JSON body ----------------------------------------------------------------------------

def test_deeply_nested_json_body_to_post_signals_is_refused_not_a_recursion_error(db, scene):
    api = client(db)
    deep = b"[" * 100_000 + b"]" * 100_000
    anonymous = api.post("/api/v1/signals", content=deep, headers=JSON)
    refused(anonymous, 401, None, "no token")  # without a token: who are you, before what is wrong
    answer = api.post("/api/v1/signals", content=deep, headers={**JSON, **scene["auth"]})
    refused(answer, 400, "body", "nested more than")
    inside = b'{"key": "a", "value": ' + b'{"a": ' * 5_000 + b"1" + b"}" * 5_000 + b"}"
    refused(api.post("/api/v1/signals", content=inside, headers={**JSON, **scene["auth"]}), 400, "body",
            "nested more than")
    assert signals_stored(db) == 0


# -- a lone surrogate ---------------------------------------------------------------------------------------

def test_lone_surrogate_as_a_signal_value_is_422_naming_the_value(db, scene):
    api = client(db)
    answer = api.post("/api/v1/signals", content=b'{"key": "a", "value": {"x": "\\ud800"}}',
                      headers={**JSON, **scene["auth"]})
    refused(answer, 422, "value", "lone surrogate")
    batch = api.post("/api/v1/signals", content=b'[{"key": "a"}, {"key": "b", "value": ["\\udfff"]}]',
                     headers={**JSON, **scene["auth"]})
    refused(batch, 422, "[1].value", "lone surrogate")
    assert signals_stored(db) == 0


def test_lone_surrogate_in_dags_trigger_conf_exits_2_and_stores_no_run(db, scene, tmp_path):
    before = snapshot(db)
    result = cli(db, "dags", "trigger", "box", "--conf", '{"a": "\\ud800"}', expect=2)
    assert "--conf" in result.output and "lone surrogate" in result.output
    conf_file = tmp_path / "conf.json"
    conf_file.write_text('{"a": ["\\udc00"]}')
    result = cli(db, "dags", "trigger", "box", "--conf-file", str(conf_file), expect=2)
    assert "--conf-file" in result.output and "lone surrogate" in result.output
    undecodable = cli(db, "dags", "trigger", "box", "--conf", '{"a": "x\udcff"}', expect=2)  # a byte 0xFF in argv
    assert "--conf" in undecodable.output and "not valid UTF-8" in undecodable.output
    assert snapshot(db) == before




def test_lone_surrogate_in_the_web_trigger_form_is_refused_and_the_run_page_keeps_working(db, scene):
    web = client(db)
    csrf = sign_in(web, scene["token"])
    runs = runs_stored(db)
    for conf in ('{"a": "\\ud800"}', '{"\\udbff": 1}'):
        answer = web.post("/dags/box/trigger", data={"csrf": csrf, "conf": conf, "confirmed": "yes"})
        assert answer.status_code == 422 and "lone surrogate" in answer.text, answer.text
    raw = web.post("/dags/box/trigger", content=f"csrf={csrf}&confirmed=yes&conf=%7B%22a%22%3A%22%ED%A0%80%22%7D",
                   headers={"content-type": "application/x-www-form-urlencoded"})  # the UTF-8 bytes of U+D800
    assert raw.status_code == 422 and "not valid UTF-8" in raw.text and "conf" in raw.text, raw.text
    assert runs_stored(db) == runs
    assert web.get("/runs/1").status_code == 200


def test_signals_send_with_a_lone_surrogate_exits_2_without_a_traceback(db, scene):
    before = snapshot(db)
    value = cli(db, "signals", "send", "a", "--value", '"\\ud800"', expect=2)
    assert "--value" in value.output and "lone surrogate" in value.output and "Traceback" not in value.output
    sender_id = cli(db, "signals", "send", "a", "--id", "x\udced", expect=2)  # argv bytes that are not UTF-8
    assert "--id" in sender_id.output and "not valid UTF-8" in sender_id.output
    key = cli(db, "signals", "send", "a\udcff", expect=2)
    assert "KEY" in key.output and "not valid UTF-8" in key.output
    assert snapshot(db) == before


# -- NUL characters ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/dags/a%00b/grid", "/runs/a%00b", "/runs/a%00b/logs/t/1", "/runs/1/logs/a%00b/1",
                                  "/api/v1/signals/1%00"])
def test_nul_characters_in_path_segments_are_422_naming_the_path(db, scene, path):
    for api in (client(db, anonymous_read=True), client(db)):
        refused(api.get(path, headers=scene["auth"]), 422, "path", "NUL character")
        refused(api.get(path), 422, "path", "NUL character")  # before any sign-in: nothing else runs


def test_nul_characters_in_query_parameters_and_form_fields_are_422_naming_them(db, scene):
    api = client(db)
    refused(api.get("/api/v1/signals?key=a%00", headers=scene["auth"]), 422, "key", "NUL character")
    refused(api.get("/runs/1?task=t%00", headers=scene["auth"]), 422, "task", "NUL character")
    web = client(db)
    csrf = sign_in(web, scene["token"])
    answer = web.post("/signals/send", data={"csrf": csrf, "key": "a", "id": "x\x00y", "confirmed": "yes"})
    assert answer.status_code == 422 and "NUL character" in answer.text and "id" in answer.text, answer.text
    assert signals_stored(db) == 0


def test_nul_character_in_a_signal_id_is_422_and_nothing_stored(db, scene):
    api = client(db)
    refused(api.post("/api/v1/signals", json={"key": "a", "id": "a\x00b"}, headers=scene["auth"]), 422, "id",
            "NUL character")
    refused(api.post("/api/v1/signals", json=[{"key": "a", "id": "ok"}, {"key": "a", "value": {"k\x00": 1}}],
                     headers=scene["auth"]), 422, "[1].value", "NUL character")
    assert signals_stored(db) == 0


# -- numbers beyond a BIGINT, and digits that are not ASCII --------------------------------------------------

def test_seq_and_since_above_2_63_minus_1_are_422_on_both_databases(db, scene):
    api = client(db)
    refused(api.get(f"/api/v1/signals/{OVER_INT64}", headers=scene["auth"]), 422, "seq", "9,223,372,036,854,775,807")
    refused(api.get(f"/api/v1/signals?since={OVER_INT64}", headers=scene["auth"]), 422, "since",
            "9,223,372,036,854,775,807")
    refused(api.get("/api/v1/signals?since=-1", headers=scene["auth"]), 422, "since", "at least 0")
    assert api.get(f"/api/v1/signals?since={2**63 - 1}", headers=scene["auth"]).json() == {"signals": []}
    assert api.get(f"/api/v1/signals/{2**63 - 1}", headers=scene["auth"]).status_code == 404
    since = cli(db, "signals", "list", "--since", OVER_INT64, expect=2)
    assert "--since" in since.output and "9,223,372,036,854,775,807" in since.output
    show = cli(db, "signals", "show", OVER_INT64, expect=2)
    assert "SEQ" in show.output and "9,223,372,036,854,775,807" in show.output
    web = client(db)
    sign_in(web, scene["token"])
    assert web.get(f"/runs/1/logs/t/1?offset={OVER_INT64}").status_code == 422
    assert web.get(f"/runs/1/logs/t/{OVER_INT64}").status_code == 422


@pytest.mark.parametrize("digit", ["%C2%B2", "%D9%A3", "1_0", "%201", "%EF%BC%91"])  # ², Arabic 3, 1_0, " 1", full-width 1
def test_a_unicode_digit_where_a_number_is_expected_is_422_naming_the_parameter(db, scene, digit):
    anonymous = client(db, anonymous_read=True)
    refused(anonymous.get(f"/api/v1/signals/{digit}"), 422, "seq", "ASCII digits")
    refused(anonymous.get(f"/api/v1/signals?since={digit}"), 422, "since", "ASCII digits")
    refused(anonymous.get(f"/api/v1/signals?limit={digit}"), 422, "limit", "ASCII digits")
    log = anonymous.get(f"/runs/1/logs/t/1?offset={digit}")
    assert log.status_code == 422 and "offset" in log.text and "ASCII digits" in log.text, log.text
    assert anonymous.get(f"/runs/1/logs/t/{digit}").status_code == 422
    page = anonymous.get(f"/dags/box/grid?runs={digit}")
    assert page.status_code == 422 and page.json()["field"] == "runs"


def test_a_unicode_digit_in_a_command_s_number_exits_2_naming_the_option(db, scene):
    for args, name in ((["signals", "show", "²"], "SEQ"), (["signals", "list", "--limit", "٣"], "--limit"),
                       (["runs", "list", "--limit", "1_0"], "--limit"), (["pools", "set", "p", "²"], "SLOTS")):
        result = cli(db, *args, expect=2)
        assert name in result.output and "ASCII digits" in result.output, result.output


# -- the OpenAPI document --------------------------------------------------------------------------------------

def test_the_openapi_document_has_request_bodies_parameters_and_error_answers(db):
    document = client(db).get("/api/openapi.json").json()
    post = document["paths"]["/api/v1/signals"]["post"]
    body = post["requestBody"]["content"]["application/json"]["schema"]
    assert body["anyOf"][0]["required"] == ["key"] and body["anyOf"][1]["type"] == "array"
    assert {p["name"] for p in document["paths"]["/api/v1/signals"]["get"]["parameters"]} == {"key", "since", "limit", "namespace"}
    seq = document["paths"]["/api/v1/signals/{seq}"]["get"]["parameters"][0]
    assert seq["in"] == "path" and seq["schema"] == {"type": "integer", "minimum": 0, "maximum": 2**63 - 1}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            errors = {code for code in operation["responses"] if code.startswith(("4", "5"))}
            assert "422" in errors, (method, path)
            for code in errors:
                schema = operation["responses"][code]["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/Error"}, (method, path, code)
    assert document["components"]["schemas"]["Error"]["required"] == ["error", "field"]


def test_a_nul_character_in_a_spec_is_refused_at_apply_naming_the_field(db, tmp_path):
    path = write_dag(tmp_path, DAG.replace("{mainApplicationFile: t.py}",
                                           '{mainApplicationFile: t.py, arguments: ["--out", "a\\0b"]}'), "nul.yaml")
    before = snapshot(db)
    result = cli(db, "dags", "apply", path, expect=2)
    assert "spec.tasks[0].spark.arguments[1]" in result.output and "NUL character" in result.output, result.output
    assert snapshot(db) == before
