"""End to end on a real cluster: the Helm chart installed into kind, the example pipeline backfilled by the
spark-operator, the report read back from the data volume.

Needs Docker (a reachable daemon), `kind`, `helm`, `kubectl`, network access to pull images and the
spark-operator chart, and pytest-kind (`pip install pytest-kind`; it is imported only once the rest is
there, so it is not a dependency of the test suite). Where any is missing the whole module skips with a
one-line reason -- as on the project's build machines, which have no container engine.

What it covers that the unit and emulator tests cannot: the CRDs accepted by a real apiserver (structural
schema, defaults, printer columns), `helm install` with the hook Job migrating the database before the
Deployment starts, the chart's RBAC being enough (and not more) for the operator, and real SparkApplications.

    pytest tests/e2e -x -q                   # about 15-25 minutes on a laptop, most of it Spark
    DAGLINE_E2E_DAYS=7 pytest tests/e2e     # the example's whole week instead of its first 2 days
    DAGLINE_E2E_KEEP_CLUSTER=1 ...           # keep the kind cluster afterwards, to look around
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from tests.helpers.polling import wait_for

ROOT = pathlib.Path(__file__).resolve().parents[2]
NAMESPACE = "dataplat"
SPARK_NAMESPACE = "dataplat-spark"  # the chart's default: Spark never runs beside the database Secret
OPERATOR_IMAGE = "dagline/operator:0.1.0"
JOBS_IMAGE = "dagline/sales-daily-jobs:0.1.0"
SPARK_OPERATOR_CHART_REPO = "https://kubeflow.github.io/spark-operator"


def _why_not() -> str | None:
    """The reason this module cannot run here, or None."""
    for tool in ("docker", "kind", "helm", "kubectl"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed: the kind end-to-end test needs docker, kind, helm and kubectl"
    try:
        subprocess.run(["docker", "info"], check=True, capture_output=True, timeout=30)
    except (subprocess.SubprocessError, OSError):
        return "the Docker daemon is not reachable (`docker info` fails): kind cannot start a cluster"
    try:
        import pytest_kind  # noqa: F401
    except ImportError:
        return "pytest-kind is not installed (pip install pytest-kind)"
    return None


REASON = _why_not()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")


def run(*args: str, stdin: str | None = None, timeout: float = 900, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(args, input=stdin, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                            env={**os.environ, **(env or {})})
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result.stdout


class Cluster:
    """kubectl and helm against the kind cluster's kubeconfig."""

    def __init__(self, kubeconfig: pathlib.Path):
        self.env = {"KUBECONFIG": str(kubeconfig)}

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 300) -> str:
        return run("kubectl", *args, stdin=stdin, timeout=timeout, env=self.env)

    def helm(self, *args: str, timeout: float = 900) -> str:
        return run("helm", *args, timeout=timeout, env=self.env)

    def get(self, *args: str) -> dict[str, Any]:
        return json.loads(self.kubectl("-n", NAMESPACE, "get", *args, "-o", "json"))

    def can_i(self, verb: str, resource: str, namespace: str | None = NAMESPACE) -> bool:
        """`kubectl auth can-i` as the operator's ServiceAccount (`resource` may end in /subresource)."""
        account = f"system:serviceaccount:{NAMESPACE}:dagline"
        resource, _, subresource = resource.partition("/")
        extra = (["-n", namespace] if namespace else []) + ([f"--subresource={subresource}"] if subresource else [])
        result = subprocess.run(["kubectl", "auth", "can-i", verb, resource, f"--as={account}", *extra],
                                capture_output=True, text=True, env={**os.environ, **self.env})
        return result.stdout.strip() == "yes"


