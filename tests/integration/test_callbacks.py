"""Callbacks: webhooks to a real local HTTP receiver, through the outbox. What fires on success,
failure and retry per DAG and per task; the documented JSON body and headers; secrets from the
environment only; retries with backoff up to a limit; and a replica killed (SIGKILL) in the middle of
a delivery on PostgreSQL: nothing lost, a duplicate only ever with the same delivery id."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys

import pytest
from sqlalchemy import select

from dagline import metrics
from dagline.clock import FixedClock
from dagline.db.models import callback_outbox_t
from dagline.db.outbox import list_deliveries
from dagline.errors import InvalidInput
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.channels import SecretReader
from dagline.scheduler.deliveries import CallbackSettings
from dagline.scheduler.loop import Scheduler
from dagline.spec import parse_dag_yaml
from dagline.store.runs import trigger_run
from tests.helpers.harness import apply, runs, t, write_dag
from tests.helpers.polling import wait_for
from tests.helpers.receiver import Receiver

NOW = "2026-03-01T00:00:00Z"
DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: hooks}
spec:
  paused: false
  schedule: null
  callbacks:
    - events: [success, failure]
      webhook:
        urlFrom: {env: SECRET_HOOK_URL}
        headers: [{name: Authorization, valueFrom: {env: SECRET_HOOK_TOKEN}}]
  defaults:
    callbacks: [{events: [retry, failure], webhook: {urlFrom: {env: SECRET_HOOK_URL}}}]
  tasks:
    - id: flaky
      retries: 1
      retryDelay: PT1M
      spark:
        mainApplicationFile: f.py
        conf: {dagline.noop.outcome: "{{ 'failed' if try_number == 1 else 'success' }}"}
    - id: quiet
      upstream: [flaky]
      callbacks: [{events: [success], webhook: {urlFrom: {env: SECRET_HOOK_URL}}}]
      spark: {mainApplicationFile: q.py}
"""


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def _scheduler(db, clock, receiver, **settings):
    secrets = SecretReader(environ={"SECRET_HOOK_URL": receiver.url, "SECRET_HOOK_TOKEN": "Bearer s3cret"})
    return Scheduler(db, NoopExecutor(8, clock=clock), clock=clock, secret_reader=secrets,
                     callback_settings=CallbackSettings(**{"allowed_networks": receiver.allowed_networks, **settings}))


def _deliveries(db):
    with db.begin() as conn:
        return list_deliveries(conn)


def test_webhooks_fire_per_dag_and_per_task_with_the_documented_body(db, tmp_path, receiver):
    apply(db, write_dag(tmp_path, DAG))
    trigger_run(db, "hooks", logical_date=t(NOW), now=t(NOW))
    clock = FixedClock(t(NOW))
    _scheduler(db, clock, receiver).run(until_idle=True)  # try 1 of flaky fails: a retry
    assert [(b["event"], b["task_id"]) for b in receiver.bodies()] == [("retry", "flaky")]
    clock.advance(dt.timedelta(minutes=1))
    _scheduler(db, clock, receiver).run(until_idle=True)
    assert runs(db, "hooks")[0]["state"] == "success"
    got = sorted((b["event"], b["kind"], b["task_id"], b["try_number"]) for b in receiver.bodies())
    # flaky's success fires nothing (defaults listen to retry and failure only); quiet has its own
    assert got == [("retry", "task", "flaky", 1), ("success", "run", None, None), ("success", "task", "quiet", 1)]

    headers, body = next((h, b) for h, b in receiver.received if b["kind"] == "run")
    run = runs(db, "hooks")[0]
    assert body == {
        "delivery_id": headers["X-Dagline-Delivery"], "event": "success", "kind": "run", "dag_id": "hooks",
        "namespace": "default", "run_id": run["run_id"], "run_type": "manual", "task_id": None, "try_number": None, "state": "success",
        "occurred_at": "2026-03-01T00:01:00+00:00", "logical_date": "2026-03-01T00:00:00+00:00",
        "data_interval_start": "2026-03-01T00:00:00+00:00", "data_interval_end": "2026-03-01T00:00:00+00:00",
        "deadline": None, "message": None,
    }
    assert headers["Authorization"] == "Bearer s3cret"  # from the environment, never from the spec
    assert headers["Content-Type"] == "application/json" and headers["X-Dagline-Event"] == "success"
    retry = next(b for b in receiver.bodies() if b["event"] == "retry")
    assert retry["state"] == "up_for_retry" and "retry 2 of 2" in retry["message"]
    assert {d.state for d in _deliveries(db)} == {"delivered"}
    assert len({d.delivery_id for d in _deliveries(db)}) == 3


