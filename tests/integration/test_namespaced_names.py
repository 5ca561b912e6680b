"""Every name belongs to a namespace (issue 38, ADR 92), tried as two teams would on a laptop with
`--namespace`, on SQLite and PostgreSQL: both may have `etl`, with separate histories and versions; deleting
one hands nothing to the other; a run, a backfill or a run id of another namespace is not found."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from sqlalchemy import select, update

from dagline.db.models import dag_run_t, dag_t
from dagline.errors import InvalidInput
from dagline.store.dags import deactivate
from tests.helpers.cli import cli, snapshot

NOW = "2026-05-03T00:00:00+00:00"
A, B = "a-team", "team-b"


def _etl(task: str = "load", namespace: str | None = None) -> str:
    meta = "{name: etl}" if namespace is None else f"{{name: etl, namespace: {namespace}}}"
    return f"""
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {meta}
spec:
  schedule: "@daily"
  startDate: "2026-05-01"
  paused: false
  tasks:
    - id: {task}
      spark: {{mainApplicationFile: job.py}}
"""


def _json(db, *args):
    return json.loads(cli(db, *args, "--json").output)


@pytest.fixture
def two_teams(db, tmp_path):
    """a-team's `etl` (task `load`) and team-b's `etl` (task `transform`), each applied with --namespace."""
    for team, task in ((A, "load"), (B, "transform")):
        folder = tmp_path / team
        folder.mkdir()
        (folder / "etl.yaml").write_text(_etl(task))
        (folder / "job.py").write_text("print('hi')\n")
        cli(db, "dags", "apply", str(folder), "--namespace", team)
    return db


def test_two_namespaces_each_have_etl_with_their_own_history(two_teams):
    db = two_teams
    dags = _json(db, "dags", "list")
    assert sorted((d["namespace"], d["dag_id"]) for d in dags) == [(A, "etl"), (B, "etl")]
    cli(db, "dags", "trigger", "etl", "--namespace", A, "--now", NOW)
    cli(db, "dags", "trigger", "etl", "--namespace", A, "--logical-date", "2026-05-02", "--now", NOW)
    cli(db, "dags", "trigger", f"{B}/etl", "--now", NOW)  # NAMESPACE/NAME names it too
    a_runs = _json(db, "runs", "list", "etl", "--namespace", A)
    b_runs = _json(db, "runs", "list", "etl", "--namespace", B)
    assert len(a_runs) == 2 and len(b_runs) == 1
    assert {(r["dag_id"], r["namespace"]) for r in a_runs + b_runs} == {("etl", A), ("etl", B)}
    # each version is its own namespace's spec
    assert [t["id"] for t in _json(db, "dags", "show", "etl", "--namespace", A)["spec"]["tasks"]] == ["load"]
    assert [t["id"] for t in _json(db, "dags", "show", f"{B}/etl")["spec"]["tasks"]] == ["transform"]
    tasks = _json(db, "tasks", "list", str(b_runs[0]["id"]))
    assert [t["task_id"] for t in tasks] == ["transform"]
    # without --namespace a bare name is default's, which has no etl
    assert "unknown DAG" in cli(db, "dags", "trigger", "etl", "--now", NOW, expect=1).output


def test_deleting_one_namespaces_dag_leaves_the_others_alone(two_teams):
    db = two_teams
    cli(db, "dags", "trigger", "etl", "--namespace", B, "--now", NOW)
    cli(db, "dags", "trigger", "etl", "--namespace", A, "--now", NOW)
    cli(db, "dags", "delete", "etl", "--namespace", A, "--yes")
    assert [d["namespace"] for d in _json(db, "dags", "list")] == [B]
    [run] = _json(db, "runs", "list")
    assert (run["dag_id"], run["namespace"]) == ("etl", B)


def test_a_deactivated_dags_history_stays_its_namespaces(two_teams):
    """Deactivation (the DAG object deleted) keeps a-team's runs as a-team's, under a-team's key, and
    team-b's apply of its own `etl` does not touch them: nothing ever changes a row's namespace."""
    db = two_teams
    cli(db, "dags", "trigger", "etl", "--namespace", A, "--now", NOW)
    deactivate(db, f"{A}/etl", now=dt.datetime.fromisoformat(NOW))
    with db.begin() as conn:
        before = conn.execute(select(dag_run_t.c.id, dag_run_t.c.dag_id)).all()
    assert [key for _, key in before] == [f"{A}/etl"]
    cli(db, "dags", "trigger", "etl", "--namespace", B, "--now", NOW)
    with db.begin() as conn:
        owners = dict(conn.execute(select(dag_t.c.dag_id, dag_t.c.namespace)).all())
        after = dict(conn.execute(select(dag_run_t.c.id, dag_run_t.c.dag_id)).all())
    assert owners == {f"{A}/etl": A, f"{B}/etl": B}
    assert after[before[0].id] == f"{A}/etl"
    assert [r["namespace"] for r in _json(db, "runs", "list", "etl", "--namespace", A)] == [A]


def test_the_database_refuses_a_key_that_is_not_its_namespaces(two_teams):
    """The check constraint: a row's namespace cannot change unless its key does."""
    from sqlalchemy.exc import IntegrityError

    with pytest.raises(IntegrityError):
        with two_teams.begin() as conn:
            conn.execute(update(dag_t).where(dag_t.c.dag_id == f"{A}/etl").values(namespace=B))


