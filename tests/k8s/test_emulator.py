"""The test infrastructure holds what the Kubernetes API promises: kopf and the kubernetes client work against it.

If these fail, every controller and executor test built on `kube` is suspect, so they check the
behaviour those tests rely on: resource versions and conflicts, generations, status subresource,
finalizers, garbage collection, selectors, watch resumption, and real kopf handling objects once.
"""

from __future__ import annotations

import threading
import urllib.request

import kopf
import pytest

from tests.helpers import dags
from tests.helpers.k8s.cluster import KubeApiError
from tests.helpers.k8s.spark_operator import Behaviour, SparkOperator

NS = "default"


def dag(name: str, **meta) -> dict:
    return dags.dag(name, dags.task("ingest"), schedule="@daily", metadata=meta)


def dagrun(name: str | None = None, **meta) -> dict:
    meta = {"name": name, **meta} if name else meta
    return {"apiVersion": "dagline.io/v1alpha1", "kind": "DagRun", "metadata": meta, "spec": {"dag": "sales"}}


# ------------------------------------------------------------------------------------------- kopf


class Recorder:
    """Handlers for DAGs that record what they saw, in a fresh registry."""

    def __init__(self):
        self.registry = kopf.OperatorRegistry()
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.lock = threading.Lock()

        @kopf.on.create("dagline.io", "v1alpha1", "dags", registry=self.registry)
        def on_create(name, patch, **_):
            with self.lock:
                self.created.append(name)
            patch.status["lastRunState"] = "created"  # a field the CRD's status schema declares

        @kopf.on.delete("dagline.io", "v1alpha1", "dags", registry=self.registry)
        def on_delete(name, **_):
            with self.lock:
                self.deleted.append(name)


@pytest.mark.parametrize("scope", [NS, None], ids=["namespaced", "clusterwide"])
def test_kopf_creates_patches_status_and_finalizes_a_delete(kube, run_kopf, scope):
    rec = Recorder()
    with run_kopf(rec.registry, scope) as run:
        kube.create("dags", NS, dag("sales"))
        obj = kube.wait_for(lambda: kube.get("dags", NS, "sales"),
                            until=lambda o: (o.get("status") or {}).get("lastRunState") == "created")
        assert "kopf.zalando.org/KopfFinalizerMarker" in obj["metadata"]["finalizers"]

        kube.delete("dags", NS, "sales")
        kube.wait_gone("dags", NS, "sales")
        assert rec.deleted == ["sales"]
    assert rec.created == ["sales"]
    assert run.started_in < 5 and run.stopped_in < 3, (run.started_in, run.stopped_in)


def test_kopf_handles_an_object_that_existed_before_it_started_once(kube, run_kopf):
    kube.create("dags", NS, dag("old"))
    rec = Recorder()
    with run_kopf(rec.registry, NS):
        kube.wait_for(lambda: kube.get("dags", NS, "old"), until=lambda o: (o.get("status") or {}).get("lastRunState"))
        kube.create("dags", NS, dag("new"))
        kube.wait_for(lambda: kube.get("dags", NS, "new"), until=lambda o: (o.get("status") or {}).get("lastRunState"))
    assert sorted(rec.created) == ["new", "old"]


def test_kopf_posts_events_with_generated_names(kube, run_kopf):
    registry = kopf.OperatorRegistry()

    @kopf.on.create("dagline.io", "v1alpha1", "dags", registry=registry)
    def reject(body, **_):
        kopf.info(body, reason="Checking", message="validating the spec")
        kopf.warn(body, reason="Invalid", message="spec.tasks: at least one task")
        raise kopf.PermanentError("spec.tasks: at least one task")

    with run_kopf(registry, NS):
        kube.create("dags", NS, dag("empty"))
        events = kube.wait_for(lambda: kube.events(NS, involving="empty"), until=lambda es: len(es) >= 2)
    reasons = [(e["reason"], e["type"]) for e in events]
    assert reasons == [("Checking", "Normal"), ("Invalid", "Warning")]
    assert all(e["metadata"]["name"].startswith("kopf-event-") and len(e["metadata"]["name"]) > len("kopf-event-")
               for e in events)
    assert len({e["metadata"]["name"] for e in events}) == len(events)


def test_kopf_stops_even_while_a_handler_is_retrying(kube, run_kopf):
    registry = kopf.OperatorRegistry()
    attempts = []

    @kopf.on.create("dagline.io", "v1alpha1", "dags", registry=registry)
    def flaky(**_):
        attempts.append(1)
        raise kopf.TemporaryError("not yet", delay=60)

    with run_kopf(registry, NS) as run:
        kube.create("dags", NS, dag("slow"))
        kube.wait_for(lambda: attempts)
    assert run.stopped_in < 3


