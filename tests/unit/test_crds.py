"""The generated CRDs: up to date with the models, structural as the apiserver requires, and in agreement
with the models on the example manifests (valid ones pass, broken ones are refused by both).

No apiserver runs here, so the rules the apiserver applies to a CRD schema (apiextensions validation and
"structural schema") are checked by `structural_problems`, and objects are validated with `jsonschema`
against the openAPIV3Schema the way kubectl/the apiserver treat it: `nullable` allows null, and an unknown
field is an error wherever unknown fields are not preserved (`kubectl apply`'s strict field validation).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import pathlib
import re
import subprocess
from typing import Any

import jsonschema
import kubernetes
import pytest
import yaml
from pydantic import BaseModel, ValidationError

from dagline.errors import InvalidInput
from dagline.k8s import crds
from dagline.k8s.resources import API_VERSION, KINDS, Kind
from dagline.spec import parse_dag_document
from dagline.spec.dag import deprecated_spellings
from tests.tools.fetch_k8s_tools import ensure_kubectl

ROOT = pathlib.Path(__file__).resolve().parents[2]
BY_KIND = {kind.kind: kind for kind in KINDS}

# --- the apiserver's rules for a CRD schema ----------------------------------------------------

# The fields of apiextensions.k8s.io/v1 JSONSchemaProps (from the kubernetes client's model of it): anything
# else is refused or silently dropped by the apiserver.
SCHEMA_FIELDS = set(kubernetes.client.V1JSONSchemaProps.attribute_map.values())
# Refused by the apiserver in a v1 CRD (or not structural): we use none of them.
FORBIDDEN = {"id", "$schema", "$ref", "definitions", "$defs", "patternProperties", "dependencies", "additionalItems",
             "allOf", "oneOf", "anyOf", "not", "const"}
ROOT_FIELDS = {"description", "type", "format", "title", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
               "maxLength", "minLength", "pattern", "maxItems", "minItems", "uniqueItems", "multipleOf", "required",
               "items", "properties", "externalDocs", "example", "x-kubernetes-preserve-unknown-fields",
               "x-kubernetes-validations"}
TYPES = {"array", "boolean", "integer", "number", "object", "string"}


def structural_problems(schema: dict[str, Any]) -> list[str]:
    """Every rule of a structural v1 CRD schema this test can check, as a list of problems."""
    problems: list[str] = []

    def walk(node: Any, path: str, in_metadata: bool = False) -> None:
        if not isinstance(node, dict):
            problems.append(f"{path}: not a schema object")
            return
        for key in node:
            if key not in SCHEMA_FIELDS:
                problems.append(f"{path}: unknown keyword {key!r}")
            if key in FORBIDDEN:
                problems.append(f"{path}: {key} is not allowed in a structural schema")
        preserve = node.get("x-kubernetes-preserve-unknown-fields")
        if preserve is not None and preserve is not True:
            problems.append(f"{path}: x-kubernetes-preserve-unknown-fields must be true or absent")
        kind = node.get("type")
        if kind is None and not preserve and not node.get("x-kubernetes-int-or-string"):
            problems.append(f"{path}: no type (and no x-kubernetes-preserve-unknown-fields)")
        if kind is not None and kind not in TYPES:
            problems.append(f"{path}: type {kind!r} (use nullable for null)")
        if "nullable" in node and node["nullable"] is not True:
            problems.append(f"{path}: nullable must be true or absent")
        if node.get("uniqueItems"):
            problems.append(f"{path}: uniqueItems cannot be true")
        if "properties" in node and kind != "object":
            problems.append(f"{path}: properties on a {kind!r}")
        if "additionalProperties" in node:
            if "properties" in node:
                problems.append(f"{path}: additionalProperties and properties are mutually exclusive")
            if not isinstance(node["additionalProperties"], dict):
                problems.append(f"{path}: additionalProperties must be a schema")
        if kind == "array" and not isinstance(node.get("items"), dict):
            problems.append(f"{path}: an array needs one items schema")
        if "items" in node and kind != "array":
            problems.append(f"{path}: items on a {kind!r}")
        for name in node.get("required", []):
            if name not in node.get("properties", {}):
                problems.append(f"{path}: required {name!r} is not a property")
        if "description" in node and not isinstance(node["description"], str):
            problems.append(f"{path}: description is not a string")
        if "default" in node:
            if in_metadata:
                problems.append(f"{path}: no defaults in metadata")
            elif node["default"] is None:
                problems.append(f"{path}: a null default")
            else:
                errors = list(jsonschema.Draft4Validator(as_json_schema(node)).iter_errors(node["default"]))
                if errors:
                    problems.append(f"{path}: default {node['default']!r} is invalid: {errors[0].message}")
        for name, prop in node.get("properties", {}).items():
            walk(prop, f"{path}.{name}", in_metadata)
        if isinstance(node.get("items"), dict):
            walk(node["items"], f"{path}[]", in_metadata)
        if isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], f"{path}.*", in_metadata)

    for key in schema:
        if key not in ROOT_FIELDS:
            problems.append(f"root: {key!r} is not allowed at the root of a CRD schema")
    if schema.get("type") != "object":
        problems.append("root: type must be object")
    walk(schema, "root")
    metadata = schema.get("properties", {}).get("metadata")
    if metadata is not None:
        if set(metadata) - {"type", "properties"} or metadata.get("type") != "object":
            problems.append("metadata: only `type: object` and restrictions of name/generateName are allowed")
        for name, prop in metadata.get("properties", {}).items():
            if name not in ("name", "generateName"):
                problems.append(f"metadata.{name}: only name and generateName may be restricted")
            if "default" in prop:
                problems.append(f"metadata.{name}: no defaults in metadata")
    return problems


def as_json_schema(node: Any) -> Any:
    """An openAPIV3Schema as a JSON schema with the apiserver's semantics (see the module docstring)."""
    if not isinstance(node, dict):
        return node
    result = {key: as_json_schema(value) for key, value in node.items()
              if key not in ("nullable", "default", "properties", "items", "additionalProperties")
              and not key.startswith("x-kubernetes-")}
    if "properties" in node:
        result["properties"] = {name: as_json_schema(prop) for name, prop in node["properties"].items()}
        if not node.get("x-kubernetes-preserve-unknown-fields"):
            result["additionalProperties"] = False
    if "items" in node:
        result["items"] = as_json_schema(node["items"])
    if "additionalProperties" in node:
        result["additionalProperties"] = as_json_schema(node["additionalProperties"])
    if node.get("nullable") and "type" in node:
        result["type"] = [node["type"], "null"]
        if "enum" in result:
            result["enum"] = [*result["enum"], None]
    return result


