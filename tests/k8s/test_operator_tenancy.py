"""Two teams on one dagline (issues 26 and 38): every name is a namespace's. DagRun and Backfill objects name a
DAG of their own namespace (another namespace's is out of reach by construction); a Pool object sets its
own namespace's pool, never a platform pool nor `default`; callback Secrets are read, and Events written,
in the namespace of the DAG's key; a deleted DAG's running run keeps its namespace's Secrets when another
namespace applies a DAG of its name."""

from __future__ import annotations

import base64
import datetime as dt

from sqlalchemy import select

from dagline.clock import FixedClock
from dagline.db.models import callback_outbox_t, pool_t, ti_t
from dagline.executors.noop import NoopExecutor
from dagline.k8s.callback_events import dag_key_of
from dagline.k8s.client import load_api_client
from dagline.k8s.executor import SparkK8sExecutor, SparkK8sSettings
from dagline.k8s.sparkapp import ANNOTATION_DAG_ID, LABEL_OUTCOME
from dagline.store.pools import set_pool
from tests.helpers.k8s.operator_harness import (
    NS,
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
from tests.helpers.k8s.spark_operator import Behaviour
from tests.helpers.receiver import Receiver

A, B = "a-team", "team-b"
APPS = "sparkapplications"


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


def _pool(db, key):
    with db.begin() as conn:
        return conn.execute(select(pool_t).where(pool_t.c.name == key)).first()


def _ti_pools(db, run_pk):
    with db.begin() as conn:
        return dict(conn.execute(select(ti_t.c.task_id, ti_t.c.pool).where(ti_t.c.dag_run_id == run_pk)).all())


def _passes(kube, runtime, count=3):
    """Wait until the status sync made `count` more passes (what it would show, it has shown by then)."""
    start = runtime.sync.stats.syncs
    kube.wait_for(lambda: runtime.sync.stats.syncs, until=lambda n: n >= start + count, what="status sync passes")


def test_dagrun_and_backfill_objects_name_a_dag_of_their_own_namespace_only(kube, run_kopf, pg_db):
    _two_teams(kube)
    with replica(run_kopf, pg_db, namespace=None) as runtime:
        kube.create("dags", B, dag_manifest("sales", schedule=None, paused=False))
        kube.wait_for(lambda: kube.get("dags", B, "sales"), until=is_ready, what="team-b's DAG Ready")
        # a-team has no `sales`: its objects wait for a-team's own, whatever team-b has
        kube.create("dagruns", A, dagrun_manifest("mine", dag="sales", conf={"from": "a-team"}))
        waiting = _refusal(kube, "dagruns", A, "mine")
        assert waiting["reason"] == "UnknownDag" and "namespace 'a-team'" in waiting["message"]
        kube.create("backfills", A, backfill_manifest("past", dag="sales", start="2026-02-01", end="2026-02-02"))
        assert _refusal(kube, "backfills", A, "past")["reason"] == "DagNotReady"
        kube.create("dagruns", B, dagrun_manifest("own", dag="sales", logicalDate="2026-03-01"))
        own = kube.wait_for(lambda: kube.get("dagruns", B, "own"), until=is_ready, what="team-b's run")
        # naming team-b's run by its id in a-team finds nothing: the id is looked up among a-team's DAGs
        kube.create("dagruns", A, dagrun_manifest("peek", dag="sales", runId=own["status"]["runId"]))
        _passes(kube, runtime)
        peek = kube.get("dagruns", A, "peek")
        assert "state" not in (peek.get("status") or {}) and "runId" not in (peek.get("status") or {})
        # a-team's own `sales` appears: its waiting objects act on it, and on nothing of team-b's
        kube.create("dags", A, dag_manifest("sales", paused=False, startDate="2026-01-01T00:00:00"))
        kube.wait_for(lambda: kube.get("dags", A, "sales"), until=is_ready, what="a-team's DAG Ready")
        kube.wait_for(lambda: kube.get("dagruns", A, "mine"), until=is_ready, timeout=10, what="a-team's run")
        kube.wait_for(lambda: backfill_rows(pg_db), until=bool, timeout=10, what="a-team's backfill")
        assert "state" not in (kube.get("dagruns", A, "peek").get("status") or {})
    assert [(r.run_id, r.conf) for r in run_rows(pg_db, "sales")] == []  # no DAG `sales` in `default`
    assert [(r.run_id, r.conf) for r in run_rows(pg_db, f"{B}/sales")] == [(own["status"]["runId"], {})]
    assert {"from": "a-team"} in [r.conf for r in run_rows(pg_db, f"{A}/sales")]
    assert [b.dag_id for b in backfill_rows(pg_db)] == [f"{A}/sales"]


def test_a_pool_object_sets_its_own_namespaces_pool_and_never_a_platform_pool(kube, run_kopf, pg_db):
    _two_teams(kube)
    # the chart's `pools` values: the platform's pools, set when the replica starts
    with replica(run_kopf, pg_db, namespace=None, platform_pools=(("default", 64), ("shared", 10))) as runtime:
        assert (_pool(pg_db, "default").slots, _pool(pg_db, "shared").slots) == (64, 10)
        kube.create("pools", A, pool_manifest("default", 1))
        refused = _refusal(kube, "pools", A, "default")
        assert refused["reason"] == "Reserved" and "platform" in refused["message"]
        assert ("Warning", "Reserved") in _warnings(kube, A, "default")
        kube.create("pools", A, pool_manifest("shared", 1))
        assert _refusal(kube, "pools", A, "shared")["reason"] == "PlatformPool"
        kube.create("pools", A, pool_manifest("spark", 1))
        kube.wait_for(lambda: kube.get("pools", A, "spark"), until=is_ready, what="a-team's pool Ready")
        # team-b's tasks naming `spark` take team-b's own `spark` (none yet: they wait), never a-team's
        kube.create("dags", B, dag_manifest("etl", schedule=None, paused=False,
                                            tasks=[task("load", pool="spark"), task("share", pool="shared")]))
        kube.wait_for(lambda: kube.get("dags", B, "etl"), until=is_ready, what="team-b's DAG Ready")
        assert ("Warning", "PoolMissing") in _warnings(kube, B, "etl")
        kube.create("dags", A, dag_manifest("etl", schedule=None, paused=False,
                                            tasks=[task("load", pool="spark"), task("share", pool="shared")]))
        kube.wait_for(lambda: kube.get("dags", A, "etl"), until=is_ready, what="a-team's DAG Ready")
        for namespace in (A, B):
            kube.create("dagruns", namespace, dagrun_manifest("etl-1", dag="etl", logicalDate="2026-03-01"))
            kube.wait_for(lambda namespace=namespace: kube.get("dagruns", namespace, "etl-1"), until=is_ready,
                          what="a run")
        kube.create("pools", B, pool_manifest("spark", 5))  # one name, two namespaces: two pools
        kube.wait_for(lambda: kube.get("pools", B, "spark"), until=is_ready, what="team-b's pool Ready")
        # a Pool object applied before the platform made a pool of its name is refused from then on
        kube.create("pools", A, pool_manifest("later", 2))
        kube.wait_for(lambda: kube.get("pools", A, "later"), until=is_ready, what="a-team's `later` Ready")
        set_pool(pg_db, "later", 7, now=START, who="cli")
        assert _refusal(kube, "pools", A, "later")["reason"] == "PlatformPool"
        _passes(kube, runtime)
        kube.delete("pools", A, "default")
        kube.wait_gone("pools", A, "default")
    assert _pool(pg_db, "default").slots == 64 and _pool(pg_db, "default").namespace is None
    assert (_pool(pg_db, "shared").slots, _pool(pg_db, "shared").namespace) == (10, None)
    assert (_pool(pg_db, "a-team/spark").slots, _pool(pg_db, "a-team/spark").namespace) == (1, A)
    assert (_pool(pg_db, "team-b/spark").slots, _pool(pg_db, "team-b/spark").namespace) == (5, B)
    assert _pool(pg_db, "spark") is None and _pool(pg_db, "a-team/shared") is None
    assert _pool(pg_db, "later").slots == 7
    [a_run], [b_run] = run_rows(pg_db, f"{A}/etl"), run_rows(pg_db, f"{B}/etl")
    assert _ti_pools(pg_db, a_run.id) == {"load": "a-team/spark", "share": "shared"}
    assert _ti_pools(pg_db, b_run.id) == {"load": "team-b/spark", "share": "shared"}


def test_callback_secrets_and_events_stay_in_the_namespace_of_the_dags_key(kube, run_kopf, pg_db, monkeypatch):
    _two_teams(kube)
    receivers = {A: Receiver(), B: Receiver()}
    # both loopback receivers are allowed destinations here: only the namespace decides which one is reached
    monkeypatch.setenv("DAGLINE_CALLBACK_ALLOWED_NETWORKS", ",".join(r.allowed_networks for r in receivers.values()))
    clock = FixedClock(dt.datetime(2026, 3, 2, 1, tzinfo=dt.timezone.utc))
    for namespace, receiver in receivers.items():
        kube.create("secrets", namespace, {"metadata": {"name": "hooks"}, "type": "Opaque",
                                           "data": {"url": base64.b64encode(receiver.url.encode()).decode()}})
    fails = {"spark": {"mainApplicationFile": "local:///jobs/load.py", "conf": {"dagline.noop.outcome": "failed"}}}
    callbacks = [{"events": ["failure"], "kubernetesEvent": {}},
                 {"events": ["failure"], "webhook": {"urlFrom": {"secretKeyRef": {"name": "hooks", "key": "url"}}}}]
    try:
        with replica(run_kopf, pg_db, executor=NoopExecutor(parallelism=4, clock=clock), clock=clock, namespace=None):
            # both teams have a DAG `daily` whose run fails; each is its namespace's
            for namespace in (A, B):
                kube.create("dags", namespace, dag_manifest("daily", schedule=None,
                                                            tasks=[{**task("load"), **fails}], callbacks=callbacks))
                kube.wait_for(lambda namespace=namespace: kube.get("dags", namespace, "daily"), until=is_ready,
                              what="a DAG Ready")
                kube.create("dagruns", namespace, dagrun_manifest("daily-1", logicalDate="2026-03-01"))
            with pg_db.begin() as conn:
                kube.wait_for(lambda: sorted(conn.execute(select(callback_outbox_t.c.state)).scalars()),
                              until=lambda states: states == ["delivered"] * 4, timeout=20, what="all delivered")
    finally:
        for receiver in receivers.values():
            receiver.close()
    for namespace, receiver in receivers.items():  # each URL came from its DAG's namespace's Secret
        [body] = receiver.bodies()
        assert (body["event"], dag_key_of(body)) == ("failure", f"{namespace}/daily")
        on_dag = [e for e in kube.events(namespace, involving="daily") if e["metadata"]["name"].startswith("dagline-")]
        assert [(e["reason"], e["metadata"]["labels"]["dagline.io/dag"]) for e in on_dag] == [("DagRunFailed", "daily")]
    assert [e for e in kube.events(NS) if e["metadata"]["name"].startswith("dagline-")] == []


def _tries(kube):
    """The SparkApplications of task tries (not the Spark preflight's probe)."""
    return [a for a in kube.list(APPS, NS) if ANNOTATION_DAG_ID in (a["metadata"].get("annotations") or {})]


def _env_secret_of(kube, app):
    """The try's environment, as its driver reads it (the Secret `<application>-env` of the Spark namespace)."""
    secret = kube.get("secrets", NS, f"{app['metadata']['name']}-env")
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()} | (
        secret.get("stringData") or {})


