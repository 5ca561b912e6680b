"""Two teams on one dagline (issue 26, docs/adr/0050): objects of namespace `a-team` reach nothing of
`team-b`. DagRun and Backfill objects act only on DAGs of their own namespace; a Pool object limits
only its own namespace and never the platform's `default` pool; callback Secrets are read, and Events
written, only in the namespace owning the DAG."""

from __future__ import annotations

import base64
import datetime as dt

from sqlalchemy import select

from dagline.clock import FixedClock
from dagline.db.models import callback_outbox_t, pool_t
from dagline.executors.noop import NoopExecutor
from dagline.store.pools import set_pool
from tests.helpers.k8s.operator_harness import (
    START,
    backfill_manifest,
    backfill_rows,
    condition,
    dag_manifest,
    dag_row,
    dagrun_manifest,
    is_ready,
    pool_manifest,
    replica,
    run_rows,
    task,
)
from tests.helpers.receiver import Receiver

A, B = "a-team", "team-b"


def _two_teams(kube):
    kube.create_namespace(A)
    kube.create_namespace(B)


def _refusal(kube, plural, namespace, name):
    found = kube.wait_for(lambda: kube.get(plural, namespace, name), what=f"{plural} {namespace}/{name} refused",
                          until=lambda o: condition(o, "Invalid"))
    return condition(found, "Invalid")


def _warnings(kube, namespace, name):
    return kube.wait_for(lambda: [(e["type"], e["reason"]) for e in kube.events(namespace, involving=name)],
                         until=bool, what=f"an Event on {namespace}/{name}")


def _pool(db, name):
    with db.begin() as conn:
        return conn.execute(select(pool_t).where(pool_t.c.name == name)).first()


def test_dagrun_and_backfill_objects_of_one_namespace_cannot_touch_another_namespaces_dag(kube, run_kopf, pg_db):
    _two_teams(kube)
    with replica(run_kopf, pg_db, namespace=None):
        kube.create("dags", B, dag_manifest("sales", schedule=None, paused=False))
        kube.wait_for(lambda: kube.get("dags", B, "sales"), until=is_ready, what="team-b's DAG Ready")
        kube.create("dagruns", A, dagrun_manifest("steal", dag="sales", conf={"from": "a-team"}))
        refused = _refusal(kube, "dagruns", A, "steal")
        assert refused["reason"] == "OtherNamespace" and "namespace 'a-team'" in refused["message"]
        assert ("Warning", "OtherNamespace") in _warnings(kube, A, "steal")
        kube.create("backfills", A, backfill_manifest("steal-past", dag="sales"))
        assert _refusal(kube, "backfills", A, "steal-past")["reason"] == "OtherNamespace"
        assert ("Warning", "OtherNamespace") in _warnings(kube, A, "steal-past")
        # team-b's own objects work, so the refusals above are about the namespace
        kube.create("dagruns", B, dagrun_manifest("own", dag="sales", logicalDate="2026-03-01"))
        own = kube.wait_for(lambda: kube.get("dagruns", B, "own"), until=is_ready, what="team-b's run")
        # naming team-b's run by its id shows nothing of it in a-team
        kube.create("dagruns", A, dagrun_manifest("peek", dag="sales", runId=own["status"]["runId"]))
        peek = kube.wait_for(lambda: kube.get("dagruns", A, "peek"), until=lambda o: condition(o, "Invalid"),
                             what="the peek refused")
        assert condition(peek, "Invalid")["reason"] == "OtherNamespace"
        assert "state" not in peek["status"] and "runId" not in peek["status"]
    assert [(r.run_id, r.conf) for r in run_rows(pg_db, "sales")] == [(own["status"]["runId"], {})]
    assert backfill_rows(pg_db) == []