# ----------------------------------------------------------------------------- API semantics


def test_create_stamps_metadata_and_answers_201(kube):
    created = kube.request("POST", kube.resource("dags").path(NS), dag("a"))
    meta = created["metadata"]
    assert meta["namespace"] == NS and meta["generation"] == 1 and meta["uid"] and meta["creationTimestamp"]
    with pytest.raises(KubeApiError) as exc:
        kube.create("dags", NS, dag("a"))
    assert exc.value.status == 409 and exc.value.body["reason"] == "AlreadyExists"
    with pytest.raises(KubeApiError) as exc:
        kube.get("dags", NS, "missing")
    assert exc.value.status == 404


def test_generate_name_gives_distinct_valid_names(kube):
    names = {kube.create("dagruns", NS, dagrun(generateName="sales-"))["metadata"]["name"]
             for _ in range(20)}
    assert len(names) == 20 and all(n.startswith("sales-") and len(n) == len("sales-") + 5 for n in names)


def test_invalid_names_and_labels_are_rejected_and_nothing_is_stored(kube):
    for body in (dag("Bad_Name"), dag("ok", labels={"dagline.io/run": "scheduled__2026-01-01T00:00:00+00:00"})):
        with pytest.raises(KubeApiError) as exc:
            kube.create("dags", NS, body)
        assert exc.value.status == 422 and exc.value.body["reason"] == "Invalid"
    assert kube.list("dags", NS) == []