def test_a_namespaces_dag_is_named_by_its_name_and_namespace_in_the_body(db, tmp_path, receiver):
    """The body names the DAG as a receiver knows it (issue 38): its name, and its namespace beside it."""
    from dagline.spec import load_dag_paths
    from dagline.store.dags import apply_dags

    apply_dags(db, load_dag_paths([write_dag(tmp_path, DAG)], namespace="a-team"), now=t(NOW))
    trigger_run(db, "a-team/hooks", logical_date=t(NOW), now=t(NOW))
    clock = FixedClock(t(NOW))
    _scheduler(db, clock, receiver).run(until_idle=True)
    [retry] = receiver.bodies()
    assert (retry["dag_id"], retry["namespace"], retry["task_id"]) == ("hooks", "a-team", "flaky")


def test_outbox_rows_are_written_in_the_state_changes_transaction(db, tmp_path):
    """A state change that rolls back leaves no callback behind; the same change committed leaves one."""
    from dagline.db.transitions import record_events

    apply(db, write_dag(tmp_path, DAG))
    run = trigger_run(db, "hooks", logical_date=t(NOW), now=t(NOW))
    row = {"at": t(NOW), "who": "test", "entity": "dag_run", "dag_id": "hooks", "dag_run_id": run.id,
           "from_state": "running", "to_state": "success"}
    with pytest.raises(RuntimeError):
        with db.begin() as conn:
            record_events(conn, [row])
            assert conn.execute(select(callback_outbox_t)).all() != []  # written, in this transaction
            raise RuntimeError("the state change fails after its event was written")
    assert _deliveries(db) == []
    with db.begin() as conn:
        record_events(conn, [row])
    (written,) = _deliveries(db)
    assert (written.event, written.task_id, written.state) == ("success", None, "pending")


def test_a_failed_attempt_is_retried_with_backoff_with_the_same_delivery_id_then_given_up(db, tmp_path, receiver):
    apply(db, write_dag(tmp_path, DAG))
    trigger_run(db, "hooks", logical_date=t(NOW), now=t(NOW))
    receiver.answer = lambda body: 503
    failed = metrics.CALLBACK_DELIVERIES.labels(channel="webhook", outcome="failed")
    failed_before = failed._value.get()
    clock = FixedClock(t(NOW))
    _scheduler(db, clock, receiver, max_attempts=3, backoff_base_s=10).run(until_idle=True)
    (row,) = _deliveries(db)
    assert (row.state, row.attempts, row.next_attempt_at) == ("pending", 1, t(NOW) + dt.timedelta(seconds=10))
    assert "503" in row.last_error
    clock.advance(dt.timedelta(seconds=9))  # not due yet: nothing is sent
    _scheduler(db, clock, receiver, max_attempts=3, backoff_base_s=10).run(until_idle=True)
    assert len(receiver.received) == 1
    clock.advance(dt.timedelta(seconds=1))
    _scheduler(db, clock, receiver, max_attempts=3, backoff_base_s=10).run(until_idle=True)
    (row,) = _deliveries(db)
    assert (row.attempts, row.next_attempt_at) == (2, clock.now() + dt.timedelta(seconds=20))  # doubled
    clock.advance(dt.timedelta(seconds=20))
    _scheduler(db, clock, receiver, max_attempts=3, backoff_base_s=10).run(until_idle=True)
    (row,) = _deliveries(db)
    assert (row.state, row.attempts) == ("failed", 3)  # the limit: kept, with its last error
    assert [h["X-Dagline-Attempt"] for h, _ in receiver.received] == ["1", "2", "3"]
    assert failed._value.get() == failed_before + 3  # each failed attempt counted
    assert len({b["delivery_id"] for b in receiver.bodies()}) == 1


def test_a_missing_environment_variable_is_a_failed_attempt_naming_it(db, tmp_path, receiver):
    apply(db, write_dag(tmp_path, DAG))
    trigger_run(db, "hooks", logical_date=t(NOW), now=t(NOW))
    clock = FixedClock(t(NOW))
    sched = Scheduler(db, NoopExecutor(8, clock=clock), clock=clock, secret_reader=SecretReader(environ={}))
    sched.run(until_idle=True)
    (row,) = _deliveries(db)
    assert row.state == "pending" and "secret variable SECRET_HOOK_URL is not set" in row.last_error


