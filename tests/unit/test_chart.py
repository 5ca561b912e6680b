"""The Helm chart `charts/dagline`, checked with the real `helm` (v3.17.1, fetched pinned by version and
checksum by tests/tools/fetch_k8s_tools.py): `helm lint --strict` and `helm template` with the default values
and the values files in tests/unit/chart_values/ (a production install, one operator for all namespaces,
identities and migrations left to the platform). The rendered objects are parsed and checked -- kinds,
names, ports, env vars, probes, the migration hook, RBAC granting exactly the verbs the operator uses
(a widened rule fails here) -- and each one is validated against the Kubernetes 1.30 OpenAPI schemas
(strict: an unknown field is an error) that the `kubernetes-validate` package ships.
What only a cluster can check (hook ordering, CRD installation, the pods starting) is tests/e2e/.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import os
import pathlib
import re
import shutil
import subprocess
import tarfile
import tempfile
import tomllib
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.tools.fetch_k8s_tools import CACHE, ensure_helm

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dagline"
VALUES = pathlib.Path(__file__).resolve().parent / "chart_values"
VALUES_FILES = sorted(path.name for path in VALUES.glob("*.yaml"))
RELEASE, NAMESPACE = "dagline", "dataplat"
KUBERNETES_VERSION = "1.30.0"  # the Kubernetes the chart targets (the kubectl beside helm in its package)

# --- the real helm ---------------------------------------------------------------------------------


@functools.cache
def helm_binary() -> pathlib.Path:
    return ensure_helm()


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run helm with its own config, cache and data folders (never the user's), and no cluster."""
    home = CACHE / "helm-home"
    env = {**os.environ, "HELM_CACHE_HOME": str(home / "cache"), "HELM_CONFIG_HOME": str(home / "config"),
           "HELM_DATA_HOME": str(home / "data"), "KUBECONFIG": os.devnull}
    result = subprocess.run([str(helm_binary()), *args], capture_output=True, text=True, env=env, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def _values_args(values_files: tuple[str, ...], overrides: dict | None, tmp: pathlib.Path | None) -> list[str]:
    args = [arg for name in values_files for arg in ("--values", str(VALUES / name))]
    if overrides:
        path = tmp / "overrides.yaml"
        path.write_text(yaml.safe_dump(overrides))
        args += ["--values", str(path)]
    return args


def render_chart(overrides: dict[str, Any] | None = None, *, values_files: tuple[str, ...] = (),
                 release: str = RELEASE, chart: pathlib.Path = CHART, include_crds: bool = False) -> list[dict]:
    """The objects `helm template` renders (values files first, then `overrides`), parsed."""
    with _scratch() as tmp:
        out = helm("template", release, str(chart), "--namespace", NAMESPACE,
                   *_values_args(values_files, overrides, tmp), *(["--include-crds"] if include_crds else [])).stdout
    manifests = [doc for doc in yaml.safe_load_all(out) if doc is not None]
    for manifest in manifests:
        assert isinstance(manifest, dict) and {"apiVersion", "kind", "metadata"} <= manifest.keys(), manifest
    return manifests


def render_notes(overrides: dict[str, Any] | None = None) -> str:
    """NOTES.txt as helm renders it. `helm template` leaves NOTES.txt out and `helm install --dry-run`
    needs a cluster, so a copy of the chart defines NOTES.txt's text as a named template and a ConfigMap
    holds what it renders to."""
    with _scratch() as tmp:
        chart = tmp / "dagline"
        shutil.copytree(CHART, chart)
        notes = (chart / "templates" / "NOTES.txt").read_text()
        (chart / "templates" / "_notes_for_test.tpl").write_text(f'{{{{- define "notes" -}}}}{notes}{{{{- end -}}}}')
        (chart / "templates" / "notes-for-test.yaml").write_text(
            'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n  notes: {{ include "notes" . | quote }}\n')
        out = helm("template", RELEASE, str(chart), "--namespace", NAMESPACE,
                   *_values_args((), overrides, tmp), "--show-only", "templates/notes-for-test.yaml").stdout
    return yaml.safe_load(out)["data"]["notes"]


@contextlib.contextmanager
def _scratch():
    """A temporary folder for values files and chart copies, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="dagline-chart-") as folder:
        yield pathlib.Path(folder)


def default_values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def one(manifests: list[dict], kind: str, name: str | None = None) -> dict:
    """The one object of this kind (and name); without a name, the CRD upgrade hook's own are left aside."""
    found = [m for m in manifests if m["kind"] == kind and (
        m["metadata"]["name"] == name if name is not None else not m["metadata"]["name"].endswith("-crd-upgrade"))]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def container_env(container: dict) -> dict[str, Any]:
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


# --- Chart.yaml, values.yaml, CRDs -----------------------------------------------------------------


def test_chart_metadata():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert (chart["apiVersion"], chart["name"], chart["type"]) == ("v2", "dagline", "application")
    assert chart["appVersion"] == project["version"]  # the image tag defaults to it
    assert re.fullmatch(r"\d+\.\d+\.\d+", chart["version"])


def _leaf_keys(values: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key, value in values.items():
        if isinstance(value, dict) and value and key not in ("annotations", "resources", "podSecurityContext",
                                                              "securityContext"):
            keys += _leaf_keys(value, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys


def test_values_hold_the_documented_defaults():
    values = default_values()
    assert values["replicaCount"] == 2
    assert values["database"] == {"secretName": "dagline-db", "secretKey": "url"}
    assert values["health"]["port"] == 8080 and values["metrics"]["port"] == 9090
    assert values["dagrunHistoryLimit"] == 50
    assert set(values["spark"]) == {"namespace", "createNamespace", "image", "version", "serviceAccount",
                                    "pendingTimeout", "pickupTimeout", "preflightInterval", "retention",
                                    "keepFinished", "allowedConf", "podSecurity", "connect"}
    assert values["spark"]["connect"]["image"] == "" and values["spark"]["connect"]["idleTimeout"] == "PT30M"
    assert values["spark"]["allowedConf"] == [] and values["callbacks"]["allowedNetworks"] == []  # nothing widened
    assert values["spark"]["retention"] in ("delete", "keep", "delete-succeeded")
    assert values["podSecurityContext"]["runAsNonRoot"] is True
    readme = (CHART / "README.md").read_text()
    undocumented = [key for key in _leaf_keys(values) if f"`{key}`" not in readme]
    assert undocumented == [], "values missing from charts/dagline/README.md"


def test_chart_crds_are_the_generated_ones():
    generated = sorted(path.name for path in (ROOT / "crds").glob("*.yaml"))
    assert generated == sorted(path.name for path in (CHART / "crds").glob("*.yaml"))
    assert len(generated) == 4
    for name in generated:
        assert (CHART / "crds" / name).read_bytes() == (ROOT / "crds" / name).read_bytes(), (
            f"charts/dagline/crds/{name} differs from crds/{name}: run `make crds`")


# --- rendering -------------------------------------------------------------------------------------


@pytest.mark.parametrize("values_file", [None, *VALUES_FILES])
def test_helm_lint_strict_passes(values_file):
    """`--strict`: lint warnings are errors, and a template naming a value that does not exist fails."""
    result = helm("lint", "--strict", str(CHART), "--namespace", NAMESPACE,
                  *(["--values", str(VALUES / values_file)] if values_file else []))
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def values_named_by(text: str) -> set[str]:
    return {match.group(1) for match in re.finditer(r"\.Values((?:\.[A-Za-z0-9_]+)+)", text)}


def test_every_value_a_template_names_is_in_values_yaml():
    """Helm renders a misspelt `.Values.spark.imge` as nothing, even under `lint --strict`: every value
    path a template names must exist in values.yaml, so that a typo fails here."""

    def exists(path: str) -> bool:
        node: Any = default_values()
        for key in path.strip(".").split("."):
            if not isinstance(node, dict) or key not in node:
                return False
            node = node[key]
        return True

    named = set().union(*(values_named_by(path.read_text()) for path in (CHART / "templates").rglob("*") if path.is_file()))
    assert len(named) > 30
    assert sorted(path for path in named if not exists(path)) == []
    assert not exists(".spark.imge") and values_named_by("{{ .Values.spark.imge | quote }}") == {".spark.imge"}


@pytest.mark.parametrize("values_file", [None, *VALUES_FILES])
def test_rendered_objects_are_valid_kubernetes_objects(values_file):
    """Every rendered object against the Kubernetes OpenAPI schema of its kind (strict: no unknown field)."""
    manifests = render_chart(values_files=(values_file,) if values_file else ())
    assert manifests
    for manifest in manifests:
        try:
            kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{manifest['kind']} {manifest['metadata']['name']}: {exc.message} "
                                 f"at {'.'.join(map(str, exc.path))}") from None


def test_the_chart_installs_the_generated_crds():
    crds = [m for m in render_chart(include_crds=True) if m["kind"] == "CustomResourceDefinition"]
    generated = [yaml.safe_load(path.read_text()) for path in sorted((ROOT / "crds").glob("*.yaml"))]
    assert sorted(crds, key=lambda c: c["metadata"]["name"]) == sorted(generated, key=lambda c: c["metadata"]["name"])
    for crd in crds:
        kubernetes_validate.validate(crd, KUBERNETES_VERSION, strict=True)


def test_templates_render_the_expected_objects():
    manifests = render_chart()
    kinds = sorted((m["kind"], m["metadata"]["name"]) for m in manifests)
    assert kinds == [
        ("ClusterRole", "dagline-crd-upgrade"),
        ("ClusterRole", "dagline-discovery"),
        ("ClusterRoleBinding", "dagline-crd-upgrade"),
        ("ClusterRoleBinding", "dagline-discovery"),
        ("Deployment", "dagline"),
        ("Job", "dagline-crd-upgrade"),
        ("Job", "dagline-db-upgrade"),
        ("PodDisruptionBudget", "dagline"),
        ("Role", "dagline-controller"),
        ("Role", "dagline-spark"),
        ("RoleBinding", "dagline-controller"),
        ("RoleBinding", "dagline-spark"),
        ("Service", "dagline-api"),
        ("Service", "dagline-metrics"),
        ("ServiceAccount", "dagline"),
        ("ServiceAccount", "dagline-crd-upgrade"),
    ]
    for manifest in manifests:
        labels = manifest["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "dagline" and labels["helm.sh/chart"] == "dagline-0.1.0"
        if not manifest["kind"].startswith("Cluster"):  # the Spark Role lives where Spark runs
            spark = manifest["metadata"]["name"] == "dagline-spark"
            assert manifest["metadata"]["namespace"] == ("dataplat-spark" if spark else "dataplat")


def test_release_name_prefixes_every_object():
    manifests = render_chart(release="prod")
    assert {m["metadata"]["name"].split("-")[0] for m in manifests} == {"prod"}
    assert one(manifests, "Deployment")["metadata"]["name"] == "prod-dagline"


EXPECTED_ENV = {
    "DAGLINE_DB_URL": {"secretKeyRef": {"name": "dagline-db", "key": "url"}},
    "DAGLINE_NAMESPACE": "dataplat",
    "DAGLINE_SPARK_NAMESPACE": "dataplat-spark",
    "DAGLINE_SPARK_SPARK_VERSION": "3.5.3",
    "DAGLINE_SPARK_SERVICE_ACCOUNT": "spark-operator-spark",
    "DAGLINE_SPARK_PENDING_TIMEOUT": "PT15M",
    "DAGLINE_SPARK_PICKUP_TIMEOUT": "PT1M",
    "DAGLINE_SPARK_PREFLIGHT_INTERVAL": "PT5M",
    "DAGLINE_SPARK_RETENTION": "delete-succeeded",
    "DAGLINE_SPARK_KEEP_FINISHED": "PT24H",  # driver pods and their logs stay a day (ADR 0085)
    "DAGLINE_SPARK_CONNECT_SPARK_VERSION": "4.0.1",
    "DAGLINE_SPARK_CONNECT_IDLE_TIMEOUT": "PT30M",
    "DAGLINE_SPARK_POD_SECURITY": json.dumps({  # PodSecurity `restricted` for every Spark pod, by default
        "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 185, "seccompProfile": {"type": "RuntimeDefault"}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}},
        separators=(",", ":")),
    "DAGLINE_HEALTH_PORT": "8080",
    "DAGLINE_METRICS_PORT": "9090",
    "DAGLINE_DAGRUN_HISTORY_LIMIT": "50",
    "DAGLINE_PARALLELISM": "32",
    "DAGLINE_STATUS_INTERVAL": "2",
    "DAGLINE_LIVENESS_TIMEOUT": "60",
    "DAGLINE_WATCH_TIMEOUT": "300",
    "DAGLINE_WATCH_INACTIVITY_TIMEOUT": "70",
    "DAGLINE_WATCH_CONNECT_TIMEOUT": "30",
    "DAGLINE_LIST_INTERVAL": "60",
    "DAGLINE_LOG_FORMAT": "text",
    "DAGLINE_API_PORT": "8793",
    "DAGLINE_API_URL": "http://dagline-api.dataplat.svc:8793",
}


def test_history_retention_is_off_by_default_and_a_value_turns_it_on_in_every_replica():
    env = container_env(one(render_chart({"scheduler": {"cleanOlderThan": "P90D", "cleanKeepLast": 3}}),
                            "Deployment")["spec"]["template"]["spec"]["containers"][0])
    assert (env["DAGLINE_SCHEDULER_CLEAN_OLDER_THAN"], env["DAGLINE_SCHEDULER_CLEAN_KEEP_LAST"],
            env["DAGLINE_SCHEDULER_CLEAN_INTERVAL_S"]) == ("P90D", "3", "3600")
    from dagline.scheduler.settings import SchedulerSettings, env_overrides

    settings = SchedulerSettings(**env_overrides(SchedulerSettings, "DAGLINE_SCHEDULER_", env))
    assert (settings.clean_older_than, settings.clean_keep_last, settings.clean_interval_s) == ("P90D", 3, 3600.0)


def test_deployment_runs_the_operator_with_its_settings():
    manifests = render_chart()
    deployment = one(manifests, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["serviceAccountName"] == one(manifests, "ServiceAccount")["metadata"]["name"]
    [container] = pod["spec"]["containers"]
    assert container["image"] == "dagline/operator:0.1.0"
    assert container["command"] + container["args"] == ["dagline", "operator"]
    assert container_env(container) == EXPECTED_ENV  # DAGLINE_SPARK_IMAGE only when set
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"health": 8080, "metrics": 9090,
                                                                           "api": 8793}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_values_reach_the_environment():
    manifests = render_chart({
        "watch": {"allNamespaces": True},
        "spark": {"namespace": "spark-jobs", "image": "registry.example/jobs:7", "retention": "keep",
                  "pendingTimeout": 600, "keepFinished": "PT6H",
                  "connect": {"clientImage": "registry.example/jobs-py:7", "idleTimeout": "PT1H"}},
        "health": {"port": 8181}, "dagrunHistoryLimit": 10, "replicaCount": 3,
        "database": {"secretName": "pg", "secretKey": "dsn"},
        "extraEnv": [{"name": "TZ", "value": "UTC"}], "pools": {"default": 256, "spark": 32},
    })
    deployment = one(manifests, "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = container_env(container)
    assert env["DAGLINE_NAMESPACE"] == ""  # all namespaces
    assert env["DAGLINE_SPARK_NAMESPACE"] == "spark-jobs"
    assert env["DAGLINE_SPARK_IMAGE"] == "registry.example/jobs:7"
    assert (env["DAGLINE_SPARK_RETENTION"], env["DAGLINE_SPARK_PENDING_TIMEOUT"]) == ("keep", "600")
    assert env["DAGLINE_SPARK_KEEP_FINISHED"] == "PT6H"
    from dagline.k8s.executor import SparkK8sSettings

    assert SparkK8sSettings.from_env(env | {"DAGLINE_SPARK_POD_SECURITY": None}).keep_finished_s == 6 * 3600
    assert env["DAGLINE_SPARK_CONNECT_CLIENT_IMAGE"] == "registry.example/jobs-py:7"
    assert (env["DAGLINE_SPARK_CONNECT_IDLE_TIMEOUT"], env["DAGLINE_SPARK_CONNECT_SPARK_VERSION"]) == ("PT1H", "4.0.1")
    assert "DAGLINE_SPARK_CONNECT_IMAGE" not in env  # unset: spark:<version>
    assert (env["DAGLINE_HEALTH_PORT"], env["DAGLINE_DAGRUN_HISTORY_LIMIT"]) == ("8181", "10")
    assert env["DAGLINE_DB_URL"] == {"secretKeyRef": {"name": "pg", "key": "dsn"}}
    assert env["TZ"] == "UTC"
    assert json.loads(env["DAGLINE_PLATFORM_POOLS"]) == {"default": 256, "spark": 32}  # the platform's pools
    assert deployment["spec"]["replicas"] == 3
    assert {"name": "health", "containerPort": 8181, "protocol": "TCP"} in container["ports"]


def test_metrics_service_selects_the_operator_pods():
    manifests = render_chart()
    service = one(manifests, "Service", "dagline-metrics")
    pod_labels = one(manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]


def test_every_replica_serves_the_api_behind_one_service():
    manifests = render_chart()
    service = one(manifests, "Service", "dagline-api")
    pod_labels = one(manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "api", "port": 8793, "targetPort": "api", "protocol": "TCP"}]
    assert [m for m in manifests if m["kind"] == "Pod"] == []  # no `helm test` pod without a token Secret

    manifests = render_chart({"api": {"port": 9000, "anonymousRead": True, "url": "https://signals.example",
                                      "service": {"port": 80}, "tokenSecret": {"name": "dagline-api-token"}}})
    [container] = one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"]
    env = container_env(container)
    assert (env["DAGLINE_API_PORT"], env["DAGLINE_API_URL"]) == ("9000", "https://signals.example")
    assert env["DAGLINE_API_ANONYMOUS_READ"] == "true"
    assert {"name": "api", "containerPort": 9000, "protocol": "TCP"} in container["ports"]
    assert one(manifests, "Service", "dagline-api")["spec"]["ports"][0]["port"] == 80
    test_pod = one(manifests, "Pod")
    assert test_pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    [sender] = test_pod["spec"]["containers"]
    assert container_env(sender) == {
        "DAGLINE_API_URL": "https://signals.example",
        "DAGLINE_SIGNAL_TOKEN": {"secretKeyRef": {"name": "dagline-api-token", "key": "token"}}}
    assert "send_signal" in sender["command"][-1]


def test_the_web_ui_gets_an_ingress_only_when_asked():
    assert [m for m in render_chart() if m["kind"] == "Ingress"] == []  # off by default
    manifests = render_chart({"ingress": {
        "enabled": True, "className": "nginx", "host": "dagline.example.com",
        "annotations": {"nginx.ingress.kubernetes.io/proxy-buffering": "off"},
        "tls": [{"hosts": ["dagline.example.com"], "secretName": "dagline-tls"}]}})
    ingress = one(manifests, "Ingress", "dagline")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["metadata"]["annotations"] == {"nginx.ingress.kubernetes.io/proxy-buffering": "off"}
    assert ingress["spec"]["tls"] == [{"hosts": ["dagline.example.com"], "secretName": "dagline-tls"}]
    [rule] = ingress["spec"]["rules"]
    assert rule["host"] == "dagline.example.com"
    [path] = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/", "Prefix")
    assert path["backend"]["service"] == {"name": "dagline-api", "port": {"name": "api"}}
    one(manifests, "Service", "dagline-api")  # the Service it points at exists
    any_host = one(render_chart({"ingress": {"enabled": True}}), "Ingress", "dagline")
    assert "host" not in any_host["spec"]["rules"][0] and "ingressClassName" not in any_host["spec"]


def test_database_is_migrated_once_by_a_hook_job():
    manifests = render_chart()
    job = one(manifests, "Job", "dagline-db-upgrade")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod  # hooks run before the chart's ServiceAccount exists
    [container] = pod["containers"]
    assert container["command"] == ["dagline", "db", "upgrade"]
    assert container_env(container) == {"DAGLINE_DB_URL": EXPECTED_ENV["DAGLINE_DB_URL"]}
    assert [m for m in render_chart({"migrations": {"enabled": False}})
            if m["kind"] == "Job" and m["metadata"]["name"] == "dagline-db-upgrade"] == []


HOOK_OBJECTS = {("ServiceAccount", "dagline-crd-upgrade"), ("ClusterRole", "dagline-crd-upgrade"),
                ("ClusterRoleBinding", "dagline-crd-upgrade"), ("Job", "dagline-crd-upgrade")}


def test_crds_are_upgraded_by_a_hook_job_with_server_side_apply_and_an_account_of_its_own():
    """Helm never upgrades crds/: a pre-install/pre-upgrade hook Job applies the operator image's CRDs
    (tests/k8s/test_crd_upgrade.py shows the apply keeping a new field), as an account that may only get,
    create and patch the four dagline CRDs by name."""
    manifests = render_chart()
    hooks = {(m["kind"], m["metadata"]["name"]): m for m in manifests
             if (m["kind"], m["metadata"]["name"]) in HOOK_OBJECTS}
    assert hooks.keys() == HOOK_OBJECTS
    weights = {}
    for (kind, _), manifest in hooks.items():
        annotations = manifest["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        weights[kind] = int(annotations["helm.sh/hook-weight"])
    migration = int(one(manifests, "Job", "dagline-db-upgrade")["metadata"]["annotations"]["helm.sh/hook-weight"])
    # the account and its rules exist before the Job runs, and the CRDs are current before the migration
    assert weights["ServiceAccount"] == weights["ClusterRole"] == weights["ClusterRoleBinding"] < weights["Job"] < migration

    [rule] = hooks[("ClusterRole", "dagline-crd-upgrade")]["rules"]
    crd_files = sorted(path.name.removesuffix(".yaml") for path in (CHART / "crds").glob("*.yaml"))
    assert rule == {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                    "resourceNames": crd_files, "verbs": ["get", "create", "patch"]}
    assert crd_files == ["backfills.dagline.io", "dagruns.dagline.io", "dags.dagline.io", "pools.dagline.io"]
    binding = hooks[("ClusterRoleBinding", "dagline-crd-upgrade")]
    assert binding["roleRef"]["name"] == "dagline-crd-upgrade"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "dagline-crd-upgrade", "namespace": NAMESPACE}]

    pod = hooks[("Job", "dagline-crd-upgrade")]["spec"]["template"]["spec"]
    assert (pod["serviceAccountName"], pod["restartPolicy"], pod["automountServiceAccountToken"]) == (
        "dagline-crd-upgrade", "Never", True)
    [container] = pod["containers"]
    assert container["command"] == ["python", "-m", "dagline.k8s.crds", "apply"]
    assert container["image"] == one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert "env" not in container  # no database, no settings: only the cluster's API
    assert container["securityContext"]["readOnlyRootFilesystem"] is True

    # off: none of it (the platform applies the CRDs, e.g. `kubectl apply --server-side -f charts/dagline/crds/`)
    off = render_chart({"crds": {"upgrade": {"enabled": False}}})
    assert not {(m["kind"], m["metadata"]["name"]) for m in off} & HOOK_OBJECTS


def test_service_account_rbac_and_migrations_can_be_left_to_the_platform():
    manifests = render_chart(values_files=("platform-managed.yaml",))
    assert sorted(m["kind"] for m in manifests) == ["Deployment", "PodDisruptionBudget", "Service", "Service"]
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "platform-sa"
    assert container_env(pod["containers"][0])["DAGLINE_NAMESPACE"] == "pipelines"


def test_production_values_size_and_place_the_operator():
    manifests = render_chart(values_files=("production.yaml",))
    deployment = one(manifests, "Deployment")
    assert deployment["spec"]["replicas"] == 3
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["labels"]["team"] == "dataplat"
    assert pod["metadata"]["annotations"] == {"example.com/owner": "dataplat"}
    spec = pod["spec"]
    assert spec["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert spec["nodeSelector"] == {"node-role.example/control": "true"}
    assert spec["tolerations"] == [{"key": "dedicated", "operator": "Equal", "value": "control",
                                    "effect": "NoSchedule"}]
    anti = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    [container] = spec["containers"]
    assert container["image"] == "registry.example/dataplat/dagline-operator:0.1.0-build.42"
    assert container["imagePullPolicy"] == "Always"
    assert container["resources"] == {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
    env = container_env(container)
    assert env["DAGLINE_DB_URL"] == {"secretKeyRef": {"name": "pg", "key": "dsn"}}
    assert (env["DAGLINE_PARALLELISM"], env["DAGLINE_DAGRUN_HISTORY_LIMIT"], env["TZ"]) == ("64", "10", "UTC")
    job = one(manifests, "Job", "dagline-db-upgrade")  # the migration runs the same image, with the same database Secret
    [migrate] = job["spec"]["template"]["spec"]["containers"]
    assert migrate["image"] == container["image"]
    assert container_env(migrate) == {"DAGLINE_DB_URL": {"secretKeyRef": {"name": "pg", "key": "dsn"}}}


def test_one_operator_for_all_namespaces_with_spark_elsewhere():
    manifests = render_chart(values_files=("all-namespaces.yaml",))
    [container] = one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"]
    env = container_env(container)
    assert env["DAGLINE_NAMESPACE"] == ""  # every namespace
    assert (env["DAGLINE_SPARK_NAMESPACE"], env["DAGLINE_SPARK_IMAGE"]) == ("spark-jobs", "registry.example/dataplat/jobs:7")
    assert (env["DAGLINE_SPARK_RETENTION"], env["DAGLINE_SPARK_PENDING_TIMEOUT"]) == ("keep", "600")
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"health": 8181, "metrics": 9191,
                                                                           "api": 8793}
    assert one(manifests, "Service", "dagline-metrics")["spec"]["ports"][0]["port"] == 9191
    assert granted(manifests) == ({("cluster", *rule) for rule in DISCOVERY_RULES | CONTROLLER_RULES}
                                  | {("spark-jobs", *rule) for rule in SPARK_RULES})


# --- RBAC: exactly what the operator uses ---------------------------------------------------------

CONTROLLER_RULES = {
    ("dagline.io", resource, verb) for resource in ("dags", "dagruns", "backfills", "pools")
    for verb in ("list", "watch", "patch")  # kopf lists and watches; nothing reads one object by name
} | {
    ("dagline.io", f"{resource}/status", "patch") for resource in ("dags", "dagruns", "backfills", "pools")
} | {
    ("dagline.io", "dagruns", "create"), ("dagline.io", "dagruns", "delete"), ("", "events", "create"),
}
DISCOVERY_RULES = {
    ("apiextensions.k8s.io", "customresourcedefinitions", verb) for verb in ("list", "watch")
} | {("", "namespaces", "list"), ("", "namespaces", "watch")}
# What dagline.k8s.executor calls: create, get, list (it polls; no watch), patch (labels of kept ones, a server's
# last use), delete -- on SparkApplications, and for Spark Connect tasks on SparkConnects and the tries' Pods.
SPARK_RULES = {(group, resource, verb)
               for group, resource in (("sparkoperator.k8s.io", "sparkapplications"),
                                       ("sparkoperator.k8s.io", "sparkconnects"), ("", "pods"))
               for verb in ("get", "list", "create", "patch", "delete")} | {
    ("", "secrets", "create"),  # each try's signal token, owned by its application: never read, patched or deleted
    ("", "pods/log", "get")}  # the driver logs the web UI and `tasks logs` show


def granted(manifests: list[dict]) -> set[tuple[str, str, str, str]]:
    """(where, apiGroup, resource, verb) the chart's ServiceAccount gets; where = a namespace or "cluster"."""
    account = one(manifests, "ServiceAccount")["metadata"]
    roles = {(m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]): m
             for m in manifests if m["kind"] in ("Role", "ClusterRole")}
    grants = set()
    for binding in (m for m in manifests if m["kind"] in ("RoleBinding", "ClusterRoleBinding")
                    and (m["kind"], m["metadata"]["name"]) not in HOOK_OBJECTS):  # the CRD hook's: its own test
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["name"],
                                        "namespace": account["namespace"]}]
        ref = binding["roleRef"]
        where = binding["metadata"].get("namespace") or "cluster"
        role = roles[(ref["kind"], None if ref["kind"] == "ClusterRole" else where, ref["name"])]
        for rule in role["rules"]:
            if "resourceNames" in rule:  # only the callbacks' Secrets are granted by name
                assert set(rule) == {"apiGroups", "resources", "verbs", "resourceNames"}
                assert rule["resources"] == ["secrets"] and rule["verbs"] == ["get"] and rule["resourceNames"]
                grants |= {(where, "", f"secrets/{name}", "get") for name in rule["resourceNames"]}
                continue
            assert set(rule) == {"apiGroups", "resources", "verbs"}, "no resourceNames or nonResourceURLs"
            grants |= {(where, group, resource, verb) for group in rule["apiGroups"]
                       for resource in rule["resources"] for verb in rule["verbs"]}
    return grants


def test_rbac_grants_exactly_what_the_operator_uses():
    manifests = render_chart()
    expected = ({("cluster", *rule) for rule in DISCOVERY_RULES} | {("dataplat", *rule) for rule in CONTROLLER_RULES}
                | {("dataplat-spark", *rule) for rule in SPARK_RULES})
    assert granted(manifests) == expected


def test_rbac_follows_the_watched_and_spark_namespaces():
    manifests = render_chart({"watch": {"namespace": "pipelines"}, "spark": {"namespace": "spark-jobs"}})
    expected = ({("cluster", *rule) for rule in DISCOVERY_RULES} | {("pipelines", *rule) for rule in CONTROLLER_RULES}
                | {("spark-jobs", *rule) for rule in SPARK_RULES})
    assert granted(manifests) == expected
    all_namespaces = render_chart({"watch": {"allNamespaces": True}})
    expected = ({("cluster", *rule) for rule in DISCOVERY_RULES | CONTROLLER_RULES}
                | {("dataplat-spark", *rule) for rule in SPARK_RULES})
    assert granted(all_namespaces) == expected


def test_callback_secrets_are_granted_by_name_and_only_when_listed():
    manifests = render_chart({"callbacks": {"secretNames": ["sales-hooks", "ops-hooks"]}})
    expected = ({("cluster", *rule) for rule in DISCOVERY_RULES} | {("dataplat", *rule) for rule in CONTROLLER_RULES}
                | {("dataplat-spark", *rule) for rule in SPARK_RULES}
                | {("dataplat", "", "secrets/sales-hooks", "get"), ("dataplat", "", "secrets/ops-hooks", "get")})
    assert granted(manifests) == expected
    # without names, no Secret is readable (the per-try token Secrets are only written)
    assert not any("secrets" in r and verb == "get" for _, _, r, verb in granted(render_chart()))
    env = {e["name"]: e.get("value") for e in one(render_chart({"logFormat": "json"}), "Deployment")
           ["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DAGLINE_LOG_FORMAT"] == "json"


def test_a_widened_rule_is_caught():
    manifests = render_chart()
    one(manifests, "Role", "dagline-spark")["rules"][0]["verbs"].append("watch")
    assert ("dataplat-spark", "sparkoperator.k8s.io", "sparkapplications", "watch") in granted(manifests)
    assert granted(manifests) != granted(render_chart())


def test_chart_readme_gives_the_reason_for_every_rule():
    readme = (CHART / "README.md").read_text()
    table = [line for line in readme.splitlines() if line.startswith("| `")]
    listed = set()
    for line in table:
        cells = [cell.strip().strip("`") for cell in line.strip("|").split("|")]
        if len(cells) == 4 and cells[3]:
            group, resource, verbs = cells[0], cells[1], cells[2]
            listed |= {("" if group == "core" else group, resource, verb.strip("` ")) for verb in verbs.split(",")}
    assert listed == CONTROLLER_RULES | DISCOVERY_RULES | SPARK_RULES | {("", "secrets", "get")}


# --- NOTES.txt --------------------------------------------------------------------------------------


def test_notes_say_what_to_apply_next():
    notes = render_notes()
    assert "examples/k8s/pool.yaml" in notes and "examples/k8s/dag.yaml" in notes
    assert "kubectl -n dataplat get dags" in notes
    assert "secret generic dagline-db" in notes
    assert notes.index("pool.yaml") < notes.index("dag.yaml") < notes.index("get dags")
    assert "{{" not in notes


# --- metrics: the ServiceMonitor and the Grafana dashboard (both off by default) -------------------


def test_the_service_monitor_and_the_dashboard_are_off_by_default():
    manifests = render_chart()
    assert not [m for m in manifests if m["kind"] in ("ServiceMonitor", "ConfigMap")]


def test_the_service_monitor_scrapes_every_replica_through_the_metrics_service():
    manifests = render_chart({"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prom"}}}})
    monitor = one(manifests, "ServiceMonitor")
    service = one(manifests, "Service", "dagline-metrics")
    api = one(manifests, "Service", "dagline-api")
    assert not monitor["spec"]["selector"]["matchLabels"].items() <= api["metadata"]["labels"].items()
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["metadata"]["namespace"] == NAMESPACE
    assert monitor["metadata"]["labels"]["release"] == "prom"  # what a Prometheus selects monitors by
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s",
                                             "scrapeTimeout": "10s"}]
    assert [p["name"] for p in service["spec"]["ports"]] == ["metrics"]


