"""The Helm chart `charts/dagline`: its files parse, its CRDs are the generated ones, its templates render to
the manifests we mean (kinds, names, ports, env vars, probes, the migration hook) and its RBAC grants exactly
the verbs the operator uses -- a widened rule fails here.

There is no `helm` binary on these machines, so `render_chart` below is a small test-only renderer of the
Go-template subset the chart uses: `{{ .Values.x }}`, `$`/`$var := ...`, pipelines, `if`/`else if`/`else`,
`with`, `define`/`include`, and the functions `toYaml nindent indent quote default trunc trimSuffix
contains printf not eq ne and or`. It is strict where Helm is lenient: a value path that does not exist
in values.yaml is an error, so a typo in a template fails the test instead of rendering nothing.
What only a real `helm` can check (Sprig's exact semantics, `helm lint`, hook ordering, CRD installation
from `crds/`) is left to tests/e2e/.
"""

from __future__ import annotations

import copy
import json
import pathlib
import re
import tomllib
from collections.abc import Callable
from typing import Any

import pytest
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dagline"
RELEASE = {"Name": "dagline", "Namespace": "dataplat", "Service": "Helm"}

# --- a renderer for the chart's Go-template subset ----------------------------------------------


class TemplateError(Exception):
    pass


_ACTION = re.compile(r"\{\{(-\s)?(.*?)(\s-)?\}\}", re.DOTALL)


def _parse(text: str, name: str) -> list:
    """Text and actions -> a tree of ('text', s) / ('action', expr) / ('if', [(cond, body)], else) /
    ('with', expr, body, else) / ('define', name, body)."""
    tokens: list[tuple[str, str]] = []
    position = 0
    for match in _ACTION.finditer(text):
        before = text[position:match.start()]
        if match.group(1):
            before = before.rstrip(" \t\r\n")
        tokens.append(("text", before))
        tokens.append(("action", match.group(2).strip()))
        position = match.end()
        if match.group(3):
            rest = text[position:]
            position += len(rest) - len(rest.lstrip(" \t\r\n"))
    tokens.append(("text", text[position:]))

    def block(index: int, closers: tuple[str, ...]) -> tuple[list, int, str]:
        nodes: list = []
        while index < len(tokens):
            kind, value = tokens[index]
            index += 1
            if kind == "text":
                if value:
                    nodes.append(("text", value))
                continue
            word = value.split(None, 1)[0] if value else ""
            if value.startswith("/*"):
                continue
            if word in closers:
                return nodes, index, value
            if word in ("if", "with"):
                branches, otherwise = [], []
                condition = value[len(word):].strip()
                while True:
                    body, index, closer = block(index, ("else", "end"))
                    branches.append((condition, body))
                    if closer == "end":
                        break
                    if closer.startswith("else if"):
                        condition = closer[len("else if"):].strip()
                        continue
                    otherwise, index, _ = block(index, ("end",))
                    break
                if word == "if":
                    nodes.append(("if", branches, otherwise))
                else:
                    nodes.append(("with", branches[0][0], branches[0][1], otherwise))
            elif word == "define":
                body, index, _ = block(index, ("end",))
                nodes.append(("define", json.loads(value[len("define"):].strip()), body))
            elif word in ("range", "template", "block", "tpl"):
                raise TemplateError(f"{name}: `{word}` is outside the subset this renderer knows")
            else:
                nodes.append(("action", value))
        if closers:
            raise TemplateError(f"{name}: missing {{{{ end }}}}")
        return nodes, index, ""

    return block(0, ())[0]


def _split_top(text: str, separator: str) -> list[str]:
    """Split at `separator` outside quotes and parentheses."""
    parts, depth, quoted, start, i = [], 0, False, 0, 0
    while i < len(text):
        char = text[i]
        if quoted:
            if char == "\\":
                i += 1
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [part.strip() for part in parts]