@pytest.mark.parametrize("callback, field, message", [
    ("{events: [failure], webhook: {url: 'https://bot:hunter2@hooks.example.com/x'}}", "spec.callbacks[0].webhook.url",
     "credentials"),
    ("{events: [failure], webhook: {url: 'https://hooks.example.com/x', headers: [{name: A, value: secret}]}}",
     "spec.callbacks[0].webhook.headers[0]", "value"),
    ("{events: [retry], log: {}}", "spec.callbacks[0].events", "runs are not retried"),
    ("{events: [failure], log: {}, webhook: {url: 'https://h.example.com'}}", "spec.callbacks[0]", "exactly one channel"),
    ("{events: [failure], webhook: {urlFrom: {env: A, secretKeyRef: {name: s, key: k}}}}",
     "spec.callbacks[0].webhook.urlFrom", "exactly one of env or secretKeyRef"),
])
def test_secrets_in_the_spec_and_malformed_callbacks_are_refused_naming_the_field(callback, field, message):
    text = f"""
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {{name: bad}}
spec:
  paused: false
  callbacks: [{callback}]
  tasks: [{{id: a, spark: {{mainApplicationFile: a.py}}}}]
"""
    with pytest.raises(InvalidInput) as caught:
        parse_dag_yaml(text)
    assert field in str(caught.value) and message in str(caught.value)


def test_a_literal_url_without_credentials_is_accepted_and_specs_without_callbacks_keep_their_version():
    (doc,) = parse_dag_yaml("""
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: ok}
spec:
  paused: false
  deadline: {within: PT1H}
  callbacks: [{events: [failure], webhook: {url: 'https://hooks.example.com/x?team=data'}}]
  tasks: [{id: a, spark: {mainApplicationFile: a.py}}]
""")
    assert doc.spec.deadline.of.value == "data_interval_end"
    from dagline.spec import Dag, normalized_spec

    plain = parse_dag_yaml("""
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: ok}
spec:
  paused: false
  tasks: [{id: a, spark: {mainApplicationFile: a.py}}]
""")[0]
    stored = normalized_spec(plain.spec)
    assert "callbacks" not in stored and "deadline" not in stored and "callbacks" not in stored["tasks"][0]
    assert Dag.from_spec_json("ok", stored).version == Dag.from_document(plain).version


CHAIN_DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: chain}
spec:
  paused: false
  schedule: null
  callbacks: [{events: [success], webhook: {urlFrom: {env: SECRET_HOOK_URL}}}]
  defaults:
    callbacks: [{events: [success], webhook: {urlFrom: {env: SECRET_HOOK_URL}}}]
  tasks:
    - {id: a, spark: {mainApplicationFile: a.py}}
    - {id: b, upstream: [a], spark: {mainApplicationFile: b.py}}
    - {id: c, upstream: [b], spark: {mainApplicationFile: c.py}}
"""


def _iterate_until(sched, condition, what):
    def step():
        sched.iterate()
        return condition()
    wait_for(step, what, timeout=60)


def test_a_receiver_that_hangs_never_holds_up_the_loop(db, tmp_path, receiver):
    """The receiver holds `a`'s success callback unanswered; the loop runs b and c and ends the run
    meanwhile, and their callbacks go out on other workers. Once answered, `a`'s is recorded too."""
    apply(db, write_dag(tmp_path, CHAIN_DAG))
    trigger_run(db, "chain", logical_date=t(NOW), now=t(NOW))
    receiver.hold(lambda body: body["task_id"] == "a")
    clock = FixedClock(t(NOW))
    sched = _scheduler(db, clock, receiver)
    sched.start()
    try:
        _iterate_until(sched, lambda: runs(db, "chain")[0]["state"] == "success", "the run to end")
        assert receiver.held.is_set() and not receiver.release.is_set()  # a's webhook still hangs
        _iterate_until(sched, lambda: len(receiver.received) == 4, "the other callbacks")
        rows = {(d.task_id or "run"): (d.state, d.attempts) for d in _deliveries(db)}
        # a's is claimed (pending, its attempt counted, under a lease) while its request hangs
        assert rows == {"a": ("pending", 1), "b": ("delivered", 1), "c": ("delivered", 1), "run": ("delivered", 1)}
        receiver.release.set()
        _iterate_until(sched, lambda: {d.state for d in _deliveries(db)} == {"delivered"}, "a's callback recorded")
    finally:
        receiver.release.set()
        sched.stop()
    assert len(receiver.received) == 4  # each sent once


KILL_DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: killed}
spec:
  paused: false
  schedule: null
  callbacks: [{events: [success, failure], webhook: {urlFrom: {env: SECRET_HOOK_URL}}}]
  defaults:
    callbacks: [{events: [success, failure, retry], webhook: {urlFrom: {env: SECRET_HOOK_URL}}}]
  tasks:
    - {id: a, spark: {mainApplicationFile: a.py}}
    - {id: b, upstream: [a], spark: {mainApplicationFile: b.py}}
    - {id: c, upstream: [a], spark: {mainApplicationFile: c.py}}
