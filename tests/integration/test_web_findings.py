"""Regression tests of the web UI findings of issue 27's security review, one test named after each
finding, on SQLite and PostgreSQL (FastAPI's TestClient on the API's own app, as tests/integration/test_web.py):
run pages that render nothing and show a render failure, CSRF bound to the sign-in, capped event
streams, fixed sign-in messages, API docs off by default, security headers on every answer."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from dagline.api import ApiSettings, create_app
from dagline.db.models import dag_run_t, dag_t, try_launch_t
from dagline.scheduler.renderer import Renderer
from tests.helpers import web_scenario as scene
from tests.helpers.dags import dag, task, write
from tests.helpers.web_session import csrf_field, sign_in


@pytest.fixture
def world(db, tmp_path):
    names = scene.build(db, tmp_path)
    names["logs"] = tmp_path / "logs"
    names["folder"] = tmp_path
    return names


def make_client(db, world, **settings) -> TestClient:
    app = create_app(db, ApiSettings(log_folder=str(world["logs"]), **settings))
    return TestClient(app, follow_redirects=False)




def paused(db, dag_id: str) -> bool:
    with db.begin() as conn:
        return conn.execute(select(dag_t.c.is_paused).where(dag_t.c.dag_id == dag_id)).scalar_one()




def runs_of(db, dag_id: str) -> list:
    with db.begin() as conn:
        return conn.execute(select(dag_run_t).where(dag_run_t.c.dag_id == dag_id).order_by(dag_run_t.c.id)).all()


# -- pages that cost what they show ------------------------------------------------------------------


def test_a_run_whose_task_template_fails_to_render_has_a_run_page_showing_the_error(db, world):
    path = write(world["folder"], dag("broken", task("a", spark={"arguments": ["{{ conf.nope }}"]})))
    scene.cli(db, "dags", "apply", path)
    scene.cli(db, "dags", "trigger", "broken", "--now", "2026-01-06T03:00:00")
    scene.cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-01-06T03:00:00Z", expect=1)
    [run] = runs_of(db, "broken")
    client = make_client(db, world)
    sign_in(client, world["reader"])
    page = client.get(f"/runs/{run.id}")
    assert page.status_code == 200, page.text
    error = re.search(r'<p class="problem">(.*?)</p>', page.text, re.S).group(1)
    assert "template error" in error and "nope" in error and "spark.arguments[0]" in error


def test_every_run_page_view_renders_templates_in_a_renderer_process(db, world, monkeypatch):
    """The finding was that a page view started a renderer (2.3-2.8 s each); now pages show what was stored
    at launch, and a view that tried to render fails this test."""
    def no_rendering(*args, **kwargs):
        raise AssertionError("a page view started a renderer")

    monkeypatch.setattr(Renderer, "render", no_rendering)
    monkeypatch.setattr(Renderer, "_spawn", no_rendering)
    client = make_client(db, world)
    sign_in(client, world["reader"])
    first = runs_of(db, "sales")[0]
    page = client.get(f"/runs/{first.id}?task=extract").text
    args = re.search(r'<dt>arguments</dt><dd><pre class="args">(.*?)</pre>', page, re.S).group(1)
    assert args.split() == ["--date", "2026-01-01", "--out", "/data/20260101"]  # stored when it was launched
    with db.begin() as conn:
        stored = conn.execute(select(try_launch_t)).all()
    assert any(r.arguments == ["--date", "2026-01-01", "--out", "/data/20260101"] for r in stored)
    transform = client.get(f"/runs/{first.id}?task=transform").text
    assert "dagline.noop.outcome: success" in transform

    scene.cli(db, "dags", "trigger", "stream", "--now", "2026-01-06T03:00:00")  # nothing launched yet
    run = runs_of(db, "stream")[-1]
    waiting = client.get(f"/runs/{run.id}?task=evaluate")
    assert waiting.status_code == 200 and "rendered at launch" in waiting.text


# -- the web UI holds up -------------------------------------------------------------------------------


def test_the_csrf_double_submit_cookie_is_not_bound_to_anything(db, world):
    """The finding: a planted cookie with the same form value and `Origin: null` unpaused a DAG. Now the
    field is a signature of the cookie and the sign-in, made with the server's secret."""
    client = make_client(db, world)
    sign_in(client, world["token"])
    scene.cli(db, "dags", "pause", "sales")
    planted = "p" * 43
    client.cookies.set("dagline_csrf", planted)
    for headers in ({"Origin": "null"}, {}):
        answer = client.post("/dags/sales/unpause", data={"csrf": planted, "confirmed": "yes"}, headers=headers)
        assert answer.status_code == 403 and "CSRF" in answer.text
    assert paused(db, "sales")

    client = make_client(db, world)
    before = csrf_field(client.get("/login").text)
    csrf = sign_in(client, world["token"])
    assert csrf != before  # rotated at sign-in: a value seen before signing in is worth nothing after
    opaque = client.post("/dags/sales/unpause", data={"csrf": csrf, "confirmed": "yes"}, headers={"Origin": "null"})
    assert opaque.status_code == 403 and "Origin: null" in opaque.text
    stale = client.post("/dags/sales/unpause", data={"csrf": before, "confirmed": "yes"})
    assert stale.status_code == 403
    done = client.post("/dags/sales/unpause", data={"csrf": csrf, "confirmed": "yes"})
    assert done.status_code == 303, done.text
    assert not paused(db, "sales")

    again = make_client(db, world)  # another sign-in of the same token: values of its own
    assert sign_in(again, world["token"]) != csrf
    replica = create_app(db, ApiSettings(log_folder=str(world["logs"])))  # shares the key stored in the database
    assert TestClient(replica, cookies=dict(client.cookies), follow_redirects=False).post(
        "/dags/sales/pause", data={"csrf": csrf, "confirmed": "yes"}).status_code == 303
    assert paused(db, "sales")
    other_server = create_app(db, ApiSettings(log_folder=str(world["logs"]), ui_secret="s" * 40))
    assert TestClient(other_server, cookies=dict(client.cookies), follow_redirects=False).post(
        "/dags/sales/unpause", data={"csrf": csrf, "confirmed": "yes"}).status_code == 403  # another secret