@pytest.fixture(scope="module")
def cluster():
    from pytest_kind import KindCluster

    try:
        kind = KindCluster("dagline-e2e", kind_path=pathlib.Path(shutil.which("kind")),
                           kubectl_path=pathlib.Path(shutil.which("kubectl")))
    except TypeError:  # older pytest-kind: no binary paths
        kind = KindCluster("dagline-e2e")
    kind.create()
    try:
        run("docker", "build", "-f", "operator/Dockerfile", "-t", OPERATOR_IMAGE, ".", timeout=1800)
        run("docker", "build", "-f", "examples/k8s/Dockerfile", "-t", JOBS_IMAGE, ".", timeout=1800)
        kind.load_docker_image(OPERATOR_IMAGE)
        kind.load_docker_image(JOBS_IMAGE)
        yield Cluster(kind.kubeconfig_path)
    finally:
        if not os.environ.get("DAGLINE_E2E_KEEP_CLUSTER"):
            kind.delete()


@pytest.fixture(scope="module")
def installed(cluster: Cluster) -> Cluster:
    """The spark-operator, a throwaway PostgreSQL, the Secret and the dagline chart, as examples/k8s/README.md."""
    cluster.kubectl("create", "namespace", NAMESPACE)
    cluster.kubectl("create", "namespace", SPARK_NAMESPACE)
    cluster.helm("repo", "add", "spark-operator", SPARK_OPERATOR_CHART_REPO, "--force-update")
    cluster.helm("install", "spark-operator", "spark-operator/spark-operator", "-n", "spark-operator",
                 "--create-namespace", "--set", f"spark.jobNamespaces={{{SPARK_NAMESPACE}}}", "--wait", "--timeout", "10m")
    cluster.kubectl("-n", NAMESPACE, "apply", "-f", "examples/k8s/postgres.yaml")
    cluster.kubectl("-n", NAMESPACE, "rollout", "status", "deployment/postgres", "--timeout=5m", timeout=330)
    cluster.kubectl("-n", NAMESPACE, "create", "secret", "generic", "dagline-db",
                    "--from-literal=url=postgresql://postgres:dagline@postgres:5432/postgres")
    cluster.helm("install", "dagline", "charts/dagline", "-n", NAMESPACE, "--wait", "--timeout", "10m")
    return cluster


def test_chart_installs_the_crds_and_two_ready_replicas(installed: Cluster):
    crds = json.loads(installed.kubectl("get", "crd", "-o", "json"))["items"]
    names = {crd["metadata"]["name"] for crd in crds}
    assert {"dags.dagline.io", "dagruns.dagline.io", "backfills.dagline.io", "pools.dagline.io"} <= names
    for crd in crds:
        if crd["metadata"]["name"].endswith(".dagline.io"):
            established = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
            assert established.get("Established") == "True", crd["metadata"]["name"]
            assert established.get("NonStructuralSchema") != "True", crd["metadata"]["name"]
    deployment = installed.get("deployment", "dagline")
    assert deployment["status"].get("readyReplicas") == 2
    assert installed.kubectl("-n", NAMESPACE, "get", "jobs", "-o", "name").strip() == ""  # hook Jobs cleaned up
    for crd in crds:  # the CRD upgrade hook server-side applied them (ADR 0084)
        if crd["metadata"]["name"].endswith(".dagline.io"):
            managers = {field["manager"] for field in crd["metadata"].get("managedFields", [])}
            assert "dagline" in managers, (crd["metadata"]["name"], managers)
    assert "crd-upgrade" not in installed.kubectl("get", "clusterroles", "-o", "name")  # hook account removed