def test_a_run_of_another_namespace_is_not_found_even_by_a_shared_run_id(two_teams):
    db = two_teams
    for team in (A, B):  # the same logical date: the same run id string in both namespaces
        cli(db, "dags", "trigger", "etl", "--namespace", team, "--logical-date", "2026-05-02", "--now", NOW)
    [a_run] = _json(db, "runs", "list", "--namespace", A)
    [b_run] = _json(db, "runs", "list", "--namespace", B)
    assert a_run["run_id"] == b_run["run_id"]
    before = snapshot(db)
    refused = cli(db, "runs", "stop", str(b_run["id"]), "--namespace", A, expect=1)
    assert "unknown run" in refused.output and "etl" not in refused.output.replace(str(b_run["id"]), "")
    assert snapshot(db) == before
    # the shared run id string resolves within the namespace, naming no other namespace's DAG
    shown = _json(db, "runs", "show", a_run["run_id"], "--namespace", A)
    assert (shown["id"], shown["namespace"]) == (a_run["id"], A)
    ambiguous = cli(db, "runs", "show", a_run["run_id"], expect=1)  # the unlimited CLI: both are its to see
    assert "several DAGs" in ambiguous.output


def test_a_document_naming_another_namespace_than_the_option_is_refused(db, tmp_path):
    (tmp_path / "etl.yaml").write_text(_etl(namespace=A))
    (tmp_path / "job.py").write_text("print('hi')\n")
    before = snapshot(db)
    refused = cli(db, "dags", "apply", str(tmp_path), "--namespace", B, expect=2)
    assert "metadata.namespace" in refused.output
    assert snapshot(db) == before
    cli(db, "dags", "apply", str(tmp_path))  # its own metadata.namespace, without the option
    assert [(d["dag_id"], d["namespace"]) for d in _json(db, "dags", "list")] == [("etl", A)]


def test_a_bad_namespace_is_refused_naming_the_option(db):
    result = cli(db, "dags", "trigger", "etl", "--namespace", "Not_A_Label", expect=2)
    assert "--namespace" in result.output


def test_a_reference_with_two_namespaces_is_refused():
    from dagline.domain.names import parse_reference

    with pytest.raises(InvalidInput) as caught:
        parse_reference("a-team/etl", "team-b", field="DAG_ID")
    assert caught.value.field == "DAG_ID"
    assert parse_reference("etl", None, field="DAG_ID") == ("default", "etl")


def test_a_tries_templates_see_its_dags_name_and_namespace(db, tmp_path):
    (tmp_path / "etl.yaml").write_text(_etl().replace(
        "spark: {mainApplicationFile: job.py}",
        'spark: {mainApplicationFile: job.py, arguments: ["{{ dag_namespace }}", "{{ dag_id }}"]}'))
    (tmp_path / "job.py").write_text("print('hi')\n")
    cli(db, "dags", "apply", str(tmp_path), "--namespace", A)
    shown = cli(db, "tasks", "render", "etl", "load", "2026-05-01", "--namespace", A, "--json")
    rendered = json.loads(shown.stdout)  # a note on stderr says the run is a test run
    assert rendered["arguments"] == [A, "etl"]
    assert (rendered["context"]["dag_namespace"], rendered["context"]["dag_id"]) == (A, "etl")


