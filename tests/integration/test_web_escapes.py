"""The web UI escapes what others wrote, and signing out is a form like any other (FastAPI's TestClient on the
API's own app, both databases): markup in the sign-in page's message, in a signal's id and source on
`/signals`, in an import error on the DAG list and a DAG's page, comes back as text; `POST /logout` without
this browser's CSRF field is refused and signs nobody out."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from dagline.api import ApiSettings, create_app
from dagline.scheduler.isolation import record_import_error
from dagline.store.signals import send_signal
from dagline.times import parse_instant
from tests.helpers.cli import cli
from tests.helpers.dags import dag, task, write
from tests.helpers.web_session import sign_in

HTML = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
ESCAPED = "&lt;script&gt;window.pwned = 1&lt;/script&gt;&lt;img src=x onerror="
NOW = parse_instant("2026-03-02T00:00:00Z")


@pytest.fixture
def site(db, tmp_path):
    """A DAG `sales`, a token that may read and send signals, and a client (no redirects followed)."""
    cli(db, "dags", "apply", write(tmp_path, dag("sales", task("a"))))
    token = cli(db, "tokens", "create", "ops", "--scope", "read", "--scope", "signals:send").stdout.strip()
    client = TestClient(create_app(db, ApiSettings(log_folder=str(tmp_path / "logs"))), follow_redirects=False)
    return client, token




def _assert_escaped(page: str) -> None:
    assert "<script>window.pwned" not in page and "<img src=x" not in page
    assert ESCAPED in page.replace("&#34;", '"').replace("&quot;", '"')


def test_the_sign_in_page_shows_no_text_of_its_link(site):
    client, _ = site
    page = client.get("/login", params={"why": HTML, "next": "/"})
    assert page.status_code == 200
    assert "window.pwned" not in page.text and 'class="problem"' not in page.text  # neither run nor shown


def test_signals_show_their_id_and_source_as_text(db, site):
    client, token = site
    csrf = sign_in(client, token)
    sent = client.post("/signals/send", data={"csrf": csrf, "confirmed": "yes", "key": "model.published",
                                              "value": "1", "id": HTML})
    assert sent.status_code == 303, sent.text
    with db.begin() as conn:  # a source written by another sender than this page (the API, an operator)
        send_signal(conn, "model.retired", 2, source=HTML, now=NOW)
    page = client.get("/signals").text
    assert page.count("model.") >= 2
    _assert_escaped(page)
    row = page[page.index("model.retired"):]
    _assert_escaped(row[:row.index("</tr>")])  # the source, in its own row


def test_an_import_error_is_shown_as_text_on_the_dag_list_and_the_dags_page(db, site):
    client, token = site
    with db.begin() as conn:
        assert record_import_error(conn, "sales", f"template failed: {HTML}", at=NOW, who="test")
    sign_in(client, token)
    listing = client.get("/").text
    assert "import error" in listing
    _assert_escaped(listing)
    _assert_escaped(client.get("/dags/sales/grid").text)


def test_logout_without_the_csrf_field_is_refused_and_signs_nobody_out(site):
    client, token = site
    csrf = sign_in(client, token)
    for data in ({"next": "/"}, {"csrf": "x" * 43}):
        refused = client.post("/logout", data=data)
        assert refused.status_code == 403 and "CSRF" in refused.text
        assert "dagline_token" not in refused.headers.get("set-cookie", "")
        assert client.get("/").status_code == 200  # still signed in
    done = client.post("/logout", data={"csrf": csrf})
    assert done.status_code == 303 and done.headers["location"] == "/login"
    assert client.get("/").status_code == 303  # signed out: to the sign-in page