def _words(command: str) -> list[str]:
    """A command's words: "strings", (sub pipelines) and bare words."""
    words, i = [], 0
    while i < len(command):
        if command[i].isspace():
            i += 1
        elif command[i] == '"':
            end = i + 1
            while command[end] != '"':
                end += 2 if command[end] == "\\" else 1
            words.append(command[i:end + 1])
            i = end + 1
        elif command[i] == "(":
            depth, end = 0, i
            while True:
                depth += {"(": 1, ")": -1}.get(command[end], 0)
                if depth == 0:
                    break
                end += 1
            words.append(command[i:end + 1])
            i = end + 1
        else:
            end = i
            while end < len(command) and not command[end].isspace():
                end += 1
            words.append(command[i:end])
            i = end
    return words


def _truthy(value: Any) -> bool:
    return value not in (None, False, 0, "") and not (isinstance(value, (dict, list)) and not value)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _indent(width: int, text: Any) -> str:
    pad = " " * width
    return pad + _text(text).replace("\n", "\n" + pad)


def _to_yaml(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=False, sort_keys=True).rstrip("\n")


def _printf(pattern: str, *args: Any) -> str:
    return re.sub(r"%[sdv]", "%s", pattern) % tuple(_text(arg) for arg in args)


class Renderer:
    """Renders the chart's templates with values, like `helm template` does for this subset."""

    def __init__(self, chart: pathlib.Path, values: dict[str, Any], release: dict[str, Any]):
        meta = yaml.safe_load((chart / "Chart.yaml").read_text())
        self.root = {
            "Values": values,
            "Release": release,
            "Chart": {"Name": meta["name"], "Version": meta["version"], "AppVersion": meta["appVersion"]},
        }
        self.defines: dict[str, list] = {}
        self.trees: dict[str, list] = {}
        for path in sorted((chart / "templates").iterdir()):
            tree = _parse(path.read_text(), path.name)
            self._collect_defines(tree)
            self.trees[path.name] = tree
        self.functions: dict[str, Callable[..., Any]] = {
            "include": lambda name, data: self._render(self.defines[name], data, {}),
            "toYaml": _to_yaml,
            "nindent": lambda width, text: "\n" + _indent(width, text),
            "indent": _indent,
            "quote": lambda *values: " ".join(json.dumps(_text(v)) for v in values if v is not None),
            "default": lambda fallback, *given: given[0] if given and _truthy(given[0]) else fallback,
            "trunc": lambda width, text: _text(text)[:width],
            "trimSuffix": lambda suffix, text: _text(text).removesuffix(suffix),
            "contains": lambda part, text: part in _text(text),
            "printf": _printf,
            "not": lambda value: not _truthy(value),
            "eq": lambda a, b: a == b,
            "ne": lambda a, b: a != b,
            "and": lambda *values: all(_truthy(v) for v in values),
            "or": lambda *values: any(_truthy(v) for v in values),
        }

    def _collect_defines(self, nodes: list) -> None:
        for node in nodes:
            if node[0] == "define":
                self.defines[node[1]] = node[2]

    def render(self, name: str) -> str:
        return self._render(self.trees[name], self.root, {})

    def _lookup(self, value: Any, path: str, where: str) -> Any:
        for part in filter(None, path.split(".")):
            if not isinstance(value, dict) or part not in value:
                raise TemplateError(f"{where}: no value at {path!r}")
            value = value[part]
        return value

    def _argument(self, word: str, dot: Any, variables: dict[str, Any]) -> Any:
        if word.startswith('"'):
            return json.loads(word)
        if word.startswith("("):
            return self._pipeline(word[1:-1], dot, variables)
        if re.fullmatch(r"-?\d+", word):
            return int(word)
        if word in ("true", "false", "nil"):
            return {"true": True, "false": False, "nil": None}[word]
        if word == ".":
            return dot
        if word.startswith("."):
            return self._lookup(dot, word, word)
        if word.startswith("$"):
            name, _, path = word[1:].partition(".")
            base = self.root if name == "" else variables[name]
            return self._lookup(base, path, word)
        raise TemplateError(f"unknown word {word!r}")

    def _pipeline(self, expression: str, dot: Any, variables: dict[str, Any]) -> Any:
        value, piped = None, False
        for command in _split_top(expression, "|"):
            words = _words(command)
            if words[0] in self.functions:
                args = [self._argument(word, dot, variables) for word in words[1:]]
                value = self.functions[words[0]](*args, *([value] if piped else []))
            elif len(words) == 1 and not piped:
                value = self._argument(words[0], dot, variables)
            else:
                raise TemplateError(f"cannot evaluate {command!r}")
            piped = True
        return value

    def _render(self, nodes: list, dot: Any, variables: dict[str, Any]) -> str:
        out = []
        for node in nodes:
            kind = node[0]
            if kind == "text":
                out.append(node[1])
            elif kind == "action":
                assignment = re.fullmatch(r"\$(\w+)\s*:=\s*(.+)", node[1], re.DOTALL)
                if assignment:
                    variables[assignment.group(1)] = self._pipeline(assignment.group(2), dot, variables)
                else:
                    out.append(_text(self._pipeline(node[1], dot, variables)))
            elif kind == "if":
                branches, otherwise = node[1], node[2]
                for condition, body in branches:
                    if _truthy(self._pipeline(condition, dot, variables)):
                        out.append(self._render(body, dot, variables))
                        break
                else:
                    out.append(self._render(otherwise, dot, variables))
            elif kind == "with":
                value = self._pipeline(node[1], dot, variables)
                if _truthy(value):
                    out.append(self._render(node[2], value, variables))
                else:
                    out.append(self._render(node[3], dot, variables))
        return "".join(out)


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    result = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = _merge(result[key], value)
        else:
            result[key] = value
    return result