def test_resource_version_guards_writes(kube):
    first = kube.create("dags", NS, dag("a"))
    rv = first["metadata"]["resourceVersion"]
    second = kube.patch("dags", NS, "a", {"metadata": {"labels": {"x": "1"}}})
    assert int(second["metadata"]["resourceVersion"]) > int(rv)
    with pytest.raises(KubeApiError) as exc:  # a merge patch carrying a stale resourceVersion
        kube.patch("dags", NS, "a", {"metadata": {"resourceVersion": rv, "labels": {"x": "2"}}})
    assert exc.value.status == 409
    with pytest.raises(KubeApiError) as exc:  # a PUT of a stale copy
        kube.replace("dags", NS, "a", first)
    assert exc.value.status == 409
    with pytest.raises(KubeApiError) as exc:  # kopf's JSON patch with a `test` of the version
        kube.patch("dags", NS, "a", [{"op": "test", "path": "/metadata/resourceVersion", "value": rv},
                                     {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}])
    assert exc.value.status == 422
    assert kube.get("dags", NS, "a")["metadata"]["labels"] == {"x": "1"}
    unchanged = kube.patch("dags", NS, "a", {"metadata": {"labels": {"x": "1"}}})
    assert unchanged["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]


def test_the_crd_schema_prunes_unknown_fields_defaults_and_rejects_invalid_specs(kube):
    body = dag("a")
    body["spec"]["colour"] = "blue"  # not in the schema: dropped, as a real API server does
    created = kube.create("dags", NS, body)
    assert "colour" not in created["spec"]
    assert created["spec"]["timezone"] == "UTC"  # the schema's default
    kube.patch_status("dags", NS, "a", {"version": 1, "kopf": {"progress": {}}})  # kopf's progress: not declared
    assert kube.get("dags", NS, "a")["status"] == {"version": 1}
    bad = dag("b")
    bad["spec"]["tasks"][0]["retries"] = "three"
    del bad["spec"]["tasks"][0]["spark"]
    with pytest.raises(KubeApiError) as exc:
        kube.create("dags", NS, bad)
    fields = {c["field"] for c in exc.value.body["details"]["causes"]}
    assert {"spec.tasks[0].retries", "spec.tasks[0].spark"} <= fields
    with pytest.raises(KubeApiError) as exc:
        kube.patch("pools", NS, "a", {"spec": {"slots": 1}})
    assert exc.value.status == 404
    kube.create("pools", NS, {"metadata": {"name": "p"}, "spec": {"slots": 2}})
    with pytest.raises(KubeApiError) as exc:
        kube.patch("pools", NS, "p", {"spec": {"slots": "many"}})
    assert exc.value.status == 422 and kube.get("pools", NS, "p")["spec"]["slots"] == 2


def test_generation_follows_spec_not_status_or_metadata(kube):
    kube.create("dags", NS, dag("a"))
    assert kube.patch_status("dags", NS, "a", {"version": 1})["metadata"]["generation"] == 1
    assert kube.patch("dags", NS, "a", {"metadata": {"annotations": {"a": "b"}}})["metadata"]["generation"] == 1
    assert kube.patch("dags", NS, "a", {"spec": {"schedule": "@hourly"}})["metadata"]["generation"] == 2
    current = kube.get("dags", NS, "a")
    current["spec"]["schedule"] = "@weekly"
    assert kube.replace("dags", NS, "a", current)["metadata"]["generation"] == 3


def test_status_subresource_separates_status_from_the_rest(kube):
    body = dict(dag("a"), status={"version": 9})
    assert "status" not in kube.create("dags", NS, body)
    kube.patch_status("dags", NS, "a", {"version": 1})
    after = kube.patch("dags", NS, "a", {"spec": {"schedule": "@hourly"}, "status": {"version": 2}})
    assert after["status"] == {"version": 1} and after["spec"]["schedule"] == "@hourly"
    via_status = kube.request("PATCH", kube.resource("dags").path(NS, "a", "status"),
                              {"spec": {"schedule": "@weekly"}, "status": {"version": 3}},
                              content_type="application/merge-patch+json")
    assert via_status["status"] == {"version": 3} and via_status["spec"]["schedule"] == "@hourly"


def test_finalizers_hold_a_deletion_until_removed(kube):
    kube.create("dags", NS, dag("a", finalizers=["dagline.io/cleanup"]))
    marked = kube.delete("dags", NS, "a")
    assert marked["metadata"]["deletionTimestamp"]
    assert kube.get("dags", NS, "a")["metadata"]["deletionTimestamp"]
    with pytest.raises(KubeApiError) as exc:
        kube.patch("dags", NS, "a", {"metadata": {"finalizers": ["dagline.io/cleanup", "new"]}})
    assert exc.value.status == 422
    kube.patch("dags", NS, "a", {"metadata": {"finalizers": None}})
    assert kube.get("dags", NS, "a", missing_ok=True) is None
    assert kube.history("dags", NS, "a")[-1] is None


def test_a_namespace_deletion_deletes_its_objects_and_waits_for_their_finalizers(kube):
    kube.create_namespace("team-a")
    kube.create("dags", "team-a", dag("free"))
    kube.create("dags", "team-a", dag("held", finalizers=["dagline.io/finalizer"]))
    kube.delete("namespaces", None, "team-a")
    terminating = kube.get("namespaces", None, "team-a")
    assert terminating["status"]["phase"] == "Terminating" and terminating["metadata"]["deletionTimestamp"]
    assert kube.get("dags", "team-a", "free", missing_ok=True) is None
    assert kube.get("dags", "team-a", "held")["metadata"]["deletionTimestamp"]  # held by its finalizer
    with pytest.raises(KubeApiError) as exc:
        kube.create("dags", "team-a", dag("new"))
    assert exc.value.status == 403 and "being terminated" in str(exc.value)
    kube.patch("dags", "team-a", "held", {"metadata": {"finalizers": None}})
    assert kube.get("namespaces", None, "team-a", missing_ok=True) is None  # the last object went: so does it


def test_a_frozen_watch_gets_nothing_and_a_new_one_catches_up(kube):
    since = kube.create("dags", NS, dag("a"))["metadata"]["resourceVersion"]
    kube.call(lambda em: em.freeze_watches("dags", new_ones=True))
    kube.create("dags", NS, dag("b"))
    url = kube.url + kube.resource("dags").path(NS) + f"?watch=true&resourceVersion={since}&timeoutSeconds=1"
    with urllib.request.urlopen(url, timeout=2) as frozen, pytest.raises(TimeoutError):
        frozen.read()  # nothing comes, and the stream does not end at its timeoutSeconds either
    kube.call(lambda em: em.thaw_watches())
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in kube.watch("dags", NS, resource_version=since)] == [
        ("ADDED", "b")]


def test_deleting_an_owner_deletes_its_dependents(kube):
    owner = kube.create("dags", NS, dag("owner"))
    ref = {"apiVersion": "dagline.io/v1alpha1", "kind": "DAG", "name": "owner", "uid": owner["metadata"]["uid"]}
    kube.create("dagruns", NS, dagrun("run-1", ownerReferences=[ref]))
    kube.create("sparkapplications", NS, {"metadata": {"name": "app-1", "ownerReferences": [ref]}, "spec": {}})
    kube.create("dagruns", NS, dagrun("unrelated"))
    kube.delete("dags", NS, "owner")
    assert [r["metadata"]["name"] for r in kube.list("dagruns", NS)] == ["unrelated"]
    assert kube.list("sparkapplications", NS) == []