def test_pool_gauges_name_a_namespaces_pool_within_its_namespace(db):
    from dagline import metrics
    from dagline.store.read_models import metric_figures

    for args in (("spark", "3", "--namespace", A), ("spark", "5", "--namespace", B), ("spark", "7")):
        cli(db, "pools", "set", *args)
    with db.begin() as conn:
        figures = metric_figures(conn)
    collector = metrics.DatabaseCollector(lambda: figures, run_states=(), ti_states=(), backfill_states=())
    [slots] = [family for family in collector.collect() if family.name == "dagline_pool_slots"]
    found = {(s.labels["pool_namespace"], s.labels["pool"]): s.value for s in slots.samples}
    assert {k: v for k, v in found.items() if k[1] == "spark"} == {(A, "spark"): 3, (B, "spark"): 5, ("", "spark"): 7}


def test_a_request_id_names_one_request_within_its_namespace(two_teams):
    """Two namespaces may use one backfill request id: neither answers for the other (no other namespace's
    DAG or backfill named, no conflict), and within one namespace it stays idempotent."""
    db = two_teams
    for team in (A, B):
        cli(db, "dags", "unpause", "etl", "--namespace", team)
    args = ("--start", "2026-05-01", "--end", "2026-05-01", "--request-id", "nightly-fix", "--now", NOW)
    cli(db, "backfill", "create", "etl", "--namespace", A, *args)
    other = cli(db, "backfill", "create", "etl", "--namespace", B, "--reprocess", "completed", *args)
    assert A not in other.output
    cli(db, "backfill", "create", "etl", "--namespace", A, *args)  # the same request again: no second backfill
    listed = _json(db, "backfill", "list")
    assert sorted((b["namespace"], b["request_id"]) for b in listed) == [(A, "nightly-fix"), (B, "nightly-fix")]


def test_apply_warns_of_a_rule_on_another_namespaces_key_that_is_not_exported(db, tmp_path, monkeypatch):
    (tmp_path / "etl.yaml").write_text(_etl().replace('  startDate: "2026-05-01"', '  startDate: "2026-05-01"\n'
                                                      '  triggers: [{signal: a-team/orders.ready}]'))
    (tmp_path / "job.py").write_text("print('hi')\n")
    warned = cli(db, "dags", "apply", str(tmp_path), "--namespace", B)
    assert "does not export 'orders.ready' to 'team-b'" in warned.stderr
    monkeypatch.setenv("DAGLINE_SIGNAL_EXPORTS", "a-team/orders.*=team-b")
    assert "does not export" not in cli(db, "dags", "apply", str(tmp_path), "--namespace", B).stderr


def test_bad_names_are_refused_naming_the_field_and_nothing_is_stored(two_teams, tmp_path):
    db = two_teams
    before = snapshot(db)
    contradicted = cli(db, "dags", "trigger", f"{A}/etl", "--namespace", B, "--now", NOW, expect=2)
    assert "DAG_ID" in contradicted.output and "--namespace says 'team-b'" in contradicted.output
    bad_namespace = cli(db, "dags", "trigger", "Bad_NS/etl", "--now", NOW, expect=2)
    assert "DAG_ID" in bad_namespace.output
    assert "may not contain '/'" in cli(db, "pools", "set", f"{A}/spark", "2", expect=2).output
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "etl.yaml").write_text(_etl().replace("spark: {mainApplicationFile: job.py}",
                                                              "pool: a-team/spark\n      spark: {mainApplicationFile: job.py}"))
    (tmp_path / "bad" / "job.py").write_text("print('hi')\n")
    refused = cli(db, "dags", "apply", str(tmp_path / "bad"), "--namespace", B, expect=2)
    assert "spec.tasks[0].pool" in refused.output and "may not contain '/'" in refused.output
    assert snapshot(db) == before