def default_values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text())


def render_chart(overrides: dict[str, Any] | None = None, release: dict[str, Any] | None = None):
    """(manifests of every template, NOTES.txt), as `helm template --set ...` would give them."""
    renderer = Renderer(CHART, _merge(default_values(), overrides or {}), release or RELEASE)
    manifests = []
    for name in renderer.trees:
        if name.startswith("_") or name == "NOTES.txt":
            continue
        text = renderer.render(name)
        try:
            documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
        except yaml.YAMLError as exc:
            raise AssertionError(f"{name} does not render to YAML: {exc}\n{text}") from exc
        for document in documents:
            assert isinstance(document, dict) and {"apiVersion", "kind", "metadata"} <= document.keys(), name
            manifests.append(document)
    return manifests, renderer.render("NOTES.txt")


def one(manifests: list[dict], kind: str, name: str | None = None) -> dict:
    found = [m for m in manifests if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)]
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
    assert set(values["spark"]) == {"namespace", "image", "version", "serviceAccount", "pendingTimeout", "retention"}
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


def test_renderer_refuses_a_value_that_does_not_exist(tmp_path):
    (tmp_path / "templates").mkdir()
    (tmp_path / "Chart.yaml").write_text("name: x\nversion: 0.1.0\nappVersion: '1'\n")
    (tmp_path / "templates" / "cm.yaml").write_text("data: {{ .Values.spark.imge | quote }}\n")
    with pytest.raises(TemplateError, match="spark.imge"):
        Renderer(tmp_path, default_values(), RELEASE).render("cm.yaml")


def test_templates_render_the_expected_objects():
    manifests, _ = render_chart()
    kinds = sorted((m["kind"], m["metadata"]["name"]) for m in manifests)
    assert kinds == [
        ("ClusterRole", "dagline-discovery"),
        ("ClusterRoleBinding", "dagline-discovery"),
        ("Deployment", "dagline"),
        ("Job", "dagline-db-upgrade"),
        ("Role", "dagline-controller"),
        ("Role", "dagline-spark"),
        ("RoleBinding", "dagline-controller"),
        ("RoleBinding", "dagline-spark"),
        ("Service", "dagline-metrics"),
        ("ServiceAccount", "dagline"),
    ]
    for manifest in manifests:
        labels = manifest["metadata"]["labels"]
        assert labels["app.kubernetes.io/instance"] == "dagline" and labels["helm.sh/chart"] == "dagline-0.1.0"
        if not manifest["kind"].startswith("Cluster"):
            assert manifest["metadata"]["namespace"] == "dataplat"


def test_release_name_prefixes_every_object():
    manifests, _ = render_chart(release={**RELEASE, "Name": "prod"})
    assert {m["metadata"]["name"].split("-")[0] for m in manifests} == {"prod"}
    assert one(manifests, "Deployment")["metadata"]["name"] == "prod-dagline"