def schema_of(kind: Kind) -> dict[str, Any]:
    crd = yaml.safe_load((ROOT / "crds" / crds.file_name(kind)).read_text())
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def schema_errors(document: dict[str, Any]) -> list[str]:
    """What the apiserver would refuse in this object: `path: message` per problem."""
    validator = jsonschema.Draft4Validator(as_json_schema(schema_of(BY_KIND[document["kind"]])))
    return sorted(f"{'.'.join(map(str, error.absolute_path))}: {error.message}"
                  for error in validator.iter_errors(document))


def model_accepts(document: dict[str, Any]) -> bool:
    """Whether dagline's models accept this object (the DAG's cross-field checks included)."""
    kind = BY_KIND[document["kind"]]
    try:
        if kind.kind == "DAG":
            parse_dag_document(document)
        else:
            kind.spec_model.model_validate(document["spec"])
    except (InvalidInput, ValidationError):
        return False
    return True


def _plain(value: Any) -> Any:
    """A YAML document as kubectl sends it: JSON, unquoted dates as strings."""
    return json.loads(json.dumps(value, default=lambda v: v.isoformat() if isinstance(v, dt.date) else str(v)))


def example_documents() -> list[tuple[str, dict[str, Any]]]:
    """Every dagline object of examples/k8s/, and the DAG documents of examples/sales_daily/dag.yaml."""
    found = []
    for path in sorted((ROOT / "examples" / "k8s").glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("apiVersion") == API_VERSION:
                found.append((f"{path.relative_to(ROOT)}:{document['kind']}", _plain(document)))
    path = ROOT / "examples" / "sales_daily" / "dag.yaml"
    found += [(f"{path.relative_to(ROOT)}:DAG", _plain(document)) for document in yaml.safe_load_all(path.read_text())
              if document and document.get("kind") == "DAG"]
    return found


EXAMPLES = example_documents()


def example(kind: str, source: str = "examples/k8s/") -> dict[str, Any]:
    return copy.deepcopy(next(doc for name, doc in EXAMPLES if name.startswith(source) and doc["kind"] == kind))


# --- (a) the files are what the models generate ------------------------------------------------


def test_crd_files_are_generated_from_the_models():
    problems = crds.check(ROOT)
    assert problems == [], "CRDs drifted from the models -- run `make crds`:\n" + "\n".join(problems)


def test_drift_is_reported_with_the_command_that_fixes_it(tmp_path, capsys):
    assert crds.main(["--root", str(tmp_path)]) == 0
    assert crds.check(tmp_path) == []
    (tmp_path / "charts/dagline/crds/pools.dagline.io.yaml").write_text("# edited by hand\n")
    (tmp_path / "crds/old.dagline.io.yaml").write_text("# a kind that is gone\n")
    assert crds.main(["--root", str(tmp_path), "--check"]) == 1
    err = capsys.readouterr().err
    assert "charts/dagline/crds/pools.dagline.io.yaml: differs from the models" in err
    assert "crds/old.dagline.io.yaml: not generated from any kind" in err
    assert "make crds" in err
    crds.write(tmp_path)
    assert crds.check(tmp_path) == []
    assert not (tmp_path / "crds/old.dagline.io.yaml").exists()


def test_one_crd_per_kind_named_as_kubernetes_expects():
    for kind in KINDS:
        crd = yaml.safe_load((ROOT / "crds" / crds.file_name(kind)).read_text())
        spec = crd["spec"]
        assert crd["metadata"]["name"] == f"{kind.plural}.dagline.io"
        assert (spec["group"], spec["scope"]) == ("dagline.io", "Namespaced")
        assert spec["names"]["kind"] == kind.kind and spec["names"]["categories"] == ["dagline"]
        assert spec["names"]["shortNames"] == list(kind.short_names)
        [version] = spec["versions"]
        assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
        assert version["subresources"] == {"status": {}}
        assert set(version["schema"]["openAPIV3Schema"]["properties"]) == {
            "apiVersion", "kind", "metadata", "spec", "status"}


def test_crds_read_as_the_kubernetes_api_types_without_losing_a_field():
    api = kubernetes.client.ApiClient()
    for kind in KINDS:
        data = yaml.safe_load((ROOT / "crds" / crds.file_name(kind)).read_text())
        crd = api._ApiClient__deserialize(data, "V1CustomResourceDefinition")  # checks required fields
        assert api.sanitize_for_serialization(crd) == data, f"{kind.kind}: a field the API types do not know"


# --- structural schemas --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_schema_is_structural(kind):
    assert structural_problems(schema_of(kind)) == []


def test_the_structural_check_finds_what_the_apiserver_refuses():
    bad = {
        "type": "object",
        "nullable": True,
        "properties": {
            "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
            "a": {"$ref": "#/$defs/A"},
            "b": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "c": {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": False},
            "d": {"type": "array"},
            "e": {"type": "integer", "default": "three"},
        },
    }
    problems = "\n".join(structural_problems(bad))
    for expected in ("'nullable' is not allowed at the root", "root.a: $ref", "root.a: no type", "root.b: anyOf",
                     "root.c: additionalProperties and properties", "root.d: an array needs one items schema",
                     "root.e: default 'three' is invalid", "metadata.labels: only name and generateName"):
        assert expected in problems


def test_free_form_fields_keep_unknown_fields_and_optional_ones_are_nullable():
    spec = schema_of(BY_KIND["DAG"])["properties"]["spec"]["properties"]
    assert spec["params"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    assert spec["schedule"]["nullable"] is True and spec["schedule"]["type"] == "string"
    spark = spec["tasks"]["items"]["properties"]["spark"]["properties"]
    assert spark["conf"]["additionalProperties"] == {"type": "string"}  # Spark conf values stay strings
    assert spark["driver"]["properties"]["memory"]["type"] == "string"
    dag_run = schema_of(BY_KIND["DagRun"])["properties"]["spec"]["properties"]
    assert dag_run["conf"]["x-kubernetes-preserve-unknown-fields"] is True


def test_a_union_without_a_structural_form_stops_the_generation():
    class Ambiguous(BaseModel):
        value: int | str

    with pytest.raises(crds.SchemaError, match=r"Ambiguous\.value: a union of 2 non-null types"):
        crds.structural_schema(Ambiguous)


# --- (b) the examples validate, and the models accept them too ---------------------------------


def test_every_kind_has_an_example():
    kinds = sorted(doc["kind"] for name, doc in EXAMPLES if name.startswith("examples/k8s/"))
    assert kinds == ["Backfill", "DAG", "DagRun", "Pool"]
    assert any(name.startswith("examples/sales_daily/") for name, _ in EXAMPLES)


@pytest.mark.parametrize("name,document", EXAMPLES, ids=[name for name, _ in EXAMPLES])
def test_example_manifest_is_valid(name, document):
    assert schema_errors(document) == []
    assert model_accepts(document)


def test_the_cluster_dag_mirrors_the_local_pipeline():
    local, cluster = example("DAG", "examples/sales_daily/"), example("DAG")
    assert cluster["metadata"]["name"] == local["metadata"]["name"]
    shape = ("id", "upstream", "pool", "poolSlots", "triggerRule", "executionTimeout")
    assert [{k: t.get(k) for k in shape} for t in cluster["spec"]["tasks"]] == [
        {k: t.get(k) for k in shape} for t in local["spec"]["tasks"]]
    for task in cluster["spec"]["tasks"]:
        job = task["spark"]["mainApplicationFile"]
        assert job == f"local:///opt/dagline/examples/sales_daily/jobs/{task['id']}.py"
        assert (ROOT / "examples/sales_daily/jobs" / f"{task['id']}.py").is_file()
        assert task["spark"]["image"]


def test_a_minimal_object_validates():
    assert schema_errors({"apiVersion": API_VERSION, "kind": "Pool", "metadata": {"name": "p"},
                          "spec": {"slots": 0}}) == []
    dag = {"apiVersion": API_VERSION, "kind": "DAG", "metadata": {"name": "tiny"},
           "spec": {"tasks": [{"id": "t", "spark": {"mainApplicationFile": "job.py"}}],
                    "params": {"nested": {"list": [1, "two", None]}}}}
    assert schema_errors(dag) == [] and model_accepts(dag)


# --- (c) broken manifests are refused, by the schema and by the models ---------------------------


def _broken(kind: str, change) -> dict[str, Any]:
    document = example(kind)
    change(document)
    return document


# case -> (object, an error the schema reports, whether the models refuse it as well)
BROKEN = {
    "unknown field": (_broken("DAG", lambda d: d["spec"]["tasks"][0]["spark"].update(mainAppFile="x.py")),
                      "Additional properties are not allowed ('mainAppFile' was unexpected)", True),
    "unknown top-level spec field": (_broken("Backfill", lambda d: d["spec"].update(until="2026-03-09")),
                                     "'until' was unexpected", True),
    "wrong type": (_broken("Pool", lambda d: d["spec"].update(slots="four")), "spec.slots: 'four' is not of type",
                   True),
    # The models turn YAML numbers into text for DAG files; the CRD keeps their declared type (string, as the
    # spark-operator's sparkConf), so on Kubernetes a conf value must be quoted.
    "conf value not a string": (
        _broken("DAG", lambda d: d["spec"]["tasks"][0]["spark"].update(conf={"spark.executor.instances": 2})),
        "2 is not of type 'string'", False),
    "missing required": (_broken("Backfill", lambda d: d["spec"].pop("start")), "'start' is a required property",
                         True),
    "no tasks": (_broken("DAG", lambda d: d["spec"].update(tasks=[])), "spec.tasks: [] should be non-empty", True),
    "unknown trigger rule": (_broken("DAG", lambda d: d["spec"]["tasks"][4].update(triggerRule="all_sucess")),
                             "'all_sucess' is not one of", True),
    "negative slots": (_broken("Pool", lambda d: d["spec"].update(slots=-1)), "-1 is less than the minimum of 0",
                       True),
    "dag id not a DNS label": (_broken("DAG", lambda d: d["metadata"].update(name="Sales_Daily")),
                               "metadata.name: 'Sales_Daily' does not match", True),
    "no spec": (_broken("DagRun", lambda d: d.pop("spec")), "'spec' is a required property", None),
    # `log` and `kubernetesEvent` callbacks take no fields: the CRD refuses one at apply, as the models do,
    # instead of letting it in for the operator to refuse later (issue 28).
    "a field in a callback that takes none": (
        _broken("DAG", lambda d: d["spec"].update(callbacks=[{"events": ["failure"], "log": {"level": "debug"}}])),
        "'level' was unexpected", True),
}


@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_broken_manifest_is_refused(case):
    document, expected, models_refuse = BROKEN[case]
    errors = schema_errors(document)
    assert any(expected in error for error in errors), errors
    if models_refuse is not None:
        assert model_accepts(document) is not models_refuse


# --- (d) printer columns name fields that exist --------------------------------------------------

OBJECT_META = {"name", "namespace", "creationTimestamp", "labels", "annotations", "uid", "generation"}
COLUMN_TYPES = {"string": {"string"}, "date": {"string"}, "integer": {"integer"}, "boolean": {"boolean"},
                "number": {"number", "integer"}}


def resolve_json_path(schema: dict[str, Any], path: str) -> dict[str, Any] | None:
    """The schema node a printer column's JSONPath reads (None if it names no field)."""
    node = schema
    for part in re.findall(r"\.([A-Za-z0-9_]+)|\[\?\(@\.([A-Za-z0-9_]+)==[^)]*\)\]|\[(\d+|\*)\]", path):
        field, filtered, index = part
        if field:
            if node is schema.get("properties", {}).get("metadata"):
                return {"type": "string"} if field in OBJECT_META else None
            node = node.get("properties", {}).get(field)
        else:
            if node.get("type") != "array":
                return None
            node = node["items"]
            if filtered and filtered not in node.get("properties", {}):
                return None
        if node is None:
            return None
    return node


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.kind)
def test_printer_columns_name_fields_of_the_schema(kind):
    schema = schema_of(kind)
    crd = yaml.safe_load((ROOT / "crds" / crds.file_name(kind)).read_text())
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [column["name"] for column in columns] == [column.name for column in kind.columns]
    for column in columns:
        node = resolve_json_path(schema, column["jsonPath"])
        assert node is not None, f"{kind.kind} column {column['name']}: {column['jsonPath']} is not in the schema"
        assert node["type"] in COLUMN_TYPES[column["type"]], f"{kind.kind} column {column['name']}"


def test_the_json_path_check_can_fail():
    schema = schema_of(BY_KIND["Backfill"])
    assert resolve_json_path(schema, ".status.succeeded") == {"type": "integer", "default": 0}
    assert resolve_json_path(schema, ".status.succeded") is None
    assert resolve_json_path(schema, ".status.conditions[?(@.kind==\"Ready\")].status") is None
    assert resolve_json_path(schema, ".metadata.creationTimestamp") is not None


@pytest.mark.parametrize("name", ["a", "sales-daily", "0x", "a" * 63, "a" * 64, "-a", "a-", "Sales", "a_b", "a.b"])
def test_dag_name_rule_of_the_schema_is_the_models(name):
    document = {"apiVersion": API_VERSION, "kind": "DAG", "metadata": {"name": name},
                "spec": {"tasks": [{"id": "t", "spark": {"mainApplicationFile": "job.py"}}]}}
    assert (schema_errors(document) == []) is model_accepts(document)


def test_kubectl_get_dags_shows_paused_and_ready_from_the_status():
    """A pause from the CLI, API or UI changes the database, not `spec.paused`: the column reads the
    status the operator writes from the database; Ready shows without `-o wide`."""
    columns = {c.name: c for c in BY_KIND["DAG"].columns}
    assert columns["Paused"].json_path == ".status.paused"
    assert columns["Ready"].priority == 0
    assert [name for name in columns][:6] == ["Schedule", "Paused", "Version", "Next Run", "Last Run", "Ready"]


# --- (e) what kubectl sends: YAML 1.1 through the real kubectl ------------------------------------

KUBECTL_EXAMPLES = sorted({*ROOT.glob("examples/**/dag.yaml"), *ROOT.glob("examples/k8s/*.yaml")})


def as_kubectl_sends(path: pathlib.Path) -> list[dict[str, Any]]:
    """The JSON objects kubectl would send for a file: its own YAML-to-JSON path (go-yaml, YAML 1.1),
    with no server (`annotate --local`)."""
    result = subprocess.run([str(ensure_kubectl()), "annotate", "--local", "-f", str(path), "-o", "json",
                             "dagline.io/checked=yes"], capture_output=True, text=True, timeout=60,
                            env={"PATH": "/usr/bin:/bin", "KUBECONFIG": "/nonexistent", "HOME": str(path.parent)})
    assert result.returncode == 0, result.stderr
    decoder, text, documents = json.JSONDecoder(), result.stdout, []
    position = 0
    while text[position:].strip():  # one JSON object per YAML document, one after the other
        position += len(text[position:]) - len(text[position:].lstrip())
        document, position = decoder.raw_decode(text, position)
        documents.append(document)
    for document in documents:  # the probe's own annotation: the apiserver keeps metadata apart from the schema
        document["metadata"].pop("annotations", None)
    return documents


@pytest.mark.parametrize("path", KUBECTL_EXAMPLES, ids=[str(p.relative_to(ROOT)) for p in KUBECTL_EXAMPLES])
def test_every_example_survives_kubectl_and_the_crd(path):
    """`kubectl apply` is strict by default: a key the CRD does not declare (an unquoted `on:` arrives as
    `true`) refuses the whole DAG. Every example, as kubectl sends it, validates and keeps its rules."""
    for document in as_kubectl_sends(path):
        if document.get("apiVersion") != API_VERSION:
            continue
        assert schema_errors(document) == []
        if document["kind"] == "DAG":
            parsed = parse_dag_document(document)
            written = next(d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "DAG")
            assert [len(t.on) for t in parsed.spec.tasks] == [len(t.get("onSignal", [])) for t in
                                                               written["spec"]["tasks"]]
            assert deprecated_spellings(document) == []


def test_a_dag_written_with_the_old_on_key_still_applies_with_kubectl(tmp_path):
    old = (ROOT / "examples" / "ml-signals" / "dag.yaml").read_text().replace("onSignal:", "on:")
    (tmp_path / "dag.yaml").write_text(old)
    [document] = as_kubectl_sends(tmp_path / "dag.yaml")
    sent_keys = [sorted(task) for task in document["spec"]["tasks"]]
    assert ["id", "spark", "true"] in sent_keys  # what go-yaml makes of `on:`
    assert schema_errors(document) == []  # strict apply accepts it; nothing is pruned
    parsed = parse_dag_document(document)
    assert [rule.signal for task in parsed.spec.tasks for rule in task.on] == ["model.published", "model.validated"]
    warnings = deprecated_spellings(document)
    assert len(warnings) == 2 and all("renamed to onSignal" in w for w in warnings)
