"""A real uvicorn server (`ApiServer` on a free port) driven by `dagline.sdk.client` and by `dagline tokens`:
what a job in a try and a person at a terminal see, on SQLite and PostgreSQL."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.request

import pytest
from click.testing import CliRunner
from sqlalchemy import func, select

from dagline.api import ApiSettings, create_app
from dagline.api.server import ApiServer
from dagline.cli import main
from dagline.db.models import signal_t
from dagline.sdk import client


def cli(db, *args, expect: int = 0):
    result = CliRunner().invoke(main, ["--db", db.url, *args], catch_exceptions=False)
    assert result.exit_code == expect, result.output
    return result


def count(db) -> int:
    with db.begin() as conn:
        return conn.execute(select(func.count()).select_from(signal_t)).scalar_one()


@pytest.fixture
def server(db):
    running = ApiServer(create_app(db, ApiSettings()), host="127.0.0.1", port=0).start()
    yield f"http://127.0.0.1:{running.port}"
    running.stop()


def test_tokens_made_on_the_command_line_work_against_the_server(db, server, monkeypatch):
    made = cli(db, "tokens", "create", "trainer")
    secret = made.stdout.strip()
    assert secret.startswith("dgl_") and "only time" in made.stderr
    reader = json.loads(cli(db, "tokens", "create", "dash", "--scope", "read", "--json").stdout)["token"]
    listed = cli(db, "tokens", "list", "--json").stdout
    assert secret not in listed and reader not in listed
    assert [(t["name"], t["scope"]) for t in json.loads(listed)] == [("trainer", "signals:send"), ("dash", "read")]

    monkeypatch.setenv("DAGLINE_API_URL", server)
    monkeypatch.setenv("DAGLINE_SIGNAL_TOKEN", secret)
    first = client.send_signal("model.published", {"path": "/m/1"}, id="v1")
    assert first["seq"] == 1 and first["created"] is True and "no DAG listens" in first["warning"]
    assert client.send_signal("model.published", {"path": "/m/1"}, id="v1")["created"] is False
    with pytest.raises(client.SignalConflict) as clash:
        client.send_signal("model.published", {"path": "/m/2"}, id="v1")
    assert clash.value.status == 409 and clash.value.field == "id"
    with pytest.raises(client.SignalRejected) as bad:
        client.send_signal("Model", 1)
    assert bad.value.status == 422 and bad.value.field == "key"
    with pytest.raises(client.SignalRejected) as big:
        client.send_signal("a.b", "x" * 70_000)
    assert big.value.status == 413 and big.value.field == "value"
    seqs = [r["seq"] for r in client.send_signals([{"key": "a.b"}, {"key": "a.c", "value": 2}])]
    assert first["seq"] < seqs[0] < seqs[1]  # increasing (PostgreSQL's sequence may leave gaps)
    with pytest.raises(client.SignalUnauthorized):
        client.send_signal("a.b", 1, token=reader)  # read only: 403

    request = urllib.request.Request(f"{server}/api/v1/signals?key=model.published",
                                     headers={"Authorization": f"Bearer {reader}"})
    with urllib.request.urlopen(request) as answer:
        assert [s["id"] for s in json.loads(answer.read())["signals"]] == ["v1"]

    cli(db, "tokens", "revoke", "trainer")
    with pytest.raises(client.SignalUnauthorized) as revoked:
        client.send_signal("a.b", 1)
    assert revoked.value.status == 401
    assert "no token named 'trainer'" in cli(db, "tokens", "revoke", "trainer", expect=1).stderr
    assert count(db) == 3


def test_bad_token_commands_exit_2_or_1_naming_the_cause(db):
    assert "--scope" in cli(db, "tokens", "create", "x", "--scope", "write", expect=2).stderr
    assert "NAME" in cli(db, "tokens", "create", "Bad Name", expect=2).stderr
    cli(db, "tokens", "create", "x")
    assert "exists already" in cli(db, "tokens", "create", "x", expect=1).stderr
    assert len(json.loads(cli(db, "tokens", "list", "--json").stdout)) == 1


class _FlakyFront(http.server.ThreadingHTTPServer):
    """Answers the first POST 503 and passes the later ones on to the API, recording every body."""

    def __init__(self, upstream: str):
        self.upstream, self.bodies = upstream, []
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                front.bodies.append(json.loads(body))
                if len(front.bodies) == 1:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                passed = urllib.request.Request(front.upstream + self.path, data=body, method="POST",
                                                headers={k: v for k, v in self.headers.items()})
                with urllib.request.urlopen(passed) as answer:
                    data, status = answer.read(), answer.status
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_):
                pass

        super().__init__(("127.0.0.1", 0), Handler)


def test_the_client_retries_with_the_same_id_and_the_signal_is_stored_once(db, server):
    secret = cli(db, "tokens", "create", "job").stdout.strip()
    front = _FlakyFront(server)
    threading.Thread(target=front.serve_forever, daemon=True).start()
    try:
        answer = client.send_signal("model.published", {"v": 1}, url=f"http://127.0.0.1:{front.server_port}",
                                    token=secret, timeout=20)
    finally:
        front.shutdown()
        front.server_close()
    assert len(front.bodies) == 2 and front.bodies[0] == front.bodies[1]  # the same id both times
    assert answer["created"] is True and count(db) == 1


def test_the_client_says_what_is_missing_or_unreachable(monkeypatch):
    monkeypatch.delenv("DAGLINE_API_URL", raising=False)
    monkeypatch.delenv("DAGLINE_SIGNAL_TOKEN", raising=False)
    with pytest.raises(client.SignalConfigError, match="DAGLINE_API_URL"):
        client.send_signal("a.b")
    with pytest.raises(client.SignalConfigError, match="DAGLINE_SIGNAL_TOKEN"):
        client.send_signal("a.b", url="http://127.0.0.1:9")
    with pytest.raises(client.SignalUnreachable, match="no answer"):
        client.send_signal("a.b", url="http://127.0.0.1:9", token="dgl_1_x", timeout=0.5)
