"""Two teams on one API (issue 26, docs/adr/0050), on SQLite and PostgreSQL: a token limited to
namespace `a-team` can neither read nor act on `team-b`'s DAGs, runs, logs or signals. What it may
not see answers 404 exactly as what does not exist (its existence is not revealed); listings leave it
out; its signals reach only `a-team`'s DAGs. A DAG applied from a file is `default`'s: a token limited
to `a-team` does not see it. The web UI's addresses carry a DAG's key (`/dags/a-team/a-sales/grid`)."""

from __future__ import annotations

import datetime as dt

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from dagline.api import ApiSettings, create_app
from dagline.clock import FixedClock
from dagline.db.models import dag_run_t, dag_t
from dagline.errors import InvalidInput
from dagline.store.runs import trigger_run
from dagline.store.tokens import create_token
from tests.helpers.harness import schedule
from tests.helpers.tenancy import TEAM_KEYS, apply_in_namespaces, apply_team_dags
from tests.helpers.web_session import csrf_field

NOW = dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)
A, B = "a-team", "team-b"
SCOPES = ("read", "operate", "signals:send")


def _dag(name: str) -> str:
    return f"""
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {{name: {name}}}
spec:
  schedule: null
  paused: false
  triggers: [{{signal: orders.ready}}]
  tasks:
    - id: load
      spark: {{mainApplicationFile: load.py}}
"""


@pytest.fixture
def teams(db, tmp_path):
    """`a-sales` owned by a-team, `b-sales` by team-b (as their DAG objects apply them), `local` from a
    file; one finished run each; a token per team and an unlimited one."""
    runs = apply_team_dags(db, tmp_path, _dag, now=NOW)
    schedule(db, NOW.isoformat())
    with db.begin() as conn:
        tokens = {"a": create_token(conn, "a", SCOPES, now=NOW, namespaces=[A]),
                  "b": create_token(conn, "b", SCOPES, now=NOW, namespaces=[B]),
                  "all": create_token(conn, "all", SCOPES, now=NOW)}
    return {"runs": runs, "tokens": tokens, "logs": tmp_path / "logs"}


def _client(db, teams, who: str) -> tuple[TestClient, str]:
    """A signed-in browser (or API client: the bearer header works too) of token `who`; its CSRF value."""
    client = TestClient(create_app(db, ApiSettings(log_folder=str(teams["logs"])), clock=FixedClock(NOW)),
                        follow_redirects=False)
    client.headers["Authorization"] = f"Bearer {teams['tokens'][who]}"
    client.get("/login")
    return client, csrf_field(client.get("/").text)  # bound to the token presented (ADR 61)


def _runs(db, name: str) -> list:
    """The runs of the team DAG `name` (`TEAM_KEYS`: its key), else of the DAG keyed `name`."""
    key = TEAM_KEYS.get(name, name)
    with db.begin() as conn:
        return conn.execute(select(dag_run_t).where(dag_run_t.c.dag_id == key).order_by(dag_run_t.c.id)).all()


def _paused(db, name: str) -> bool:
    with db.begin() as conn:
        return conn.execute(select(dag_t.c.is_paused).where(dag_t.c.dag_id == TEAM_KEYS[name])).scalar_one()


def test_a_namespace_token_reads_only_its_namespaces_dags_runs_and_logs(db, teams):
    client, _ = _client(db, teams, "a")
    a_run, b_run, local_run = (teams["runs"][n] for n in ("a-sales", "b-sales", "local"))
    index = client.get("/")
    assert index.status_code == 200 and "a-sales" in index.text and A in index.text
    assert "b-sales" not in index.text and ">local<" not in index.text
    for path in ("/dags/a-team/a-sales/grid", f"/runs/{a_run.id}", f"/runs/{a_run.id}/logs/load/1"):
        assert client.get(path).status_code == 200, path
    nowhere = client.get("/dags/nowhere/grid")
    for dag_id, run in ((TEAM_KEYS["b-sales"], b_run), (TEAM_KEYS["local"], local_run)):
        hidden = client.get(f"/dags/{dag_id}/grid")
        assert hidden.status_code == 404
        assert hidden.text.replace(dag_id, "X") == nowhere.text.replace("nowhere", "X")  # same as unknown
        for path in (f"/dags/{dag_id}/graph", f"/dags/{dag_id}/timeline", f"/dags/{dag_id}/tasks/load",
                     f"/runs/{run.id}", f"/runs/{run.id}/logs/load/1"):
            assert client.get(path).status_code == 404, path
    # the unlimited token still sees every DAG
    everything, _ = _client(db, teams, "all")
    page = everything.get("/").text
    assert all(name in page for name in ("a-sales", "b-sales", "local"))
    assert everything.get(f"/runs/{b_run.id}").status_code == 200


