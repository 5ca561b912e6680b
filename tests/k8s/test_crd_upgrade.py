"""CRD upgrades: `python -m dagline.k8s.crds apply` (the chart's pre-upgrade hook) brings a cluster's
older CRDs up to the models with server-side apply, so a field added since is kept, not pruned."""

from __future__ import annotations

import copy

from dagline.k8s import crds
from dagline.k8s.client import load_api_client
from dagline.k8s.crd_apply import FIELD_MANAGER, apply_crds
from dagline.k8s.resources import KINDS
from tests.helpers import dags
from tests.helpers.k8s.cluster import Cluster

NS = "default"
END = "2027-01-01T00:00:00Z"


def definitions() -> list[dict]:
    return [crds.custom_resource_definition(kind) for kind in KINDS]


def older_dag_crd() -> dict:
    """The DAG CRD as an earlier release shipped it: without `spec.endDate`."""
    crd = copy.deepcopy(crds.custom_resource_definition(next(k for k in KINDS if k.kind == "DAG")))
    del crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["endDate"]
    return crd


def test_apply_upgrades_an_older_crd_so_a_new_field_survives(kube, capsys):
    kube.apply("customresourcedefinitions", None, older_dag_crd())  # as `helm upgrade` leaves it
    kube.create("dags", NS, dags.dag("before", endDate=END))
    assert "endDate" not in kube.get("dags", NS, "before")["spec"]  # pruned by the older schema

    assert crds.main(["apply"]) == 0  # what the hook Job runs, with the kubeconfig of the emulator
    printed = capsys.readouterr().out.splitlines()
    assert "customresourcedefinition.apiextensions.k8s.io/dags.dagline.io updated" in printed
    assert "customresourcedefinition.apiextensions.k8s.io/pools.dagline.io unchanged" in printed

    kube.create("dags", NS, dags.dag("after", endDate=END))
    assert kube.get("dags", NS, "after")["spec"]["endDate"] == END
    kube.patch("dags", NS, "before", {"spec": {"endDate": END}})  # an existing object takes it too
    assert kube.get("dags", NS, "before")["spec"]["endDate"] == END
    stored = kube.get("customresourcedefinitions", None, "dags.dagline.io")
    assert stored["spec"] == crds.custom_resource_definition(next(k for k in KINDS if k.kind == "DAG"))["spec"]

    # applying again changes nothing (a hook run at every upgrade is a no-op when nothing changed)
    again = apply_crds(load_api_client(), definitions())
    assert {item.outcome for item in again} == {"unchanged"} and len(again) == len(KINDS)


def test_apply_creates_missing_crds_and_a_later_apply_removes_a_field_it_no_longer_sends(tmp_path, monkeypatch):
    cluster = Cluster(tmp_path).start(crds=[])  # e.g. installed with `helm install --skip-crds`
    try:
        monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig_path))
        api_client = load_api_client()
        assert {item.outcome for item in apply_crds(api_client, definitions())} == {"created"}
        names = {c["metadata"]["name"] for c in cluster.list("customresourcedefinitions")}
        assert names == {f"{kind.plural}.dagline.io" for kind in KINDS}
        cluster.create("dags", NS, dags.dag("sales", endDate=END))  # the kinds are served at once
        assert cluster.get("dags", NS, "sales")["spec"]["endDate"] == END

        # a field this manager applied earlier and no longer applies is removed (server-side apply's field
        # ownership), where a merge patch would keep it
        def apply_with_a_label(em):
            res = em.resource_named("customresourcedefinitions")
            body = crds.custom_resource_definition(next(k for k in KINDS if k.kind == "Pool"))
            body["metadata"]["labels"] = {"dagline.io/stale": "yes"}
            em.server_side_apply(res, None, "pools.dagline.io", body, FIELD_MANAGER)
        cluster.call(apply_with_a_label)
        assert cluster.get("customresourcedefinitions", None, "pools.dagline.io")["metadata"]["labels"]
        outcomes = {item.name: item.outcome for item in apply_crds(api_client, definitions())}
        assert outcomes == {**dict.fromkeys(outcomes, "unchanged"), "pools.dagline.io": "updated"}
        assert "labels" not in cluster.get("customresourcedefinitions", None, "pools.dagline.io")["metadata"]
    finally:
        cluster.stop()