def test_the_operator_account_has_exactly_the_rules_it_needs(installed: Cluster):
    for verb, resource in [("patch", "dags.dagline.io"), ("patch", "dagruns.dagline.io/status"),
                           ("create", "dagruns.dagline.io"), ("create", "events")]:
        assert installed.can_i(verb, resource), f"cannot {verb} {resource}"
    for verb, resource in [("create", "sparkapplications.sparkoperator.k8s.io"),
                           ("patch", "sparkapplications.sparkoperator.k8s.io"),
                           ("delete", "sparkapplications.sparkoperator.k8s.io"), ("create", "secrets")]:
        assert installed.can_i(verb, resource, namespace=SPARK_NAMESPACE), f"cannot {verb} {resource}"
    assert installed.can_i("get", "pods/log", namespace=SPARK_NAMESPACE)  # driver logs for the web UI (ADR 0085)
    assert installed.can_i("delete", "pods", namespace=SPARK_NAMESPACE)  # Connect tries, a streaming stop's grace
    for verb in ("get", "list", "patch", "delete"):  # the per-try Secrets are only created (owned by their application)
        assert not installed.can_i(verb, "secrets", namespace=SPARK_NAMESPACE), f"may {verb} secrets"
    assert not installed.can_i("create", "sparkapplications.sparkoperator.k8s.io")  # not beside the database
    assert installed.can_i("watch", "customresourcedefinitions.apiextensions.k8s.io", namespace=None)
    for verb, resource in [("update", "dags.dagline.io"), ("create", "dags.dagline.io"), ("get", "secrets"),
                           ("create", "pods"), ("delete", "dags.dagline.io"),
                           ("watch", "sparkapplications.sparkoperator.k8s.io")]:
        assert not installed.can_i(verb, resource), f"may {verb} {resource}: wider than the chart README says"
    assert not installed.can_i("list", "dags.dagline.io", namespace="default")


def test_apiserver_refuses_an_invalid_dag(installed: Cluster):
    document = yaml.safe_load((ROOT / "examples/k8s/dag.yaml").read_text())
    document["metadata"]["name"] = "broken"
    document["spec"]["tasks"][0]["spark"]["mainAppFile"] = "typo.py"
    with pytest.raises(AssertionError, match="mainAppFile"):
        installed.kubectl("-n", NAMESPACE, "apply", "-f", "-", stdin=json.dumps(document))


def test_backfill_of_the_example_runs_on_spark_applications(installed: Cluster):
    days = int(os.environ.get("DAGLINE_E2E_DAYS", "2"))
    installed.kubectl("-n", SPARK_NAMESPACE, "apply", "-f", "examples/k8s/data-volume.yaml")
    installed.kubectl("-n", NAMESPACE, "apply", "-f", "examples/k8s/pool.yaml", "-f", "examples/k8s/dag.yaml")
    wait_for(lambda: installed.get("dag", "sales-daily").get("status", {}).get("version"),
             "the DAG's status.version (the operator stored the DAG)", timeout=180, interval=5)

    backfill = yaml.safe_load((ROOT / "examples/k8s/backfill.yaml").read_text())
    backfill["spec"]["end"] = f"2026-03-{days:02d}"
    installed.kubectl("-n", NAMESPACE, "apply", "-f", "-", stdin=json.dumps(backfill))
    name = backfill["metadata"]["name"]

    def finished() -> dict[str, Any] | None:
        status = installed.get("backfill", name).get("status", {})
        return status if status.get("phase") in ("Succeeded", "Failed", "Cancelled", "Invalid") else None

    status = wait_for(finished, f"backfill {name} to finish", timeout=600 * days + 600, interval=15)
    assert (status["phase"], status["total"], status["succeeded"], status["failed"]) == ("Succeeded", days, days, 0)

    for day in range(1, days + 1):
        report = _read_report(installed, f"2026-03-{day:02d}")
        assert report["ds"] == f"2026-03-{day:02d}"


def _read_report(cluster: Cluster, ds: str) -> dict[str, Any]:
    """The report.json the daily_report job wrote, read by a pod that mounts the same volume."""
    pod = f"read-report-{ds}"
    manifest = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "cat", "image": "busybox:1.36",
                            "command": ["cat", f"/data/sales-daily/reports/ds={ds}/report.json"],
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "sales-daily-data"}}],
        },
    }
    cluster.kubectl("-n", SPARK_NAMESPACE, "apply", "-f", "-", stdin=json.dumps(manifest))  # beside the volume
    phase = lambda: json.loads(cluster.kubectl("-n", SPARK_NAMESPACE, "get", "pod", pod, "-o", "json"))["status"]  # noqa: E731
    wait_for(lambda: phase().get("phase") in ("Succeeded", "Failed"), f"pod {pod} to finish", timeout=300, interval=5)
    assert phase()["phase"] == "Succeeded", cluster.kubectl("-n", SPARK_NAMESPACE, "logs", pod)
    return json.loads(cluster.kubectl("-n", SPARK_NAMESPACE, "logs", pod))