def test_orphan_propagation_keeps_dependents(kube):
    owner = kube.create("dags", NS, dag("owner"))
    ref = {"apiVersion": "dagline.io/v1alpha1", "kind": "DAG", "name": "owner", "uid": owner["metadata"]["uid"]}
    kube.create("dagruns", NS, dagrun("run-1", ownerReferences=[ref]))
    kube.delete("dags", NS, "owner", propagation_policy="Orphan")
    assert "ownerReferences" not in kube.get("dagruns", NS, "run-1")["metadata"]


def test_label_and_field_selectors(kube):
    for name, labels in (("a", {"dagline.io/dag": "sales", "tier": "1"}), ("b", {"dagline.io/dag": "sales"}),
                         ("c", {"dagline.io/dag": "other"})):
        kube.create("dagruns", NS, dagrun(name, labels=labels))

    def names(**kw):
        return [o["metadata"]["name"] for o in kube.list("dagruns", NS, **kw)]
    assert names(label_selector="dagline.io/dag=sales") == ["a", "b"]
    assert names(label_selector="dagline.io/dag=sales,tier") == ["a"]
    assert names(label_selector="dagline.io/dag=sales,!tier") == ["b"]
    assert names(label_selector="dagline.io/dag in (sales, other),tier!=1") == ["b", "c"]
    assert names(field_selector="metadata.name=c") == ["c"]


def test_watches_resume_after_a_resource_version_and_follow_selectors(kube):
    rv = kube.create("dagruns", NS, dagrun("a", labels={"tier": "1"}))["metadata"]["resourceVersion"]
    kube.create("dagruns", NS, dagrun("b", labels={"tier": "2"}))
    kube.patch("dagruns", NS, "a", {"metadata": {"labels": {"tier": "2"}}})
    kube.patch("dagruns", NS, "b", {"metadata": {"labels": {"tier": "1"}}})
    kube.delete("dagruns", NS, "b")

    def seen(events):
        return [(e["type"], e["object"]["metadata"]["name"]) for e in events]
    assert seen(kube.watch("dagruns", NS, seconds=0.1)) == [("ADDED", "a")]  # from now: the objects as they are
    assert seen(kube.watch("dagruns", NS, resource_version=rv, seconds=0.1)) == [
        ("ADDED", "b"), ("MODIFIED", "a"), ("MODIFIED", "b"), ("DELETED", "b")]
    assert seen(kube.watch("dagruns", NS, resource_version=rv, label_selector="tier=1", seconds=0.1)) == [
        ("DELETED", "a"), ("ADDED", "b"), ("DELETED", "b")]  # leaving and entering the selector
    kube.call(lambda em: em.compact())
    [expired] = kube.watch("dagruns", NS, resource_version=rv)
    assert expired["type"] == "ERROR" and expired["object"]["code"] == 410


def test_lists_carry_kind_and_paginate(kube):
    for i in range(5):
        kube.create("pools", NS, {"metadata": {"name": f"p{i}"}, "spec": {"slots": 1}})
    path = kube.resource("pools").path(NS)
    page = kube.request("GET", path, params={"limit": "2"})
    assert page["kind"] == "PoolList" and page["apiVersion"] == "dagline.io/v1alpha1"
    seen = [o["metadata"]["name"] for o in page["items"]]
    while page["metadata"].get("continue"):
        page = kube.request("GET", path, params={"limit": "2", "continue": page["metadata"]["continue"]})
        seen += [o["metadata"]["name"] for o in page["items"]]
    assert seen == ["p0", "p1", "p2", "p3", "p4"]