def test_the_dashboard_configmap_carries_the_chart_dashboard_for_grafanas_sidecar():
    manifests = render_chart({"metrics": {"grafanaDashboard": {"enabled": True}}})
    config_map = one(manifests, "ConfigMap", "dagline-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(config_map["data"]["dagline.json"])
    assert dashboard == json.loads((CHART / "dashboards" / "dagline.json").read_text())
    assert dashboard["uid"] == "dagline-scheduler" and len(dashboard["panels"]) > 10
    kubernetes_validate.validate(config_map, KUBERNETES_VERSION, strict=True)


def _exported_metric_names() -> set[str]:
    """Every series name dagline's replicas expose: `dagline.metrics` (with the database gauges) and
    the operator's own figures."""
    from prometheus_client.parser import text_string_to_metric_families

    from dagline import metrics
    from dagline.k8s.metrics import render as render_operator_page

    class Runtime:  # the operator's page needs only these figures of a replica
        class health:
            scheduler_beat = None

        scheduler = None

        class sync:
            class stats:
                syncs = failed_syncs = status_patches = dagruns_created = dagruns_deleted = 0

    figures = metrics.DatabaseFigures(runs={}, task_instances={}, pools={(None, "default"): (128, 0)}, backfills={},
                                      backfill_runs={})
    database = metrics.DatabaseCollector(lambda: figures, run_states=("success",), ti_states=("success",),
                                         backfill_states=("running",))
    page = render_operator_page(Runtime()) + "".join(f"# TYPE {family.name} gauge\n" for family in database.collect())
    names = set()
    suffixes = {"counter": ["_total"], "gauge": [""], "histogram": ["_bucket", "_sum", "_count"]}
    for family in text_string_to_metric_families(page):
        names.update(family.name + suffix for suffix in suffixes.get(family.type, [""]))
    return names


def test_the_dashboard_queries_only_metrics_dagline_exports():
    dashboard = json.loads((CHART / "dashboards" / "dagline.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {name for expr in exprs for name in re.findall(r"\b((?:dagline|process)_[a-z_]+)\b", expr)}
    assert used and not used - _exported_metric_names(), used - _exported_metric_names()
    assert all('namespace=~"$namespace"' in expr for expr in exprs)


def test_secrets_dags_name_are_granted_get_by_name_in_the_watched_namespace_only():
    """Task env and callback secretKeyRefs (issue 26, item 2): the operator may read exactly the listed
    Secrets, in the namespace whose DAGs name them; nothing more in the Spark namespace than before."""
    manifests = render_chart({"watch": {"namespace": "pipelines"}, "spark": {"namespace": "spark-jobs"},
                              "secrets": {"names": ["warehouse", "sales-hooks"]},
                              "callbacks": {"secretNames": ["sales-hooks"]}})
    expected = ({("cluster", *rule) for rule in DISCOVERY_RULES} | {("pipelines", *rule) for rule in CONTROLLER_RULES}
                | {("spark-jobs", *rule) for rule in SPARK_RULES}
                | {("pipelines", "", "secrets/warehouse", "get"), ("pipelines", "", "secrets/sales-hooks", "get")})
    assert granted(manifests) == expected


# --- what mature operators ship: disruption budget, spread, a values schema, a package -------------


def test_replicas_survive_a_drain_one_at_a_time_and_spread_over_nodes_and_zones():
    manifests = render_chart()
    pods = one(manifests, "Deployment")["spec"]["template"]
    budget = one(manifests, "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= pods["metadata"]["labels"].items()
    spread = pods["spec"]["topologySpreadConstraints"]
    assert [c["topologyKey"] for c in spread] == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    for constraint in spread:
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway" and constraint["maxSkew"] == 1
        assert constraint["labelSelector"]["matchLabels"].items() <= pods["metadata"]["labels"].items()


def test_a_single_replica_gets_no_budget_that_would_block_every_drain():
    assert not [m for m in render_chart({"replicaCount": 1}) if m["kind"] == "PodDisruptionBudget"]
    strict = render_chart({"topologySpread": {"whenUnsatisfiable": "DoNotSchedule",
                                              "topologyKeys": ["kubernetes.io/hostname"]}})
    [constraint] = one(strict, "Deployment")["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert constraint["whenUnsatisfiable"] == "DoNotSchedule"


@pytest.mark.parametrize(("overrides", "message"), [
    ({"replicaCount": "two"}, "replicaCount: Invalid type. Expected: integer, given: string"),
    ({"replicas": 3}, "Additional property replicas is not allowed"),
    ({"logFormat": "xml"}, "logFormat must be one of the following"),
    ({"spark": {"retention": "forever"}}, "spark.retention must be one of the following"),
    ({"spark": {"keepFinished": "a day"}}, "spark.keepFinished: Does not match pattern"),
    ({"spark": {"keepFinished": -1}}, "spark.keepFinished: Must be greater than or equal to 0"),
    ({"crds": {"upgrade": {"enabled": "yes"}}}, "crds.upgrade.enabled: Invalid type. Expected: boolean"),
    ({"api": {"port": 0}}, "api.port: Must be greater than or equal to 1"),
    ({"scheduler": {"paralellism": 8}}, "Additional property paralellism is not allowed"),
    ({"topologySpread": {"whenUnsatisfiable": "Sometimes"}}, "topologySpread.whenUnsatisfiable must be one of"),
])
def test_values_the_schema_refuses(overrides, message):
    """values.schema.json: a typo or a wrong type stops `helm install`, naming the value."""
    with _scratch() as tmp:
        result = helm("template", RELEASE, str(CHART), *_values_args((), overrides, tmp), check=False)
    assert result.returncode != 0 and message in result.stderr, result.stderr


def test_make_chart_packages_the_chart_with_its_crds_and_schema():
    """`make chart` is `helm package`: the archive a user installs without the source."""
    with _scratch() as tmp:
        helm("package", str(CHART), "--destination", str(tmp))
        [archive] = list(tmp.glob("dagline-*.tgz"))
        with tarfile.open(archive) as tar:
            names = set(tar.getnames())
    assert {"dagline/Chart.yaml", "dagline/values.yaml", "dagline/values.schema.json",
            "dagline/crds/dags.dagline.io.yaml", "dagline/templates/pdb.yaml"} <= names
    assert archive.name == "dagline-0.1.0.tgz"

# --- Spark in a namespace of its own; the Spark policy and webhook egress allow-lists -------------------


def test_spark_runs_in_a_namespace_of_its_own_never_beside_the_database_secret():
    env = container_env(one(render_chart(), "Deployment")["spec"]["template"]["spec"]["containers"][0])
    assert env["DAGLINE_SPARK_NAMESPACE"] == "dataplat-spark" and env["DAGLINE_DB_URL"]["secretKeyRef"]
    assert not [m for m in render_chart() if m["kind"] == "Namespace"]  # created by the platform by default
    [namespace] = [m for m in render_chart({"spark": {"createNamespace": True}}) if m["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == "dataplat-spark"
    refused = helm("template", "dagline", str(CHART), "--namespace", NAMESPACE, "--set", "spark.namespace=dataplat",
                   check=False)
    assert refused.returncode != 0 and "release namespace" in refused.stderr and "database Secret" in refused.stderr


def test_the_spark_role_may_only_create_secrets():
    rules = one(render_chart(), "Role", "dagline-spark")["rules"]
    assert [rule["verbs"] for rule in rules if "secrets" in rule["resources"]] == [["create"]]


def test_allowed_spark_conf_and_webhook_networks_reach_the_environment():
    env = container_env(one(render_chart(), "Deployment")["spec"]["template"]["spec"]["containers"][0])
    assert "DAGLINE_SPARK_ALLOWED_CONF" not in env and "DAGLINE_CALLBACK_ALLOWED_NETWORKS" not in env
    manifests = render_chart({"spark": {"allowedConf": ["spark.kubernetes.driver.annotation.*", "spark.kubernetes.namespace"]},
                              "callbacks": {"allowedNetworks": ["10.20.0.0/16", "10.30.1.5/32:8443"]}})
    env = container_env(one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0])
    assert env["DAGLINE_SPARK_ALLOWED_CONF"] == "spark.kubernetes.driver.annotation.*,spark.kubernetes.namespace"
    assert env["DAGLINE_CALLBACK_ALLOWED_NETWORKS"] == "10.20.0.0/16,10.30.1.5/32:8443"
    from dagline.domain.egress import EgressPolicy
    from dagline.domain.spark_policy import SparkPolicy
    assert SparkPolicy.parse(env["DAGLINE_SPARK_ALLOWED_CONF"]).refusal("spark.kubernetes.driver.annotation.x") is None
    assert EgressPolicy.parse(env["DAGLINE_CALLBACK_ALLOWED_NETWORKS"]).refusal("10.30.1.5", 8443) is None


def test_signal_exports_reach_the_environment_as_the_scheduler_reads_them():
    env = container_env(one(render_chart(), "Deployment")["spec"]["template"]["spec"]["containers"][0])
    assert "DAGLINE_SIGNAL_EXPORTS" not in env  # no namespace hears another's signals
    manifests = render_chart({"signals": {"exports": ["a-team/orders.*=team-b,team-c", "a-team/stock.low=*"]}})
    env = container_env(one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0])
    from dagline.domain.signal_exports import parse_exports
    exports = parse_exports(env["DAGLINE_SIGNAL_EXPORTS"])
    assert exports.allows("a-team", "orders.ready", "team-c") and exports.allows("a-team", "stock.low", "x")
    assert not exports.allows("a-team", "orders.ready", "team-x")


def _restricted_violations(pod: dict) -> list[str]:
    """What PodSecurity `restricted` (Kubernetes 1.30) would refuse of a SparkPodSpec's security fields."""
    pod_ctx, ctx = pod.get("podSecurityContext") or {}, pod.get("securityContext") or {}
    found = []
    if not (ctx.get("runAsNonRoot") or pod_ctx.get("runAsNonRoot")):
        found.append("runAsNonRoot")
    if 0 in (ctx.get("runAsUser"), pod_ctx.get("runAsUser")):
        found.append("runAsUser 0")
    seccomp = (ctx.get("seccompProfile") or pod_ctx.get("seccompProfile") or {}).get("type")
    if seccomp not in ("RuntimeDefault", "Localhost"):
        found.append("seccompProfile")
    if ctx.get("allowPrivilegeEscalation") is not False:
        found.append("allowPrivilegeEscalation")
    if "ALL" not in ((ctx.get("capabilities") or {}).get("drop") or []):
        found.append("capabilities.drop ALL")
    if ctx.get("privileged"):
        found.append("privileged")
    return found


def _spark_pods(manifests, **job) -> dict:
    from dagline.executors.base import SparkJob, TaskKey, TaskLaunch
    from dagline.k8s.executor import SparkK8sSettings
    from dagline.k8s.sparkapp import build_manifest
    env = container_env(one(manifests, "Deployment")["spec"]["template"]["spec"]["containers"][0])
    settings = SparkK8sSettings.from_env({k: v for k, v in env.items() if isinstance(v, str)})
    launch = TaskLaunch(ti_id=1, key=TaskKey("d", "r", "t", 1), job=SparkJob("local:///opt/a.py", **job))
    app = build_manifest(launch, namespace=settings.namespace, default_image=settings.image,
                         service_account=settings.service_account, spark_version=settings.spark_version,
                         launched_at=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), pod_security=settings.pod_security)
    return {role: app["spec"][role] for role in ("driver", "executor")}


def test_spark_pods_pass_pod_security_restricted_by_default_unless_the_task_sets_its_own():
    pods = _spark_pods(render_chart())
    assert {role: _restricted_violations(pod) for role, pod in pods.items()} == {"driver": [], "executor": []}
    own = {"podSecurityContext": {"runAsUser": 1000, "runAsNonRoot": True}}
    pods = _spark_pods(render_chart(), pod=own)
    for pod in pods.values():
        assert pod["podSecurityContext"] == own["podSecurityContext"]  # the task's replaces the default
        assert pod["securityContext"]["capabilities"] == {"drop": ["ALL"]}  # the other default stays
    pods = _spark_pods(render_chart({"spark": {"podSecurity": None}}))
    assert not {"podSecurityContext", "securityContext"} & (pods["driver"].keys() | pods["executor"].keys())
