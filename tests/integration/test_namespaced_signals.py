"""Signals live in their sender's namespace (issue 38, ADR 92), on SQLite and PostgreSQL: the same key
and id in two namespaces are two signals, no answer depends on another namespace's signal (no value
oracle), a DAG reacts to its own namespace's signals and to another's only where the platform exports
the key (`DAGLINE_SIGNAL_EXPORTS`), a try's token sends in its DAG's namespace only, and a limited
reader neither lists nor shows another namespace's signals."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from dagline.api import ApiSettings, create_app
from dagline.clock import FixedClock
from dagline.db.models import dag_run_t, signal_t
from dagline.domain.signal_exports import parse_exports, unexported_warning
from dagline.errors import InvalidInput
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.scheduler.settings import SchedulerSettings
from dagline.spec import load_dag_paths
from dagline.store.dags import apply_dags
from dagline.store.runs import trigger_run
from dagline.store.signals import send_signal
from dagline.store.tokens import create_token
from tests.helpers.cli import cli
from tests.helpers.harness import ti_states, write_dag
from tests.helpers.web_session import csrf_field

NOW = dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc)
A, B = "a-team", "team-b"


def _dag(name: str, namespace: str, triggers: list[str], *, task: str = "load", arguments=()) -> str:
    return f"""
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  schedule: null
  paused: false
  triggers: {json.dumps([{"signal": key} for key in triggers])}
  tasks:
    - id: {task}
      spark: {{mainApplicationFile: {task}.py, arguments: {json.dumps(list(arguments))}}}
"""


def _apply(db, folder, *documents: str) -> None:
    paths = [write_dag(folder, text, name=f"dag{i}.yaml") for i, text in enumerate(documents)]
    apply_dags(db, load_dag_paths(paths), now=NOW)


def _schedule(db, exports: str = "", *, at: dt.datetime = NOW, executor=None) -> None:
    clock = FixedClock(at)
    settings = SchedulerSettings(signal_exports=parse_exports(exports))
    Scheduler(db, executor or NoopExecutor(parallelism=64, clock=clock), clock=clock, settings=settings).run(
        until_idle=True)


def _signal_runs(db, dag_key: str) -> list[str]:
    with db.begin() as conn:
        return list(conn.execute(select(dag_run_t.c.run_id).where(dag_run_t.c.dag_id == dag_key,
                                                                  dag_run_t.c.run_type == "signal")
                                 .order_by(dag_run_t.c.id)).scalars())


def _stored(db) -> list[tuple]:
    with db.begin() as conn:
        return [tuple(r) for r in conn.execute(select(signal_t.c.seq, signal_t.c.namespace, signal_t.c.key,
                                                      signal_t.c.sender_id, signal_t.c.value)
                                               .where(~signal_t.c.key.contains("dagline.task."))
                                               .order_by(signal_t.c.seq))]


def _tokens(db, **limits) -> dict[str, str]:
    """A token per name, limited to the namespaces given (None: unlimited)."""
    with db.begin() as conn:
        return {name: create_token(conn, name, ("read", "signals:send"), now=NOW, namespaces=namespaces)
                for name, namespaces in limits.items()}


def _api(db, token: str) -> TestClient:
    client = TestClient(create_app(db, ApiSettings(), clock=FixedClock(NOW)))
    client.headers["Authorization"] = f"Bearer {token}"
    return client


def test_the_same_key_and_id_in_two_namespaces_are_two_signals_and_no_value_oracle(db, tmp_path):
    """The issue's scenario: a-team sends `orders.ready` id 2026-11-28; team-b's send of the same key and
    id is its own new signal, and its DAG `etl` (a-team has one too) runs on it; a guessed value answers
    the same whether it is a-team's value or not."""
    _apply(db, tmp_path, _dag("etl", A, ["orders.ready"]), _dag("etl", B, ["orders.ready"]))
    tokens = _tokens(db, a=[A], b=[B], c=["team-c"])
    a, b, c = (_api(db, tokens[n]) for n in "abc")

    sent = a.post("/api/v1/signals", json={"key": "orders.ready", "value": {"rows": 7}, "id": "2026-11-28"})
    assert sent.status_code == 201 and sent.json()["namespace"] == A
    right = b.post("/api/v1/signals", json={"key": "orders.ready", "value": {"rows": 7}, "id": "2026-11-28"})
    wrong = c.post("/api/v1/signals", json={"key": "orders.ready", "value": {"rows": 8}, "id": "2026-11-28"})
    # a-team's value guessed right or wrong: both a fresh signal of the sender's own namespace
    assert right.status_code == wrong.status_code == 201
    assert right.json()["created"] is wrong.json()["created"] is True
    assert len({sent.json()["seq"], right.json()["seq"], wrong.json()["seq"]}) == 3
    assert {k: v for k, v in right.json().items() if k != "seq"} == {
        "key": "orders.ready", "namespace": B, "id": "2026-11-28", "created": True}
    assert "warning" in wrong.json()  # team-c has no DAG: counted in team-c only
    # a conflict compares with the same namespace's signal only
    again = b.post("/api/v1/signals", json={"key": "orders.ready", "value": {"rows": 7}, "id": "2026-11-28"})
    assert again.status_code == 200 and again.json()["seq"] == right.json()["seq"]
    clash = b.post("/api/v1/signals", json={"key": "orders.ready", "value": {"rows": 9}, "id": "2026-11-28"})
    assert clash.status_code == 409 and f"seq {right.json()['seq']}" in clash.json()["error"]
    assert [(ns, key) for _, ns, key, _, _ in _stored(db)] == [
        (A, "a-team/orders.ready"), (B, "team-b/orders.ready"), ("team-c", "team-c/orders.ready")]

    _schedule(db)
    assert _signal_runs(db, "a-team/etl") == [f"signal__{sent.json()['seq']}"]
    assert _signal_runs(db, "team-b/etl") == [f"signal__{right.json()['seq']}"]  # team-b's own signal, not a-team's