def test_crds_are_listed_and_a_new_crd_is_served(kube):
    names = {c["metadata"]["name"] for c in kube.list("customresourcedefinitions")}
    assert {"dags.dagline.io", "dagruns.dagline.io", "sparkapplications.sparkoperator.k8s.io"} <= names
    kube.create("customresourcedefinitions", None, {
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "kind": "Widget", "singular": "widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True}]}})
    assert kube.create("widgets", NS, {"metadata": {"name": "w"}})["kind"] == "Widget"
    resources = kube.request("GET", "/apis/example.com/v1")["resources"]
    assert [r["name"] for r in resources] == ["widgets"]


# -------------------------------------------------------------------------- the kubernetes client


def test_the_kubernetes_client_works_through_the_kubeconfig(kube):
    from kubernetes import client, config

    config.load_kube_config()
    api = client.CustomObjectsApi()
    api.create_namespaced_custom_object("sparkoperator.k8s.io", "v1beta2", NS, "sparkapplications",
                                        {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
                                         "metadata": {"name": "app", "labels": {"dagline.io/try": "1"}},
                                         "spec": {"type": "Python"}})
    api.patch_namespaced_custom_object_status("sparkoperator.k8s.io", "v1beta2", NS, "sparkapplications", "app",
                                              {"status": {"applicationState": {"state": "RUNNING"}}})
    listed = api.list_namespaced_custom_object("sparkoperator.k8s.io", "v1beta2", NS, "sparkapplications",
                                               label_selector="dagline.io/try=1")
    assert [i["status"]["applicationState"]["state"] for i in listed["items"]] == ["RUNNING"]
    with pytest.raises(client.ApiException) as exc:
        api.get_namespaced_custom_object("sparkoperator.k8s.io", "v1beta2", NS, "sparkapplications", "nope")
    assert exc.value.status == 404
    core = client.CoreV1Api()
    core.create_namespaced_event(NS, client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name="x-"), involved_object=client.V1ObjectReference(name="app"),
        reason="Test", message="m", type="Normal"))
    assert [e.reason for e in core.list_namespaced_event(NS).items] == ["Test"]


# ------------------------------------------------------------------------ the spark-operator stand-in


def spark_app(name: str, labels: dict | None = None, **spec) -> dict:
    return {"apiVersion": "sparkoperator.k8s.io/v1beta2", "kind": "SparkApplication",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"type": "Python", "mode": "cluster", "mainApplicationFile": "local:///jobs/job.py", **spec}}


def states(kube, name: str) -> list[str]:
    """Every state the application's status went through, in order, without repeats."""
    seen = []
    for version in kube.history("sparkapplications", NS, name):
        state = ((version or {}).get("status") or {}).get("applicationState", {}).get("state")
        if state and (not seen or seen[-1] != state):
            seen.append(state)
    return seen


def final_state(kube, name: str, timeout: float = 5.0) -> dict:
    return kube.wait_for(lambda: kube.get("sparkapplications", NS, name), timeout,
                         until=lambda o: (o.get("status") or {}).get("applicationState", {}).get("state")
                         in ("COMPLETED", "FAILED", "SUBMISSION_FAILED"))["status"]


def test_instant_mode_completes_an_application_through_the_operator_states(kube, spark_operator):
    kube.create("sparkapplications", NS, spark_app("sales-ingest-1"))
    status = final_state(kube, "sales-ingest-1")
    assert states(kube, "sales-ingest-1") == ["SUBMITTED", "RUNNING", "SUCCEEDING", "COMPLETED"]
    assert status["submissionAttempts"] == 1 and status["executionAttempts"] == 1
    assert status["driverInfo"]["podName"] == "sales-ingest-1-driver"
    assert status["sparkApplicationId"] and status["terminationTime"] and status["lastSubmissionAttemptTime"]
    assert [s.name for s in spark_operator.submissions] == ["sales-ingest-1"]


def test_script_rules_fail_hang_or_reject_chosen_applications(kube, spark_operator):
    spark_operator.on({"dagline.io/try": "1"}, Behaviour.fail("java.lang.OutOfMemoryError: heap"), times=1)
    spark_operator.on("stuck-*", Behaviour.hang())
    spark_operator.on("denied", Behaviour.reject("quota exceeded"))
    kube.create("sparkapplications", NS, spark_app("job-try-1", {"dagline.io/try": "1"}))
    kube.create("sparkapplications", NS, spark_app("job-try-1b", {"dagline.io/try": "1"}))
    kube.create("sparkapplications", NS, spark_app("stuck-1"))
    kube.create("sparkapplications", NS, spark_app("denied"))

    failed = final_state(kube, "job-try-1")
    assert failed["applicationState"] == {"state": "FAILED", "errorMessage": "java.lang.OutOfMemoryError: heap"}
    assert states(kube, "job-try-1") == ["SUBMITTED", "RUNNING", "FAILING", "FAILED"]
    assert final_state(kube, "job-try-1b")["applicationState"]["state"] == "COMPLETED"  # `times=1` is used up
    rejected = final_state(kube, "denied")
    assert rejected["applicationState"] == {"state": "SUBMISSION_FAILED", "errorMessage": "quota exceeded"}
    assert states(kube, "stuck-1") == ["SUBMITTED"]


