"""Names are per namespace (issue 38): two namespaces' DAG objects `daily` are two DAGs (keys `daily` and
`team-b/daily`), two namespaces' Pool objects `spark` two pools (`default/spark`, `team-b/spark`), and
nothing done to one changes the other. `default` is never a Pool object's."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select

from dagline.clock import FixedClock
from dagline.db.models import dag_version_t, pool_t
from dagline.executors.noop import NoopExecutor
from tests.helpers.k8s.operator_harness import (
    NS,
    condition,
    dag_manifest,
    dag_row,
    is_ready,
    pool_manifest,
    replica,
    run_rows,
    task,
)

B = "team-b"


def _pool(db, key):
    with db.begin() as conn:
        return conn.execute(select(pool_t).where(pool_t.c.name == key)).first()


def _versions(db, dag_id):
    with db.begin() as conn:
        return list(conn.execute(select(dag_version_t.c.id).where(dag_version_t.c.dag_id == dag_id)).scalars())


def test_two_namespaces_may_each_have_a_dag_of_one_name_and_deleting_one_leaves_the_other(kube, run_kopf, pg_db):
    kube.create_namespace(B)
    clock = FixedClock(dt.datetime(2026, 3, 2, 1, tzinfo=dt.timezone.utc))  # the 03-01 run of each is due
    with replica(run_kopf, pg_db, namespace=None, executor=NoopExecutor(parallelism=4, clock=clock), clock=clock):
        kube.create("dags", NS, dag_manifest("daily"))
        kube.create("dags", B, dag_manifest("daily", tasks=[task("only")]))
        mine = kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="default's DAG Ready")
        theirs = kube.wait_for(lambda: kube.get("dags", B, "daily"), until=is_ready, what="team-b's DAG Ready")
        assert condition(theirs, "Invalid") is None and events_on(kube, B, "daily") == []
        assert mine["status"]["version"] == theirs["status"]["version"] == 1  # each its own history
        assert mine["status"]["versionHash"] != theirs["status"]["versionHash"]
        # each scheduled run is mirrored in its own DAG's namespace, owned by that namespace's object
        for namespace, dag in ((NS, mine), (B, theirs)):
            [mirror] = kube.wait_for(lambda namespace=namespace: kube.list("dagruns", namespace), timeout=15,
                                     until=lambda found: [(r.get("status") or {}).get("state") for r in found]
                                     == ["success"], what=f"the run mirrored in {namespace}")
            assert mirror["spec"]["dag"] == "daily" and mirror["metadata"]["labels"]["dagline.io/dag"] == "daily"
            assert mirror["metadata"]["ownerReferences"][0]["uid"] == dag["metadata"]["uid"]
            counts = {NS: {"success": 2}, B: {"success": 1}}[namespace]  # default's has 2 tasks, team-b's 1
            assert mirror["status"]["taskCounts"] == counts
        kube.delete("dags", NS, "daily")
        kube.wait_for(lambda: dag_row(pg_db, "daily"), until=lambda row: not row.is_active, what="default's deactivated")
        kube.patch("dags", B, "daily", {"spec": {"tasks": [task("only"), task("more", "only")]}})
        kube.wait_for(lambda: kube.get("dags", B, "daily"), until=lambda d: (d.get("status") or {}).get("version") == 2,
                      what="team-b's second version")
    row, other = dag_row(pg_db, "daily"), dag_row(pg_db, f"{B}/daily")
    assert (row.namespace, row.is_active, row.source_path) == ("default", False, "k8s://default/daily")
    assert (other.namespace, other.is_active, other.source_path) == (B, True, "k8s://team-b/daily")
    assert len(_versions(pg_db, "daily")) == 1 and len(_versions(pg_db, f"{B}/daily")) == 2
    assert [r.state for r in run_rows(pg_db, "daily")] == [r.state for r in run_rows(pg_db, f"{B}/daily")] == ["success"]


def events_on(kube, namespace, name):
    return [(e["type"], e["reason"]) for e in kube.events(namespace, involving=name) if e["type"] == "Warning"]


def test_pool_objects_of_one_name_in_two_namespaces_are_two_pools(kube, run_kopf, pg_db):
    kube.create_namespace(B)
    with replica(run_kopf, pg_db, namespace=None):
        kube.create("pools", NS, pool_manifest("spark", 4, description="Spark jobs"))
        pool = kube.wait_for(lambda: kube.get("pools", NS, "spark"), until=is_ready, what="Pool Ready")
        assert pool["status"]["slots"] == 4 and pool["status"]["occupiedSlots"] == 0
        stored = _pool(pg_db, "default/spark")
        assert (stored.slots, stored.description, stored.namespace) == (4, "Spark jobs", NS)
        kube.patch("pools", NS, "spark", {"spec": {"slots": 6}})
        kube.wait_for(lambda: kube.get("pools", NS, "spark"), until=lambda p: p["status"]["slots"] == 6,
                      what="6 slots")
        kube.create("pools", B, pool_manifest("spark", 2))
        kube.wait_for(lambda: kube.get("pools", B, "spark"), until=is_ready, what="team-b's Pool Ready")
        assert (_pool(pg_db, "team-b/spark").slots, _pool(pg_db, "team-b/spark").namespace) == (2, B)
        assert _pool(pg_db, "default/spark").slots == 6 and _pool(pg_db, "spark") is None
        kube.delete("pools", NS, "spark")
        kube.wait_for(lambda: _pool(pg_db, "default/spark"), until=lambda row: row is None, what="default's removed")
        assert _pool(pg_db, "team-b/spark").slots == 2  # team-b's is another pool: untouched
        kube.patch("pools", B, "spark", {"spec": {"slots": 3}})
        kube.wait_for(lambda: _pool(pg_db, "team-b/spark"), until=lambda row: row.slots == 3, what="team-b's resized")
        # The default pool is the platform's: a Pool object never sets it (test_operator_tenancy.py).
        kube.create("pools", NS, pool_manifest("default", 8))
        refused = kube.wait_for(lambda: kube.get("pools", NS, "default"), what="default refused",
                                until=lambda p: condition(p, "Invalid"))
        assert condition(refused, "Invalid")["reason"] == "Reserved"
        kube.delete("pools", NS, "default")
        kube.wait_gone("pools", NS, "default")
    assert _pool(pg_db, "default").slots == 128 and _pool(pg_db, "default/default") is None