class Recording(NoopExecutor):
    def __init__(self, clock):
        super().__init__(parallelism=64, clock=clock)
        self.arguments = []

    def launch(self, launches):
        self.arguments += [launch.job.arguments for launch in launches]
        super().launch(launches)


def test_a_dag_hears_its_own_namespaces_key_and_task_states_not_another_namespaces(db, tmp_path):
    templated = ["{{ signal.key }}", "{{ signal.namespace }}"]  # what its try's templates see
    _apply(db, tmp_path, _dag("etl", A, ["orders.ready"], arguments=templated), _dag("etl", B, ["orders.ready"]),
           _dag("watch", A, ["dagline.task.etl.load.success"], task="look"),
           _dag("watch", B, ["dagline.task.etl.load.success"], task="look"))
    sent = cli(db, "signals", "send", "orders.ready", "--namespace", A, "--now", NOW.isoformat(), "--json")
    assert json.loads(sent.stdout)["namespace"] == A
    assert json.loads(sent.stdout)["listeners"] == [
        {"dag_id": "etl", "namespace": A, "rule": "spec.triggers[0]", "task_id": None, "action": "trigger"}]
    executor = Recording(FixedClock(NOW))
    _schedule(db, executor=executor)
    assert len(_signal_runs(db, "a-team/etl")) == 1
    assert ("orders.ready", A) in executor.arguments  # the bare key and its namespace
    assert _signal_runs(db, "team-b/etl") == []  # the same key in another namespace: not heard
    # a-team's etl succeeded: its task signal is a-team's, heard by a-team's watch only
    with db.begin() as conn:
        task_keys = set(conn.execute(select(signal_t.c.namespace, signal_t.c.key)
                                     .where(signal_t.c.key.contains("dagline.task.etl.load.success"))).all())
    assert task_keys == {(A, "a-team/dagline.task.etl.load.success")}
    assert len(_signal_runs(db, "a-team/watch")) == 1
    assert _signal_runs(db, "team-b/watch") == []


def test_an_exported_key_reaches_the_importing_namespaces_dag_and_an_unexported_one_does_not(db, tmp_path):
    _apply(db, tmp_path, _dag("importer", B, ["a-team/orders.ready", "a-team/stock.low"]))
    exports = "a-team/orders.*=team-b,team-c"
    with db.begin() as conn:
        token = create_token(conn, "a", ("signals:send",), now=NOW, namespaces=[A])
    api = TestClient(create_app(db, ApiSettings(signal_exports=parse_exports(exports)), clock=FixedClock(NOW)))
    api.headers["Authorization"] = f"Bearer {token}"

    first = api.post("/api/v1/signals", json={"key": "orders.ready", "value": 1})
    assert "warning" not in first.json()  # exported to team-b, whose DAG listens
    _schedule(db)  # no export rule in force: team-b's DAG does not hear a-team's key
    assert _signal_runs(db, "team-b/importer") == []

    exported = api.post("/api/v1/signals", json={"key": "orders.ready", "value": 2}).json()["seq"]
    hidden = api.post("/api/v1/signals", json={"key": "stock.low", "value": 3}).json()
    assert "warning" in hidden  # not exported: the DAG naming it would not act
    _schedule(db, exports)
    assert _signal_runs(db, "team-b/importer") == [f"signal__{exported}"]  # orders.* exported; stock.low not