"""


def _replica(url: str, receiver: Receiver, *args: str) -> subprocess.Popen:
    env = {**os.environ, "SECRET_HOOK_URL": receiver.url, "DAGLINE_CALLBACK_LEASE_S": "30",
           "DAGLINE_CALLBACK_ALLOWED_NETWORKS": receiver.allowed_networks}
    return subprocess.Popen([sys.executable, "-m", "dagline.cli", "--db", url, "scheduler", "--executor", "noop", *args],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_a_replica_killed_mid_delivery_loses_nothing_and_duplicates_keep_their_delivery_id(pg_db, tmp_path, receiver):
    apply(pg_db, write_dag(tmp_path, KILL_DAG))
    trigger_run(pg_db, "killed", logical_date=t(NOW), now=t(NOW))
    url = pg_db.engine.url.render_as_string(hide_password=False)
    # the run's own success is the last callback: the receiver holds it, so replica 1 is stuck sending it
    receiver.hold(lambda body: body["kind"] == "run")
    first = _replica(url, receiver, "--now", "2026-03-01T00:00:00Z")
    try:
        for _ in range(600):  # until the held request arrives (or the replica exits, which is a failure)
            if receiver.held.wait(0.1) or first.poll() is not None:
                break
        assert receiver.held.is_set(), "the replica exited" if first.poll() is not None else "no request"
        first.send_signal(signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate(timeout=30)  # reap it and close its pipe
    receiver.release.set()
    held = [b for b in receiver.bodies() if b["kind"] == "run"]
    with pg_db.begin() as conn:
        row = conn.execute(select(callback_outbox_t).where(callback_outbox_t.c.task_id.is_(None))).one()
    assert row.state == "pending" and row.attempts == 1  # its sender died before recording the outcome

    # a second replica, once the lease has passed (its clock is 31 s later), sends it again
    second = _replica(url, receiver, "--now", "2026-03-01T00:00:31Z", "--until-idle")
    _, errors = second.communicate(timeout=60)
    assert second.returncode == 0, errors.decode()

    deliveries = _deliveries(pg_db)
    assert {d.state for d in deliveries} == {"delivered"}
    expected = {("success", "task", "a"), ("success", "task", "b"), ("success", "task", "c"), ("success", "run", None)}
    assert {(d.payload["event"], d.payload["kind"], d.payload["task_id"]) for d in deliveries} == expected
    bodies = receiver.bodies()
    # nothing lost: every outbox row reached the receiver
    assert {b["delivery_id"] for b in bodies} == {d.delivery_id for d in deliveries}
    # duplicates only with the same delivery id: one id per (event, run/task)
    ids_per_event: dict[tuple, set] = {}
    for b in bodies:
        ids_per_event.setdefault((b["event"], b["kind"], b["task_id"]), set()).add(b["delivery_id"])
    assert all(len(ids) == 1 for ids in ids_per_event.values()), ids_per_event
    run_bodies = [b for b in bodies if b["kind"] == "run"]
    assert len(run_bodies) == 2 and run_bodies[0] == run_bodies[1] == held[0]  # the same body, twice


def test_callbacks_list_redeliver_and_prune(db, tmp_path, receiver):
    import json

    from click.testing import CliRunner

    from dagline.cli import main

    apply(db, write_dag(tmp_path, DAG))
    trigger_run(db, "hooks", logical_date=t(NOW), now=t(NOW))
    receiver.answer = lambda body: 500
    clock = FixedClock(t(NOW))
    _scheduler(db, clock, receiver, max_attempts=1).run(until_idle=True)
    url = db.engine.url.render_as_string(hide_password=False)
    cli = CliRunner()
    (failed,) = json.loads(cli.invoke(main, ["--db", url, "callbacks", "list", "--state", "failed", "--json"]).output)
    assert (failed["event"], failed["task_id"], failed["attempts"]) == ("retry", "flaky", 1)
    assert "500" in failed["last_error"]
    assert "webhook" in cli.invoke(main, ["--db", url, "callbacks", "list"]).output

    receiver.answer = lambda body: 200  # the receiver is fixed: send it again, same delivery id
    done = cli.invoke(main, ["--db", url, "callbacks", "redeliver", failed["delivery_id"], "--now", NOW])
    assert done.exit_code == 0 and "due again: 1" in done.output
    _scheduler(db, clock, receiver).run(until_idle=True)
    (row,) = _deliveries(db)
    assert row.state == "delivered" and [b["delivery_id"] for b in receiver.bodies()] == [row.delivery_id] * 2

    assert "pruned 0" in cli.invoke(main, ["--db", url, "callbacks", "prune", "--older-than", "P1D", "--now", NOW]).output
    later = "2026-03-03T00:00:00Z"
    assert "pruned 1" in cli.invoke(main, ["--db", url, "callbacks", "prune", "--older-than", "P1D", "--now", later]).output
    bad = cli.invoke(main, ["--db", url, "callbacks", "prune", "--older-than", "a week"])
    assert bad.exit_code == 2 and "--older-than" in bad.output


# -- what a callback may read (issue 26, defect 1) --------------------------------------------------

LEAK_DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: leak}
spec:
  paused: false
  schedule: null
  callbacks:
    - events: [success]
      webhook:
        url: https://collector.example.com/x
        headers: [{name: X-Db, valueFrom: {env: DAGLINE_DB_URL}}]
  tasks: [{id: a, spark: {mainApplicationFile: a.py}}]
"""


