"""Callbacks delivered by an operator replica: Kubernetes Events on the DAG and DagRun objects (one per
callback, named after its delivery id), and a webhook whose URL comes from a Secret in the DAG's namespace."""

from __future__ import annotations

import base64
import datetime as dt

from sqlalchemy import select

from dagline.clock import FixedClock
from dagline.db.models import callback_outbox_t
from dagline.executors.noop import NoopExecutor
from tests.helpers.k8s.operator_harness import NS, dag_manifest, dagrun_manifest, is_ready, replica, task
from tests.helpers.receiver import Receiver


def test_an_operator_emits_events_on_the_dag_and_dagrun_and_reads_webhook_urls_from_secrets(kube, run_kopf, pg_db,
                                                                                            monkeypatch):
    receiver = Receiver()
    monkeypatch.setenv("DAGLINE_CALLBACK_ALLOWED_NETWORKS", receiver.allowed_networks)  # loopback: allowed here
    clock = FixedClock(dt.datetime(2026, 3, 2, 1, tzinfo=dt.timezone.utc))
    kube.create("secrets", NS, {"metadata": {"name": "hooks"}, "type": "Opaque",
                                "data": {"url": base64.b64encode(receiver.url.encode()).decode()}})
    fails = {"spark": {"mainApplicationFile": "local:///jobs/load.py", "conf": {"dagline.noop.outcome": "failed"}}}
    manifest = dag_manifest("daily", schedule=None, tasks=[task("extract"), {**task("load", "extract"), **fails}],
                            callbacks=[{"events": ["success", "failure"], "kubernetesEvent": {}},
                                       {"events": ["failure"],
                                        "webhook": {"urlFrom": {"secretKeyRef": {"name": "hooks", "key": "url"}}}}],
                            defaults={"callbacks": [{"events": ["failure"], "kubernetesEvent": {}}]})
    try:
        with replica(run_kopf, pg_db, executor=NoopExecutor(parallelism=4, clock=clock), clock=clock):
            kube.create("dags", NS, manifest)
            kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="DAG Ready")
            kube.create("dagruns", NS, dagrun_manifest("daily-1", logicalDate="2026-03-01"))
            kube.wait_for(lambda: [e["reason"] for e in kube.events(NS, involving="daily-1")
                                   if e["metadata"]["name"].startswith("dagline-")],
                          until=lambda reasons: "DagRunFailed" in reasons, timeout=20, what="the run's Event")
            kube.wait_for(lambda: receiver.bodies(), until=bool, timeout=20, what="the webhook")
            with pg_db.begin() as conn:
                kube.wait_for(lambda: sorted(conn.execute(select(callback_outbox_t.c.state)).scalars()),
                              until=lambda states: states == ["delivered"] * 3, what="all delivered")
    finally:
        receiver.close()
    on_dag = [e for e in kube.events(NS, involving="daily") if e["metadata"]["name"].startswith("dagline-")]
    assert sorted(e["reason"] for e in on_dag) == ["DagRunFailed", "TaskFailed"]
    failed = next(e for e in on_dag if e["reason"] == "DagRunFailed")
    assert failed["type"] == "Warning" and failed["involvedObject"]["kind"] == "DAG"
    assert "daily" in failed["message"] and "run failure" in failed["message"]
    on_run = [e for e in kube.events(NS, involving="daily-1") if e["metadata"]["name"].startswith("dagline-")]
    assert sorted(e["reason"] for e in on_run) == ["DagRunFailed", "TaskFailed"]
    assert all(e["involvedObject"]["kind"] == "DagRun" for e in on_run)
    [body] = receiver.bodies()  # the URL was read from the Secret
    assert (body["event"], body["kind"], body["dag_id"]) == ("failure", "run", "daily")


def test_a_dag_object_whose_callback_reads_the_operators_database_url_is_invalid_and_not_stored(kube, run_kopf, pg_db):
    """Issue 26, defect 1, through the operator: the header would send DAGLINE_DB_URL out; the DAG object
    is refused on its status, naming the field, and nothing of it is stored."""
    from tests.helpers.k8s.operator_harness import condition, dag_row

    manifest = dag_manifest("leaky", schedule=None, callbacks=[{
        "events": ["failure"], "webhook": {"url": "https://collector.example.com/x",
                                           "headers": [{"name": "X-Db", "valueFrom": {"env": "DAGLINE_DB_URL"}}]}}])
    with replica(run_kopf, pg_db):
        kube.create("dags", NS, manifest)
        dag = kube.wait_for(lambda: kube.get("dags", NS, "leaky"), until=lambda d: condition(d, "Invalid"),
                            what="Invalid condition")
    message = condition(dag, "Invalid")["message"]
    assert message.startswith("spec.callbacks[0].webhook.headers[0].valueFrom.env")
    assert "DAGLINE_DB_URL is one of the scheduler's own settings" in message
    assert dag_row(pg_db, "leaky") is None
