"""`--namespace NS` on the CLI (issue 26, docs/adr/0050), on SQLite and PostgreSQL: listings keep that
namespace's DAGs' objects; a show or an action naming a DAG, run, backfill or signal of another namespace
(or a file's DAG, which belongs to none) is refused as not found, naming the namespace, and changes nothing."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from sqlalchemy import select

from dagline.db.models import backfill_t, dag_run_t, dag_t
from dagline.store.signals import send_signal
from tests.helpers.cli import cli, snapshot
from tests.helpers.tenancy import apply_team_dags

NOW = dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)
A, B = "a-team", "team-b"


def _dag(name: str) -> str:
    return f"""
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {{name: {name}}}
spec:
  schedule: "@daily"
  startDate: "2026-04-01"
  paused: false
  tasks:
    - id: load
      spark: {{mainApplicationFile: load.py}}
"""


@pytest.fixture
def teams(db, tmp_path):
    """`a-sales` owned by a-team, `b-sales` by team-b (as their DAG objects apply them), `local` from a
    file; a manual run, a backfill and a signal of each team."""
    runs = apply_team_dags(db, tmp_path, _dag, now=NOW)
    for name in ("a-sales", "b-sales"):
        cli(db, "backfill", "create", name, "--start", "2026-04-01", "--end", "2026-04-02",
            "--now", NOW.isoformat())
    with db.begin() as conn:
        backfills = dict(conn.execute(select(backfill_t.c.dag_id, backfill_t.c.id)).all())
        seqs = {team: send_signal(conn, f"orders.{team}", {"n": 1}, source="test", now=NOW, namespace=team)[0]
                for team in (A, B)}
    return {"runs": runs, "backfills": backfills, "seqs": seqs}


def _json(db, *args):
    return json.loads(cli(db, *args, "--json").output)


def test_listings_keep_the_namespaces_objects(db, teams):
    assert [r["dag_id"] for r in _json(db, "backfill", "list", "--namespace", A)] == ["a-sales"]
    assert {r["dag_id"] for r in _json(db, "backfill", "list")} == {"a-sales", "b-sales"}
    assert [r["key"] for r in _json(db, "signals", "list", "--namespace", B)] == [f"orders.{B}"]
    assert [r["dag_id"] for r in _json(db, "dags", "list", "--namespace", A)] == ["a-sales"]
    a_run = teams["runs"]["a-sales"]
    assert [t["task_id"] for t in _json(db, "tasks", "list", str(a_run.id), "--namespace", A)] == ["load"]


def test_shows_and_actions_of_the_namespaces_own_objects_work(db, teams):
    a_run, a_backfill = teams["runs"]["a-sales"], teams["backfills"]["a-sales"]
    shown = _json(db, "dags", "show", "a-sales", "--namespace", A)
    assert (shown["dag_id"], shown["namespace"]) == ("a-sales", A)
    assert _json(db, "dags", "show", "local")["namespace"] is None
    assert _json(db, "runs", "show", str(a_run.id), "--namespace", A)["dag_id"] == "a-sales"
    assert _json(db, "backfill", "show", str(a_backfill), "--namespace", A)["dag_id"] == "a-sales"
    assert _json(db, "signals", "show", str(teams["seqs"][A]), "--namespace", A)["key"] == f"orders.{A}"
    cli(db, "dags", "pause", "a-sales", "--namespace", A)
    with db.begin() as conn:
        assert conn.execute(select(dag_t.c.is_paused).where(dag_t.c.dag_id == "a-sales")).scalar_one() is True


def _state(db) -> dict:
    """Row counts plus what an action would change in place: pause flags, run and backfill states."""
    rows = snapshot(db)
    with db.begin() as conn:
        return {"rows": rows,
                "paused": sorted(conn.execute(select(dag_t.c.dag_id, dag_t.c.is_paused)).all()),
                "runs": sorted(conn.execute(select(dag_run_t.c.id, dag_run_t.c.state)).all()),
                "backfills": sorted(conn.execute(select(backfill_t.c.id, backfill_t.c.state)).all())}


def test_another_namespaces_objects_are_not_found_and_nothing_changes(db, teams):
    b_run, local_run = teams["runs"]["b-sales"], teams["runs"]["local"]
    b_backfill = str(teams["backfills"]["b-sales"])
    before = _state(db)
    refused = [
        ("dags", "show", "b-sales"), ("dags", "show", "local"), ("dags", "pause", "b-sales"),
        ("dags", "pause", "local"), ("dags", "trigger", "b-sales"), ("dags", "next-runs", "b-sales"),
        ("dags", "delete", "b-sales", "--yes"), ("runs", "show", str(b_run.id)),
        ("runs", "stop", str(b_run.id)), ("runs", "grid", "b-sales"), ("runs", "stop", str(local_run.id)),
        ("tasks", "list", str(b_run.id)), ("tasks", "clear", str(b_run.id), "--yes"),
        ("tasks", "stop", str(b_run.id), "load"), ("tasks", "logs", str(b_run.id), "load"),
        ("backfill", "show", b_backfill), ("backfill", "cancel", b_backfill),
        ("backfill", "create", "b-sales", "--start", "2026-04-03", "--end", "2026-04-04"),
        ("signals", "show", str(teams["seqs"][B])),
    ]
    for args in refused:
        result = cli(db, *args, "--namespace", A, expect=1)
        assert "namespace 'a-team'" in result.output, (args, result.output)
    assert _state(db) == before


def test_a_bad_namespace_is_refused_as_invalid_input(db, teams):
    result = cli(db, "dags", "pause", "a-sales", "--namespace", "Not_A_Namespace", expect=2)
    assert "--namespace" in result.output


def test_pools_list_keeps_what_the_namespaces_dags_may_use_and_delete_refuses_another_owners_pool(db, teams):
    for name, owner in (("a-pool", A), ("b-pool", B), ("shared", None)):
        cli(db, "pools", "set", name, "2", *(("--namespace", owner) if owner else ()))
    listed = {r["name"]: r["namespace"] for r in _json(db, "pools", "list", "--namespace", A)}
    assert listed["a-pool"] == A and listed["shared"] is None
    assert "b-pool" not in listed
    before = snapshot(db)
    for name in ("b-pool", "shared"):
        result = cli(db, "pools", "delete", name, "--namespace", A, expect=1)
        assert "namespace 'a-team'" in result.output
    assert snapshot(db) == before
    cli(db, "pools", "delete", "a-pool", "--namespace", A)
    assert "a-pool" not in {r["name"] for r in _json(db, "pools", "list")}


def test_db_clean_with_namespace_checks_the_dag_and_needs_dag(db, teams):
    before = _state(db)
    result = cli(db, "db", "clean", "--older-than", "P1D", "--dag", "b-sales", "--namespace", A, "--yes", expect=1)
    assert "namespace 'a-team'" in result.output
    result = cli(db, "db", "clean", "--older-than", "P1D", "--namespace", A, "--yes", expect=2)
    assert "--namespace needs --dag" in result.output
    assert _state(db) == before
    cleaned = _json(db, "db", "clean", "--older-than", "P1D", "--dag", "a-sales", "--namespace", A, "--dry-run")
    assert cleaned["dry_run"] is True


def test_callbacks_list_and_redeliver_keep_to_the_namespaces_dags(db, teams):
    from dagline.db.models import callback_outbox_t

    with db.begin() as conn:
        for dag_id in ("a-sales", "b-sales"):
            conn.execute(callback_outbox_t.insert().values(
                delivery_id=f"d-{dag_id}", channel="log", event="failed", dag_id=dag_id,
                dag_run_id=teams["runs"][dag_id].id, target={}, payload={}, state="failed", attempts=3,
                next_attempt_at=NOW, created_at=NOW))
    assert [r["dag_id"] for r in _json(db, "callbacks", "list", "--namespace", A)] == ["a-sales"]
    assert {r["dag_id"] for r in _json(db, "callbacks", "list")} == {"a-sales", "b-sales"}
    b_run = teams["runs"]["b-sales"]
    cli(db, "callbacks", "list", "--run", str(b_run.id), "--namespace", A, expect=1)
    result = cli(db, "callbacks", "redeliver", "d-a-sales", "d-b-sales", "--namespace", A, expect=1)
    assert "'d-b-sales' in namespace 'a-team'" in result.output
    assert {r["state"] for r in _json(db, "callbacks", "list")} == {"failed"}
    cli(db, "callbacks", "redeliver", "d-a-sales", "--namespace", A, "--now", NOW.isoformat())
    assert {r["dag_id"]: r["state"] for r in _json(db, "callbacks", "list")} == {
        "a-sales": "pending", "b-sales": "failed"}


def test_runs_tasks_and_backfills_json_name_the_dags_namespace_last(db, teams):
    a_run, local_run = teams["runs"]["a-sales"], teams["runs"]["local"]
    shown = _json(db, "runs", "show", str(a_run.id))
    assert list(shown)[-1] == "namespace" and shown["namespace"] == A
    assert _json(db, "runs", "show", str(local_run.id))["namespace"] is None
    [task] = _json(db, "tasks", "list", str(a_run.id))
    assert list(task)[-1] == "namespace" and task["namespace"] == A
    assert [t["namespace"] for t in _json(db, "tasks", "list", str(local_run.id))] == [None]
    backfill = _json(db, "backfill", "show", str(teams["backfills"]["b-sales"]))
    assert list(backfill)[-1] == "namespace" and backfill["namespace"] == B
    listed = _json(db, "backfill", "list")
    assert {r["dag_id"]: r["namespace"] for r in listed} == {"a-sales": A, "b-sales": B}
    assert all(list(r)[-1] == "namespace" for r in listed)


def test_a_signal_sent_with_namespace_reaches_only_that_namespace(db, teams):
    result = cli(db, "signals", "send", "stock.ready", "--value", "1", "--namespace", A, "--now", NOW.isoformat(),
                 "--json")
    assert "no DAG listens" in result.stderr  # of a-team: none of its DAGs does
    sent = json.loads(result.stdout)
    assert list(sent)[-1] == "namespace" and sent["namespace"] == A
    assert "stock.ready" in [r["key"] for r in _json(db, "signals", "list", "--namespace", A)]
    assert "stock.ready" not in [r["key"] for r in _json(db, "signals", "list", "--namespace", B)]
    cli(db, "signals", "show", str(sent["seq"]), "--namespace", B, expect=1)