EXPECTED_ENV = {
    "DAGLINE_DB_URL": {"secretKeyRef": {"name": "dagline-db", "key": "url"}},
    "DAGLINE_NAMESPACE": "dataplat",
    "DAGLINE_SPARK_NAMESPACE": "dataplat",
    "DAGLINE_SPARK_SPARK_VERSION": "3.5.3",
    "DAGLINE_SPARK_SERVICE_ACCOUNT": "spark-operator-spark",
    "DAGLINE_SPARK_PENDING_TIMEOUT": "PT15M",
    "DAGLINE_SPARK_RETENTION": "delete-succeeded",
    "DAGLINE_HEALTH_PORT": "8080",
    "DAGLINE_METRICS_PORT": "9090",
    "DAGLINE_DAGRUN_HISTORY_LIMIT": "50",
    "DAGLINE_PARALLELISM": "32",
    "DAGLINE_STATUS_INTERVAL": "2",
    "DAGLINE_LIVENESS_TIMEOUT": "60",
    "DAGLINE_LOG_FORMAT": "text",
}


def test_deployment_runs_the_operator_with_its_settings():
    manifests, _ = render_chart()
    deployment = one(manifests, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    pod = deployment["spec"]["template"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pod["spec"]["serviceAccountName"] == one(manifests, "ServiceAccount")["metadata"]["name"]
    [container] = pod["spec"]["containers"]
    assert container["image"] == "dagline/operator:0.1.0"
    assert container["command"] + container["args"] == ["dagline", "operator"]
    assert container_env(container) == EXPECTED_ENV  # DAGLINE_SPARK_IMAGE only when set
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"health": 8080, "metrics": 9090}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["resources"]["requests"] == {"cpu": "100m", "memory": "256Mi"}
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_values_reach_the_environment():
    manifests, _ = render_chart({
        "watch": {"allNamespaces": True},
        "spark": {"namespace": "spark-jobs", "image": "registry.example/jobs:7", "retention": "keep",
                  "pendingTimeout": 600},
        "health": {"port": 8181}, "dagrunHistoryLimit": 10, "replicaCount": 3,
        "database": {"secretName": "pg", "secretKey": "dsn"},
        "extraEnv": [{"name": "TZ", "value": "UTC"}],
    })
    deployment = one(manifests, "Deployment")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    env = container_env(container)
    assert env["DAGLINE_NAMESPACE"] == ""  # all namespaces
    assert env["DAGLINE_SPARK_NAMESPACE"] == "spark-jobs"
    assert env["DAGLINE_SPARK_IMAGE"] == "registry.example/jobs:7"
    assert (env["DAGLINE_SPARK_RETENTION"], env["DAGLINE_SPARK_PENDING_TIMEOUT"]) == ("keep", "600")
    assert (env["DAGLINE_HEALTH_PORT"], env["DAGLINE_DAGRUN_HISTORY_LIMIT"]) == ("8181", "10")
    assert env["DAGLINE_DB_URL"] == {"secretKeyRef": {"name": "pg", "key": "dsn"}}
    assert env["TZ"] == "UTC"
    assert deployment["spec"]["replicas"] == 3
    assert {"name": "health", "containerPort": 8181, "protocol": "TCP"} in container["ports"]


def test_metrics_service_selects_the_operator_pods():
    manifests, _ = render_chart()
    service = one(manifests, "Service")
    pod_labels = one(manifests, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert service["spec"]["ports"] == [{"name": "metrics", "port": 9090, "targetPort": "metrics", "protocol": "TCP"}]


def test_database_is_migrated_once_by_a_hook_job():
    manifests, _ = render_chart()
    job = one(manifests, "Job")
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in pod  # hooks run before the chart's ServiceAccount exists
    [container] = pod["containers"]
    assert container["command"] == ["dagline", "db", "upgrade"]
    assert container_env(container) == {"DAGLINE_DB_URL": EXPECTED_ENV["DAGLINE_DB_URL"]}
    assert [m for m in render_chart({"migrations": {"enabled": False}})[0] if m["kind"] == "Job"] == []


def test_service_account_and_rbac_can_be_left_to_the_platform():
    manifests, _ = render_chart({"serviceAccount": {"create": False, "name": "platform-sa"}, "rbac": {"create": False}})
    assert sorted(m["kind"] for m in manifests) == ["Deployment", "Job", "Service"]
    assert one(manifests, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "platform-sa"


# --- RBAC: exactly what the operator uses ---------------------------------------------------------

CONTROLLER_RULES = {
    ("dagline.io", resource, verb) for resource in ("dags", "dagruns", "backfills", "pools")
    for verb in ("get", "list", "watch", "patch")
} | {
    ("dagline.io", f"{resource}/status", "patch") for resource in ("dags", "dagruns", "backfills", "pools")
} | {
    ("dagline.io", "dagruns", "create"), ("dagline.io", "dagruns", "delete"), ("", "events", "create"),
}
DISCOVERY_RULES = {
    ("apiextensions.k8s.io", "customresourcedefinitions", verb) for verb in ("get", "list", "watch")
} | {("", "namespaces", "list"), ("", "namespaces", "watch")}
# What dagline.k8s.executor calls: create, get, list (it polls; no watch), patch (labels of kept ones), delete.
SPARK_RULES = {("sparkoperator.k8s.io", "sparkapplications", verb)
               for verb in ("get", "list", "create", "patch", "delete")}


def granted(manifests: list[dict]) -> set[tuple[str, str, str, str]]:
    """(where, apiGroup, resource, verb) the chart's ServiceAccount gets; where = a namespace or "cluster"."""
    account = one(manifests, "ServiceAccount")["metadata"]
    roles = {(m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"]): m
             for m in manifests if m["kind"] in ("Role", "ClusterRole")}
    grants = set()
    for binding in (m for m in manifests if m["kind"] in ("RoleBinding", "ClusterRoleBinding")):
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
    manifests, _ = render_chart()
    expected = ({("cluster", *rule) for rule in DISCOVERY_RULES} | {("dataplat", *rule) for rule in CONTROLLER_RULES}
                | {("dataplat", *rule) for rule in SPARK_RULES})
    assert granted(manifests) == expected


def test_rbac_follows_the_watched_and_spark_namespaces():
    manifests, _ = render_chart({"watch": {"namespace": "pipelines"}, "spark": {"namespace": "spark-jobs"}})
    expected = ({("cluster", *rule) for rule in DISCOVERY_RULES} | {("pipelines", *rule) for rule in CONTROLLER_RULES}
                | {("spark-jobs", *rule) for rule in SPARK_RULES})
    assert granted(manifests) == expected
    all_namespaces, _ = render_chart({"watch": {"allNamespaces": True}})
    expected = ({("cluster", *rule) for rule in DISCOVERY_RULES | CONTROLLER_RULES}
                | {("dataplat", *rule) for rule in SPARK_RULES})
    assert granted(all_namespaces) == expected


def test_callback_secrets_are_granted_by_name_and_only_when_listed():
    manifests, _ = render_chart({"callbacks": {"secretNames": ["sales-hooks", "ops-hooks"]}})
    expected = ({("cluster", *rule) for rule in DISCOVERY_RULES} | {("dataplat", *rule) for rule in CONTROLLER_RULES}
                | {("dataplat", *rule) for rule in SPARK_RULES}
                | {("dataplat", "", "secrets/sales-hooks", "get"), ("dataplat", "", "secrets/ops-hooks", "get")})
    assert granted(manifests) == expected
    assert not any("secrets" in r for _, _, r, _ in granted(render_chart()[0]))
    env = {e["name"]: e.get("value") for e in one(render_chart({"logFormat": "json"})[0], "Deployment")
           ["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["DAGLINE_LOG_FORMAT"] == "json"


def test_a_widened_rule_is_caught():
    manifests, _ = render_chart()
    one(manifests, "Role", "dagline-spark")["rules"][0]["verbs"].append("watch")
    assert ("dataplat", "sparkoperator.k8s.io", "sparkapplications", "watch") in granted(manifests)
    assert granted(manifests) != granted(render_chart()[0])


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
    _, notes = render_chart()
    assert "examples/k8s/pool.yaml" in notes and "examples/k8s/dag.yaml" in notes
    assert "kubectl -n dataplat get dags" in notes
    assert "secret generic dagline-db" in notes
    assert notes.index("pool.yaml") < notes.index("dag.yaml") < notes.index("get dags")
    assert "{{" not in notes
