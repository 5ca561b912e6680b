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
from dagline.db.models import dag_run_t, try_launch_t
from dagline.scheduler.renderer import Renderer
from tests.helpers import web_scenario as scene
from tests.helpers.dags import dag, task, write


@pytest.fixture
def world(db, tmp_path):
    names = scene.build(db, tmp_path)
    names["logs"] = tmp_path / "logs"
    names["folder"] = tmp_path
    return names


def make_client(db, world, **settings) -> TestClient:
    app = create_app(db, ApiSettings(log_folder=str(world["logs"]), **settings))
    return TestClient(app, follow_redirects=False)


def sign_in(client: TestClient, token: str) -> str:
    """Sign in through the form; returns the CSRF value the pages carry from then on."""
    client.get("/login")
    answer = client.post("/login", data={"token": token, "csrf": csrf_of(client.get("/login").text), "next": "/"})
    assert answer.status_code == 303 and answer.headers["location"] == "/", answer.text
    return csrf_of(client.get("/").text)


def csrf_of(page: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


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