def test_a_try_token_sends_in_its_dags_namespace_only(db, tmp_path):
    _apply(db, tmp_path, _dag("train", B, []))
    trigger_run(db, "team-b/train", now=NOW)
    clock = FixedClock(NOW)
    api = TestClient(create_app(db, clock=clock))
    answers = []

    class Sender(NoopExecutor):
        def launch(self, launches):
            for launch in launches:
                headers = {"Authorization": f"Bearer {dict(launch.env)['DAGLINE_SIGNAL_TOKEN']}"}
                for namespace in (None, B, A, "default"):
                    body = {"key": "job.said", "value": namespace, **({"namespace": namespace} if namespace else {})}
                    answers.append((namespace, api.post("/api/v1/signals", json=body, headers=headers)))
            super().launch(launches)

    Scheduler(db, Sender(parallelism=4, clock=clock), clock=clock, api_url="http://dagline-api:8793").run(
        until_idle=True)
    assert [(ns, r.status_code) for ns, r in answers] == [(None, 201), (B, 201), (A, 403), ("default", 403)]
    assert answers[2][1].json()["field"] == "namespace"
    assert [(ns, key) for _, ns, key, _, _ in _stored(db)] == [(B, "team-b/job.said")] * 2


def test_the_api_namespace_field(db):
    tokens = _tokens(db, one=[A], two=[A, B], all=None)
    one, two, unlimited = (_api(db, tokens[n]) for n in ("one", "two", "all"))
    assert one.post("/api/v1/signals", json={"key": "k.one"}).json()["namespace"] == A  # its only namespace
    assert unlimited.post("/api/v1/signals", json={"key": "k.all"}).json()["namespace"] == "default"
    assert unlimited.post("/api/v1/signals", json={"key": "k.all", "namespace": B}).json()["namespace"] == B
    assert two.post("/api/v1/signals", json={"key": "k.two", "namespace": B}).json()["namespace"] == B
    before = _stored(db)

    unnamed = two.post("/api/v1/signals", json={"key": "k.two"})
    assert unnamed.status_code == 422 and unnamed.json()["field"] == "namespace"
    in_batch = two.post("/api/v1/signals", json=[{"key": "k.two", "namespace": A}, {"key": "k.two"}])
    assert in_batch.status_code == 422 and in_batch.json()["field"] == "[1].namespace"
    malformed = unlimited.post("/api/v1/signals", json={"key": "k.all", "namespace": "Team_B"})
    assert malformed.status_code == 422 and malformed.json()["field"] == "namespace"
    # outside its namespaces: 403 naming the field, the same whether that namespace holds signals (team-b)
    # or nothing at all (team-z)
    outside = [one.post("/api/v1/signals", json={"key": "k.two", "namespace": ns}) for ns in (B, "team-z")]
    assert [r.status_code for r in outside] == [403, 403]
    assert outside[0].json()["error"].replace(B, "X") == outside[1].json()["error"].replace("team-z", "X")
    mixed = one.post("/api/v1/signals", json=[{"key": "k.one"}, {"key": "k.one", "namespace": B}])
    assert mixed.status_code == 403 and mixed.json()["field"] == "[1].namespace"
    assert _stored(db) == before  # nothing stored by a refused request


def test_a_limited_reader_neither_lists_nor_shows_another_namespaces_signals(db, tmp_path):
    tokens = _tokens(db, a=[A], b=[B], all=None)
    a, b, everyone = (_api(db, tokens[n]) for n in ("a", "b", "all"))
    a_seq = a.post("/api/v1/signals", json={"key": "a.only", "value": 1}).json()["seq"]
    b_seq = b.post("/api/v1/signals", json={"key": "b.only", "value": 2}).json()["seq"]

    listed = a.get("/api/v1/signals").json()["signals"]
    assert [(s["seq"], s["key"], s["namespace"]) for s in listed] == [(a_seq, "a.only", A)]
    assert a.get("/api/v1/signals?key=b.only").json()["signals"] == []
    assert a.get(f"/api/v1/signals?namespace={B}").json()["signals"] == []
    assert {s["seq"] for s in everyone.get("/api/v1/signals").json()["signals"]} == {a_seq, b_seq}
    assert [s["seq"] for s in everyone.get(f"/api/v1/signals?namespace={B}").json()["signals"]] == [b_seq]
    assert [s["seq"] for s in everyone.get("/api/v1/signals?key=b.only").json()["signals"]] == [b_seq]  # any namespace
    hidden, missing = a.get(f"/api/v1/signals/{b_seq}"), a.get("/api/v1/signals/999")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"].replace(str(b_seq), "N") == missing.json()["error"].replace("999", "N")
    assert a.get(f"/api/v1/signals/{a_seq}").json()["namespace"] == A
    page = a.get("/signals")
    assert page.status_code == 200 and "a.only" in page.text and "b.only" not in page.text
    assert "b.only" in everyone.get("/signals?key=b.").text and "a.only" not in everyone.get("/signals?key=b.").text

    # the CLI: --namespace reads one namespace; another's seq is not found, as a missing one
    rows = json.loads(cli(db, "signals", "list", "--namespace", A, "--json").stdout)
    assert [(r["seq"], r["key"], r["namespace"]) for r in rows] == [(a_seq, "a.only", A)]
    assert {r["seq"] for r in json.loads(cli(db, "signals", "list", "--json").stdout)} == {a_seq, b_seq}
    refused = cli(db, "signals", "show", str(b_seq), "--namespace", A, expect=1)
    absent = cli(db, "signals", "show", "999", "--namespace", A, expect=1)
    assert refused.stderr.replace(str(b_seq), "N") == absent.stderr.replace("999", "N")
    assert json.loads(cli(db, "signals", "show", str(b_seq), "--json").stdout)["namespace"] == B