def test_a_slow_application_runs_until_deleted_and_is_submitted_once(kube, spark_operator):
    spark_operator.on("slow", Behaviour.slow(60))
    kube.create("sparkapplications", NS, spark_app("slow"))
    kube.wait_for(lambda: states(kube, "slow") == ["SUBMITTED", "RUNNING"])
    kube.delete("sparkapplications", NS, "slow")
    kube.wait_gone("sparkapplications", NS, "slow")
    assert len(spark_operator.submissions_of("slow")) == 1


def test_restart_policy_reruns_a_failed_application(kube, spark_operator):
    spark_operator.on("flaky", Behaviour.fail("boom"), times=1)
    kube.create("sparkapplications", NS, spark_app("flaky", restartPolicy={"type": "OnFailure", "onFailureRetries": 1}))
    status = final_state(kube, "flaky")
    assert status["applicationState"] == {"state": "COMPLETED"}
    assert status["executionAttempts"] == 2
    assert states(kube, "flaky") == ["SUBMITTED", "RUNNING", "FAILING", "PENDING_RERUN", "SUBMITTED", "RUNNING",
                                     "SUCCEEDING", "COMPLETED"]


def test_a_spec_change_invalidates_and_reruns(kube, spark_operator):
    spark_operator.on("changing", Behaviour.hang("RUNNING"), times=1)
    kube.create("sparkapplications", NS, spark_app("changing"))
    kube.wait_for(lambda: states(kube, "changing") == ["SUBMITTED", "RUNNING"])
    kube.patch("sparkapplications", NS, "changing", {"spec": {"arguments": ["--ds", "2026-01-02"]}})
    final_state(kube, "changing")
    assert states(kube, "changing")[2:] == ["INVALIDATING", "PENDING_RERUN", "SUBMITTED", "RUNNING", "SUCCEEDING",
                                            "COMPLETED"]
    assert [s.spec.get("arguments") for s in spark_operator.submissions_of("changing")] == [None, ["--ds", "2026-01-02"]]


def test_applications_that_already_have_a_state_are_left_alone(kube):
    kube.create("sparkapplications", NS, spark_app("done"))
    kube.patch_status("sparkapplications", NS, "done", {"applicationState": {"state": "COMPLETED"}})
    operator = SparkOperator(kube).start()
    try:
        kube.create("sparkapplications", NS, spark_app("new"))
        final_state(kube, "new")
    finally:
        operator.stop()
    assert [s.name for s in operator.submissions] == ["new"]


@pytest.mark.spark
def test_pyspark_mode_runs_the_main_file_with_arguments_and_conf(kube, spark_operator, tmp_path):
    (tmp_path / "count.py").write_text(
        "import sys\n"
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "n = spark.range(int(sys.argv[2])).count()\n"
        "open(sys.argv[1], 'w').write(f\"{n} {spark.conf.get('spark.dagline.marker')}\")\n"
        "spark.stop()\n")
    (tmp_path / "broken.py").write_text("raise SystemExit('input partition ds=2026-01-01 is missing')\n")
    spark_operator.mode = "pyspark"
    kube.create("sparkapplications", NS, spark_app(
        "count", mainApplicationFile=f"local://{tmp_path}/count.py", arguments=[str(tmp_path / "out.txt"), "7"],
        sparkConf={"spark.dagline.marker": "m1"}))
    kube.create("sparkapplications", NS, spark_app("broken", mainApplicationFile="broken.py"))
    assert final_state(kube, "count", timeout=120)["applicationState"] == {"state": "COMPLETED"}
    assert (tmp_path / "out.txt").read_text() == "7 m1"
    failed = final_state(kube, "broken", timeout=120)["applicationState"]
    assert failed["state"] == "FAILED" and failed["errorMessage"].endswith("input partition ds=2026-01-01 is missing")


def test_run_kopf_refuses_a_namespace_kopf_could_never_watch(kube, run_kopf):
    with pytest.raises(RuntimeError, match="kube.create_namespace"):
        with run_kopf(Recorder().registry, "team-a"):
            pass
    kube.create_namespace("team-a")
    rec = Recorder()
    with run_kopf(rec.registry, "team-a"):
        kube.create("dags", "team-a", dag("x"))
        kube.wait_for(lambda: rec.created)
    assert rec.created == ["x"]