def test_a_namespace_token_cannot_act_on_another_namespaces_dag_or_run(db, teams):
    client, csrf = _client(db, teams, "a")
    b_run = teams["runs"]["b-sales"]
    before = [(r.id, r.state) for r in _runs(db, "b-sales")]
    for path, extra in (("/dags/team-b/b-sales/pause", {}), ("/dags/team-b/b-sales/trigger", {}),
                        ("/dags/team-b/b-sales/backfill", {"start": "2026-04-01", "end": "2026-04-02"}),
                        (f"/runs/{b_run.id}/clear", {}), (f"/runs/{b_run.id}/stop", {})):
        for confirmed in ("", "yes"):
            answer = client.post(path, data={"csrf": csrf, "confirmed": confirmed, **extra})
            assert answer.status_code == 404, (path, confirmed, answer.text)
    assert not _paused(db, "b-sales") and [(r.id, r.state) for r in _runs(db, "b-sales")] == before
    answer = client.post("/dags/a-team/a-sales/pause", data={"csrf": csrf, "confirmed": "yes"})
    assert answer.status_code == 303 and _paused(db, "a-sales")  # its own namespace's DAG: done


def test_signals_of_a_namespace_token_reach_and_show_only_its_namespace(db, teams):
    a_client, _ = _client(db, teams, "a")
    b_client, _ = _client(db, teams, "b")
    sent = a_client.post("/api/v1/signals", json={"key": "orders.ready", "value": {"n": 1}, "id": "o1"})
    assert sent.status_code == 201 and "warning" not in sent.json()
    seq = sent.json()["seq"]
    schedule(db, NOW.isoformat())
    assert [r.run_type for r in _runs(db, f"{A}/a-sales")] == ["manual", "signal"]
    assert [r.run_type for r in _runs(db, f"{B}/b-sales")] == ["manual"]  # team-b's trigger did not fire
    assert [r.run_type for r in _runs(db, "local")] == ["manual"]
    seen_by_a = a_client.get("/api/v1/signals").json()["signals"]
    assert [(s["seq"], s["namespace"]) for s in seen_by_a if s["key"] == "orders.ready"] == [(seq, A)]
    assert {s["key"] for s in seen_by_a} - {"orders.ready"} <= {f"dagline.task.a-sales.load.{state}"
                                                               for state in ("running", "success", "failed")}
    assert [a["dag_id"] for a in a_client.get(f"/api/v1/signals/{seq}").json()["actions"]] == ["a-sales"]
    seen_by_b = b_client.get("/api/v1/signals").json()["signals"]  # its own DAG's task signals only
    assert seen_by_b and all(s["key"].startswith("dagline.task.b-sales.") and s["namespace"] == B
                             for s in seen_by_b)
    hidden, missing = b_client.get(f"/api/v1/signals/{seq}"), b_client.get("/api/v1/signals/999")
    assert hidden.status_code == missing.status_code == 404
    assert "orders.ready" not in b_client.get("/signals").text


def test_a_token_limited_to_a_bad_namespace_is_refused_and_nothing_stored(db):
    with db.begin() as conn:
        with pytest.raises(InvalidInput) as refused:
            create_token(conn, "bad", ("read",), now=NOW, namespaces=["Team_B"])
    assert refused.value.field == "--namespace" and "'Team_B' is not a namespace name" in refused.value.reason


def test_task_state_signals_of_a_namespaces_dag_reach_only_that_namespace(db, teams, tmp_path):
    """dagline's own `dagline.task.<dag>.<task>.<state>` signals carry the namespace owning the DAG."""
    watcher = _dag("b-watch").replace("orders.ready", "dagline.task.a-sales.load.success")
    apply_in_namespaces(db, tmp_path, [(B, watcher), (A, watcher.replace("b-watch", "a-watch"))], now=NOW)
    trigger_run(db, TEAM_KEYS["a-sales"], now=NOW, logical_date=NOW + dt.timedelta(days=1), conf={}, who="test")
    schedule(db, (NOW + dt.timedelta(days=1)).isoformat())
    assert [r.run_type for r in _runs(db, f"{A}/a-watch")] == ["signal"]  # its own namespace's task: heard
    assert _runs(db, f"{B}/b-watch") == []  # team-b cannot watch a-team's tasks