def test_a_deleted_dags_running_run_keeps_its_namespaces_secrets_when_another_namespace_takes_the_name(
        kube, run_kopf, spark_operator, pg_db):
    """The issue's first scenario: a-team's `etl` (a task env from secretKeyRef `warehouse/password`) runs,
    its object is deleted while the run is active, team-b applies its own `etl`: a-team's run goes on with
    a-team's Secret only, and team-b's DAG has none of a-team's runs."""
    _two_teams(kube)
    for namespace in (A, B):
        kube.create("secrets", namespace, {"metadata": {"name": "warehouse"}, "type": "Opaque",
                                           "data": {"password": base64.b64encode(f"{namespace}-pass".encode()).decode()}})
    clock = FixedClock(dt.datetime(2026, 3, 2, 1, tzinfo=dt.timezone.utc))
    executor = SparkK8sExecutor(SparkK8sSettings(namespace=NS, image="spark:3.5.3"), parallelism=4, clock=clock,
                                api_client=load_api_client(), list_interval_s=0.0, retry_interval_s=0.0)
    spark_operator.mode = "script"
    spark_operator.on({"dagline.io/namespace": A, "dagline.io/task": "extract"}, Behaviour.hang("RUNNING"))
    env = [{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "warehouse", "key": "password"}}}]
    tasks = [task("extract", env=env), task("load", "extract", env=env)]
    with replica(run_kopf, pg_db, executor=executor, clock=clock, namespace=None):
        kube.create("dags", A, dag_manifest("etl", schedule=None, tasks=tasks))
        kube.wait_for(lambda: kube.get("dags", A, "etl"), until=is_ready, what="a-team's DAG Ready")
        kube.create("dagruns", A, dagrun_manifest("etl-1", dag="etl", logicalDate="2026-03-01"))
        [extract] = kube.wait_for(lambda: _tries(kube), until=lambda apps: len(apps) == 1, timeout=15,
                                  what="a-team's first application")
        assert extract["metadata"]["labels"]["dagline.io/namespace"] == A
        assert extract["metadata"]["labels"]["dagline.io/dag"] == "etl"
        assert extract["metadata"]["annotations"][ANNOTATION_DAG_ID] == f"{A}/etl"
        assert _env_secret_of(kube, extract)["DB_PASSWORD"] == "a-team-pass"
        kube.delete("dags", A, "etl")
        kube.wait_for(lambda: dag_row(pg_db, f"{A}/etl"), until=lambda row: not row.is_active, what="deactivated")
        kube.create("dags", B, dag_manifest("etl", schedule=None, tasks=tasks))
        kube.wait_for(lambda: kube.get("dags", B, "etl"), until=is_ready, what="team-b's DAG Ready")
        # a-team's extract ends now: its run goes on to `load`, whose Secret is read after all that
        kube.patch_status(APPS, NS, extract["metadata"]["name"], {"applicationState": {"state": "COMPLETED"}})
        run = kube.wait_for(lambda: run_rows(pg_db, f"{A}/etl"), timeout=20, what="a-team's run success",
                            until=lambda rows: [r.state for r in rows] == ["success"])
    apps = {a["metadata"]["annotations"]["dagline.io/task-id"]: a for a in _tries(kube)}
    assert sorted(apps) == ["extract", "load"] and apps["load"]["metadata"]["labels"]["dagline.io/namespace"] == A
    assert apps["load"]["metadata"]["labels"][LABEL_OUTCOME] in ("pending", "success")
    assert _env_secret_of(kube, apps["load"])["DB_PASSWORD"] == "a-team-pass"  # a-team's Secret, not team-b's
    row, other = dag_row(pg_db, f"{A}/etl"), dag_row(pg_db, f"{B}/etl")
    assert (row.namespace, row.is_active) == (A, False) and (other.namespace, other.is_active) == (B, True)
    assert [r.id for r in run] == [r.id for r in run_rows(pg_db, f"{A}/etl")]
    assert run_rows(pg_db, f"{B}/etl") == [] and run_rows(pg_db, "etl") == []