def test_event_streams_uncapped(db, world):
    """The finding: 200 anonymous event streams were all accepted. Now each client, and the server, has a cap."""
    app = create_app(db, ApiSettings(log_folder=str(world["logs"]), anonymous_read=True, max_event_streams=3,
                                     max_event_streams_per_client=2))
    feed = app.state.dagline_live
    feed.closed = True  # as at a server's stop: an admitted stream says hello and ends (a test reads it whole)
    client = TestClient(app, follow_redirects=False)
    admitted = client.get("/ui/events")
    assert admitted.status_code == 200 and "event: hello" in admitted.text
    # it ended: its slot is free again
    assert feed.open_streams == 0
    assert feed.admit("address:testclient") is None and feed.admit("address:testclient") is None
    refused = client.get("/ui/events")
    assert refused.status_code == 429 and refused.headers["retry-after"] == "30"
    assert "for this client" in refused.text
    assert feed.admit("address:elsewhere") is None  # the third stream on the server
    signed_in = TestClient(app, follow_redirects=False)
    sign_in(signed_in, world["reader"])
    full = signed_in.get("/ui/events")
    assert full.status_code == 429 and "on this server" in full.text
    feed.release("address:testclient")
    assert signed_in.get("/ui/events").status_code == 200


def test_login_why_shows_arbitrary_text(db, world):
    """The finding: `/login?why=...` showed whatever text the link carried. Now only fixed codes choose a message."""
    client = make_client(db, world)
    phishing = client.get("/login", params={"why": "Your session expired: call +1 555 0100 with your token"})
    assert phishing.status_code == 200 and "555 0100" not in phishing.text
    assert 'class="problem"' not in phishing.text
    first_visit = client.get("/login")
    assert 'class="problem"' not in first_visit.text  # a first visit shows no error
    expired = client.get("/login", params={"why": "expired"})
    assert "unknown, revoked or expired" in expired.text
    redirect = client.get("/dags/sales/grid")  # a first visit: sent to sign in, without an error
    assert redirect.status_code == 303 and "why=" not in redirect.headers["location"]
    assert 'class="problem"' not in client.get(redirect.headers["location"]).text
    assert "sign in with an API token" in client.get("/login", params={"why": "required"}).text
    revoked = client.get("/", headers={"Authorization": "Bearer dgl_1_" + "x" * 43})
    assert revoked.headers["location"].endswith("&why=expired")


def test_api_docs_load_a_floating_version_cdn_script(db, world):
    """The finding: /api/docs loaded a floating-version script from a CDN on the UI's origin. Now there is
    no such page (ADR 63); the OpenAPI document is served, under the same security headers."""
    client = make_client(db, world, anonymous_read=True)
    docs = client.get("/api/docs")
    assert docs.status_code == 404 and "cdn" not in docs.text.lower()
    document = client.get("/api/openapi.json")
    assert document.status_code == 200 and "/api/v1/signals" in document.json()["paths"]
    assert "/api/docs" not in client.get("/").text


@pytest.mark.parametrize("path", ["/api/v1/health", "/api/openapi.json", "/api/v1/signals", "/api/v1/nope", "/",
                                  "/login", "/ui/static/dagline.css", "/runs/1/logs/extract/1"])
def test_security_headers_on_every_answer(db, world, path):
    client = make_client(db, world)
    answer = client.get(path)
    headers = answer.headers
    assert "default-src 'self'" in headers["content-security-policy"], (path, answer.status_code)
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "same-origin" and headers["x-frame-options"] == "DENY"
