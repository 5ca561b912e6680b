"""Names the database keeps in one namespace (DAGs, pools) declared in several Kubernetes namespaces,
and Pool objects: slots set, handed over to the next namespace, removed; `default` is never theirs."""

from __future__ import annotations

from sqlalchemy import select

from dagline.db.models import pool_t
from tests.helpers.k8s.operator_harness import (
    NS,
    condition,
    dag_manifest,
    dag_row,
    is_ready,
    pool_manifest,
    replica,
    task,
)


def _pool(db, name):
    with db.begin() as conn:
        return conn.execute(select(pool_t).where(pool_t.c.name == name)).first()


def test_a_dag_name_taken_in_another_namespace_is_refused_until_that_dag_is_deleted(kube, run_kopf, pg_db):
    kube.create_namespace("team-b")
    with replica(run_kopf, pg_db, namespace=None):
        kube.create("dags", NS, dag_manifest("daily"))
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="the first DAG Ready")
        other = dag_manifest("daily", tasks=[task("only")])
        kube.create("dags", "team-b", other)
        refused = kube.wait_for(lambda: kube.get("dags", "team-b", "daily"), what="the second refused",
                                until=lambda d: condition(d, "Invalid"))
        assert condition(refused, "Invalid")["reason"] == "NameTaken"
        assert "namespace 'default'" in condition(refused, "Invalid")["message"]
        events = kube.wait_for(lambda: kube.events("team-b", involving="daily"), what="a Warning Event")
        assert [(e["type"], e["reason"]) for e in events] == [("Warning", "NameTaken")]
        assert dag_row(pg_db, "daily").source_path == "k8s://default/daily"
        kube.delete("dags", NS, "daily")
        # The name is free again: the status sync applies the waiting object.
        taken = kube.wait_for(lambda: kube.get("dags", "team-b", "daily"), until=is_ready, what="taken over")
        assert taken["status"]["version"] == 2 and condition(taken, "Invalid") is None
    row = dag_row(pg_db, "daily")
    assert row.is_active and row.source_path == "k8s://team-b/daily"


def test_pool_objects_set_slots_hand_a_name_over_and_remove_the_pool(kube, run_kopf, pg_db):
    kube.create_namespace("team-b")
    with replica(run_kopf, pg_db, namespace=None):
        kube.create("pools", NS, pool_manifest("spark", 4, description="Spark jobs"))
        pool = kube.wait_for(lambda: kube.get("pools", NS, "spark"), until=is_ready, what="Pool Ready")
        assert pool["status"]["slots"] == 4 and pool["status"]["occupiedSlots"] == 0
        assert (_pool(pg_db, "spark").slots, _pool(pg_db, "spark").description) == (4, "Spark jobs")
        kube.patch("pools", NS, "spark", {"spec": {"slots": 6}})
        kube.wait_for(lambda: kube.get("pools", NS, "spark"), until=lambda p: p["status"]["slots"] == 6,
                      what="6 slots")
        assert _pool(pg_db, "spark").slots == 6
        kube.create("pools", "team-b", pool_manifest("spark", 2))
        refused = kube.wait_for(lambda: kube.get("pools", "team-b", "spark"), what="second Pool refused",
                                until=lambda p: condition(p, "Invalid"))
        assert condition(refused, "Invalid")["reason"] == "NameTaken" and _pool(pg_db, "spark").slots == 6
        kube.delete("pools", NS, "spark")
        kube.wait_for(lambda: _pool(pg_db, "spark"), until=lambda row: row is not None and row.slots == 2
                      and row.namespace == "team-b", what="handed over to team-b")
        kube.wait_for(lambda: kube.get("pools", "team-b", "spark"), until=is_ready, what="second Pool Ready")
        kube.delete("pools", "team-b", "spark")
        kube.wait_for(lambda: _pool(pg_db, "spark"), until=lambda row: row is None, what="pool removed")
        # The default pool is the platform's: a Pool object never sets it (test_operator_tenancy.py).
        kube.create("pools", NS, pool_manifest("default", 8))
        refused = kube.wait_for(lambda: kube.get("pools", NS, "default"), what="default refused",
                                until=lambda p: condition(p, "Invalid"))
        assert condition(refused, "Invalid")["reason"] == "Reserved"
        kube.delete("pools", NS, "default")
        kube.wait_gone("pools", NS, "default")
    assert _pool(pg_db, "default").slots == 128