def test_a_pool_object_limits_only_its_namespace_and_never_the_platforms_default_pool(kube, run_kopf, pg_db):
    _two_teams(kube)
    set_pool(pg_db, "taken", 3, now=START, namespace=A)  # a-team's, until a platform value takes it back
    # the chart's `pools` values: the platform's pools, set when the replica starts
    with replica(run_kopf, pg_db, namespace=None, platform_pools=(("default", 64), ("shared", 10), ("taken", 2))):
        assert (_pool(pg_db, "default").slots, _pool(pg_db, "shared").slots) == (64, 10)
        assert (_pool(pg_db, "taken").slots, _pool(pg_db, "taken").namespace) == (2, None)
        kube.create("pools", A, pool_manifest("default", 1))
        refused = _refusal(kube, "pools", A, "default")
        assert refused["reason"] == "Reserved" and "platform" in refused["message"]
        assert ("Warning", "Reserved") in _warnings(kube, A, "default")
        kube.create("pools", A, pool_manifest("shared", 1))
        assert _refusal(kube, "pools", A, "shared")["reason"] == "PlatformPool"
        kube.create("pools", A, pool_manifest("spark", 1))
        kube.wait_for(lambda: kube.get("pools", A, "spark"), until=is_ready, what="a-team's pool Ready")
        # team-b's DAG may not put its tasks in a-team's pool; a-team's own DAG may
        kube.create("dags", B, dag_manifest("b-etl", tasks=[task("load", pool="spark")]))
        refused_dag = _refusal(kube, "dags", B, "b-etl")
        assert refused_dag["reason"] == "PoolNotOwned" and "'a-team'" in refused_dag["message"]
        kube.create("dags", A, dag_manifest("a-etl", tasks=[task("load", pool="spark")]))
        kube.wait_for(lambda: kube.get("dags", A, "a-etl"), until=is_ready, what="a-team's DAG Ready")
        # a pool name team-b's tasks already use cannot become a-team's
        kube.create("dags", B, dag_manifest("b-late", tasks=[task("load", pool="later")]))
        kube.wait_for(lambda: kube.get("dags", B, "b-late"), until=is_ready, what="team-b's DAG Ready")
        kube.create("pools", A, pool_manifest("later", 1))
        assert _refusal(kube, "pools", A, "later")["reason"] == "PoolInUse"
        kube.delete("pools", A, "default")
        kube.wait_gone("pools", A, "default")
    assert _pool(pg_db, "default").slots == 64 and _pool(pg_db, "default").namespace is None
    assert (_pool(pg_db, "shared").slots, _pool(pg_db, "shared").namespace) == (10, None)
    assert (_pool(pg_db, "spark").slots, _pool(pg_db, "spark").namespace) == (1, A)
    assert _pool(pg_db, "later") is None
    assert dag_row(pg_db, "b-etl") is None and dag_row(pg_db, "a-etl").namespace == A


def test_callback_secrets_and_events_stay_in_the_namespace_owning_the_dag(kube, run_kopf, pg_db, monkeypatch):
    _two_teams(kube)
    owner, thief = Receiver(), Receiver()
    # both loopback receivers are allowed destinations here: only the namespace decides which one is reached
    monkeypatch.setenv("DAGLINE_CALLBACK_ALLOWED_NETWORKS", f"{owner.allowed_networks},{thief.allowed_networks}")
    clock = FixedClock(dt.datetime(2026, 3, 2, 1, tzinfo=dt.timezone.utc))
    for namespace, receiver in ((A, thief), (B, owner)):
        kube.create("secrets", namespace, {"metadata": {"name": "hooks"}, "type": "Opaque",
                                           "data": {"url": base64.b64encode(receiver.url.encode()).decode()}})
    fails = {"spark": {"mainApplicationFile": "local:///jobs/load.py", "conf": {"dagline.noop.outcome": "failed"}}}
    callbacks = [{"events": ["failure"], "kubernetesEvent": {}},
                 {"events": ["failure"], "webhook": {"urlFrom": {"secretKeyRef": {"name": "hooks", "key": "url"}}}}]
    try:
        with replica(run_kopf, pg_db, executor=NoopExecutor(parallelism=4, clock=clock), clock=clock, namespace=None):
            # a-team's object of the same name comes first (refused: not a valid DAG), then team-b's defines it
            kube.create("dags", A, dag_manifest("daily", schedule=None, tasks=[task("load", "nowhere")]))
            _refusal(kube, "dags", A, "daily")
            kube.create("dags", B, dag_manifest("daily", schedule=None, tasks=[{**task("load"), **fails}],
                                                callbacks=callbacks))
            kube.wait_for(lambda: kube.get("dags", B, "daily"), until=is_ready, what="team-b's DAG Ready")
            kube.create("dagruns", B, dagrun_manifest("daily-1", logicalDate="2026-03-01"))
            with pg_db.begin() as conn:
                kube.wait_for(lambda: sorted(conn.execute(select(callback_outbox_t.c.state)).scalars()),
                              until=lambda states: states == ["delivered"] * 2, timeout=20, what="both delivered")
    finally:
        owner.close()
        thief.close()
    [body] = owner.bodies()  # the URL came from team-b's Secret
    assert (body["event"], body["dag_id"]) == ("failure", "daily")
    assert thief.bodies() == []
    on_owner = [e for e in kube.events(B, involving="daily") if e["metadata"]["name"].startswith("dagline-")]
    assert [e["reason"] for e in on_owner] == ["DagRunFailed"]
    assert [e for e in kube.events(A) if e["metadata"]["name"].startswith("dagline-")] == []