def test_a_callback_header_from_the_database_url_is_refused_at_apply_and_nothing_is_stored(db, tmp_path):
    from tests.helpers.cli import cli, snapshot

    before = snapshot(db)
    result = cli(db, "dags", "apply", write_dag(tmp_path, LEAK_DAG), expect=2)
    assert "spec.callbacks[0].webhook.headers[0].valueFrom.env" in result.stderr
    assert "DAGLINE_DB_URL is one of the scheduler's own settings" in result.stderr
    assert snapshot(db) == before


SECRET_HEADER_DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: allowed}
spec:
  paused: false
  schedule: null
  callbacks:
    - events: [success]
      webhook:
        urlFrom: {env: SECRET_HOOK_URL}
        headers: [{name: Authorization, valueFrom: {secretKeyRef: {name: hooks, key: token}}}]
  tasks: [{id: a, spark: {mainApplicationFile: a.py}}]
"""


def test_a_header_from_a_secret_key_ref_is_delivered_from_the_secrets_file(db, tmp_path, receiver):
    """Outside Kubernetes `secretKeyRef {name: hooks, key: token}` is the secret variable
    SECRET_HOOKS__TOKEN, here a line of the secrets file; the scheduler's DAGLINE_* stay its own."""
    secrets = tmp_path / "secrets.env"
    secrets.write_text("SECRET_HOOKS__TOKEN=Bearer from-the-file\n")
    apply(db, write_dag(tmp_path, SECRET_HEADER_DAG))
    trigger_run(db, "allowed", logical_date=t(NOW), now=t(NOW))
    clock = FixedClock(t(NOW))
    reader = SecretReader(environ={"SECRET_HOOK_URL": receiver.url, "DAGLINE_SECRETS_FILE": str(secrets),
                                   "DAGLINE_DB_URL": "postgresql://u:hunter2@db/x"})
    Scheduler(db, NoopExecutor(8, clock=clock), clock=clock, secret_reader=reader,
              callback_settings=CallbackSettings(allowed_networks=receiver.allowed_networks)).run(until_idle=True)
    [(headers, body)] = receiver.received
    assert headers["Authorization"] == "Bearer from-the-file" and body["event"] == "success"
    assert not any("hunter2" in value for value in headers.values())


def test_an_env_outside_the_secret_prefix_warns_at_apply_and_its_delivery_fails_saying_why(db, tmp_path, receiver):
    """A DAG written before the prefix rule (`{env: HOOK_URL}`) still applies, with a warning naming the
    field and the name to use; its deliveries fail, recorded with the reason, and nothing is sent."""
    from tests.helpers.cli import cli

    result = cli(db, "dags", "apply", write_dag(tmp_path, SECRET_HEADER_DAG.replace("SECRET_HOOK_URL", "HOOK_URL")))
    assert ("allowed: warning: spec.callbacks[0].webhook.urlFrom.env: HOOK_URL does not start with the secret "
            "prefix SECRET_ (DAGLINE_SECRET_PREFIX)") in result.stderr
    assert "names SECRET_HOOK_URL" in result.stderr
    trigger_run(db, "allowed", logical_date=t(NOW), now=t(NOW))
    clock = FixedClock(t(NOW))
    reader = SecretReader(environ={"HOOK_URL": receiver.url})
    Scheduler(db, NoopExecutor(8, clock=clock), clock=clock, secret_reader=reader,
              callback_settings=CallbackSettings(allowed_networks=receiver.allowed_networks)).run(until_idle=True)
    (row,) = _deliveries(db)
    assert row.state == "pending" and "variable HOOK_URL is not a secret variable" in row.last_error
    assert receiver.received == []