def test_signal_exports_are_parsed_once_and_a_fault_names_the_variable(monkeypatch):
    exports = parse_exports("a-team/orders.*=team-b a-team/stock.low=* team-b/dagline.task.etl.*=team-c")
    assert exports.allows(A, "orders.ready", B) and not exports.allows(A, "orders.ready", "team-c")
    assert exports.allows(A, "stock.low", "anyone") and not exports.allows(A, "stock.lower", "anyone")
    assert exports.allows(B, "dagline.task.etl.load.success", "team-c")
    assert not exports.allows(B, "orders.ready", A) and exports.allows(B, "orders.ready", B)
    assert not parse_exports("").allows(A, "orders.ready", B)
    for bad in ("a-team/orders.ready", "a-team=team-b", "A/x=team-b", "a-team/Bad=team-b", "a-team/x=Team_B",
                "a-team/x y*=team-b"):
        monkeypatch.setenv("DAGLINE_SIGNAL_EXPORTS", bad)
        with pytest.raises(InvalidInput) as refused:
            SchedulerSettings.from_env()
        assert refused.value.field == "DAGLINE_SIGNAL_EXPORTS", bad
    assert unexported_warning(B, "a-team/stock.low", exports) is None  # exported to every namespace
    assert unexported_warning(B, "orders.ready", exports) is None  # its own namespace's key
    assert "does not export 'orders.ready' to 'team-z'" in unexported_warning("team-z", "a-team/orders.ready", exports)
    monkeypatch.setenv("DAGLINE_SIGNAL_EXPORTS", "a-team/orders.*=team-b")
    assert SchedulerSettings.from_env().signal_exports.allows(A, "orders.x", B)
    assert ApiSettings.from_env().signal_exports.allows(A, "orders.x", B)


def test_the_web_ui_sends_in_the_tokens_namespace_only(db):
    tokens = _tokens(db, a=[A])
    browser = _api(db, tokens["a"])
    browser.follow_redirects = False
    browser.get("/login")
    csrf = csrf_field(browser.get("/").text)
    assert 'name="namespace"' in browser.get("/signals").text  # the send form names the namespace
    preview = browser.post("/signals/send", data={"csrf": csrf, "key": "web.said", "value": "1", "namespace": A})
    assert "in namespace a-team" in preview.text and 'name="namespace" value="a-team"' in preview.text
    sent = browser.post("/signals/send", data={"csrf": csrf, "key": "web.said", "value": "1", "confirmed": "yes"})
    assert sent.status_code == 303
    refused = browser.post("/signals/send", data={"csrf": csrf, "key": "web.said", "value": "2", "confirmed": "yes",
                                                  "namespace": B})
    assert refused.status_code == 403
    assert [(ns, key) for _, ns, key, _, _ in _stored(db)] == [(A, "a-team/web.said")]


WAITER = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: serve, namespace: team-b}
spec:
  schedule: null
  paused: false
  tasks:
    - id: evaluate
      onSignal: [{signal: model.published, action: start}]
      spark: {mainApplicationFile: evaluate.py}
"""


def test_a_task_rule_acts_on_its_own_namespaces_signal_only(db, tmp_path):
    """The issue's untested rule: a signal of one namespace reaching another's `onSignal` rules."""
    _apply(db, tmp_path, WAITER)
    run = trigger_run(db, "team-b/serve", now=NOW)
    _schedule(db)
    with db.begin() as conn:
        for namespace in (A, "default"):
            send_signal(conn, "model.published", {"m": 1}, source="test", now=NOW, namespace=namespace)
    _schedule(db)
    assert ti_states(db, run.id) == {"evaluate": "none"}  # still waiting: those were other namespaces' keys
    with db.begin() as conn:
        send_signal(conn, "model.published", {"m": 2}, source="test", now=NOW, namespace=B)
    _schedule(db)
    assert ti_states(db, run.id) == {"evaluate": "success"}
