"""Objects never outlive the operator in Terminating (issue 28, item 6; docs/adr/0083).

dagline's objects carry no finalizer: deleting one while no operator runs (uninstalled, scaled to zero)
is immediate, and so is deleting their namespace. The database catches up when a replica starts (the
listing's sweep) or, while one runs, from the DELETED event. Objects an older version marked with
`dagline.io/finalizer` lose it at the next start.
"""

from __future__ import annotations

import datetime as dt

from dagline.k8s.handlers import FINALIZER
from dagline.k8s.pools import stored_pools
from dagline.store.pools import set_pool
from tests.helpers.k8s.operator_harness import (
    NS,
    backfill_manifest,
    dag_manifest,
    dag_row,
    is_ready,
    pool_manifest,
    replica,
)


def _applied(kube, namespace: str = NS) -> None:
    kube.create("dags", namespace, dag_manifest("daily"))
    kube.create("pools", namespace, pool_manifest("spark", 4))
    kube.create("backfills", namespace, backfill_manifest("march", dryRun=True))
    for plural, name in (("dags", "daily"), ("pools", "spark"), ("backfills", "march")):
        ready = kube.wait_for(lambda plural=plural, name=name: kube.get(plural, namespace, name), until=is_ready,
                              timeout=30, what=f"{plural}/{name} Ready")
        assert "finalizers" not in ready["metadata"], ready["metadata"]


def test_objects_deleted_while_no_operator_runs_are_gone_at_once_and_the_next_start_undoes_the_dag_and_pool(
        kube, run_kopf, pg_db):
    with replica(run_kopf, pg_db):
        _applied(kube)
    for plural, name in (("dags", "daily"), ("pools", "spark"), ("backfills", "march")):
        kube.delete(plural, NS, name)
        assert kube.get(plural, NS, name, missing_ok=True) is None  # gone, not Terminating
    assert dag_row(pg_db, "daily").is_active and "default/spark" in stored_pools(pg_db)  # nobody told the database yet
    with replica(run_kopf, pg_db) as runtime:
        kube.wait_for(lambda: dag_row(pg_db, "daily"), until=lambda row: not row.is_active, timeout=30,
                      what="the DAG deactivated by the sweep at start")
        assert runtime.listing.stats.dags_swept == 1
        kube.wait_for(lambda: stored_pools(pg_db), until=lambda pools: "default/spark" not in pools, timeout=30,
                      what="the Pool object's pool removed by the sweep at start")
        assert runtime.listing.stats.pools_swept == 1


def test_a_namespace_deletion_completes_without_an_operator(kube, run_kopf, pg_db):
    kube.create_namespace("team-a")
    with replica(run_kopf, pg_db, namespace=None):
        _applied(kube, "team-a")
    kube.delete("namespaces", None, "team-a")
    assert kube.get("namespaces", None, "team-a", missing_ok=True) is None
    with replica(run_kopf, pg_db, namespace=None):
        kube.wait_for(lambda: dag_row(pg_db, "team-a/daily"), until=lambda row: not row.is_active, timeout=30,
                      what="the DAG deactivated by the sweep at start")
        kube.wait_for(lambda: stored_pools(pg_db), until=lambda pools: "team-a/spark" not in pools, timeout=30,
                      what="its namespace's pool removed by the sweep at start")


def test_a_dag_deleted_while_the_operator_runs_is_deactivated_from_its_deleted_event(kube, run_kopf, pg_db):
    with replica(run_kopf, pg_db, list_interval_s=3600) as runtime:  # no listing after the one at start
        kube.create("dags", NS, dag_manifest("daily"))
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, timeout=30, what="DAG Ready")
        kube.delete("dags", NS, "daily")
        assert kube.get("dags", NS, "daily", missing_ok=True) is None
        kube.wait_for(lambda: dag_row(pg_db, "daily"), until=lambda row: not row.is_active, timeout=30,
                      what="the DAG deactivated")
        assert runtime.listing.stats.dags_swept == 0


def test_an_object_an_older_version_held_loses_its_finalizer_and_goes_at_the_next_start(kube, run_kopf, pg_db):
    with replica(run_kopf, pg_db):
        kube.create("dags", NS, dag_manifest("daily"))
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, timeout=30, what="DAG Ready")
    kube.patch("dags", NS, "daily", {"metadata": {"finalizers": [FINALIZER]}})  # as versions before ADR 83 left it
    kube.delete("dags", NS, "daily")
    assert kube.get("dags", NS, "daily")["metadata"]["deletionTimestamp"]  # Terminating: nobody removes it
    with replica(run_kopf, pg_db):
        kube.wait_gone("dags", NS, "daily", timeout=30)
        kube.wait_for(lambda: dag_row(pg_db, "daily"), until=lambda row: not row.is_active, timeout=30,
                      what="the DAG deactivated")


def test_a_pool_an_admin_handed_to_a_namespace_before_its_pool_object_exists_is_not_swept(kube, run_kopf, pg_db):
    set_pool(pg_db, "etl", 3, now=dt.datetime.now(dt.UTC), who="cli", namespace=NS)  # `pools set --namespace`
    with replica(run_kopf, pg_db) as runtime:
        kube.wait_for(lambda: runtime.listing.stats.listings, until=bool, timeout=30, what="the listing at start")
        assert stored_pools(pg_db)["default/etl"]["slots"] == 3  # waits for its Pool object, not removed
        assert runtime.listing.stats.pools_swept == 0
