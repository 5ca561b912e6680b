"""The API server's rules on what objects contain: names, labels, selectors, merge patches, CRD schemas.

Pure functions the emulator (`tests.helpers.k8s.emulator`) applies to every write and read: RFC 1123
names and label syntax, label and field selectors, RFC 7386 merge patches, and the structural-schema treatment of
custom resources (pruning of undeclared fields, defaulting, OpenAPI validation). Problems are returned as
(field, message) pairs, worded as the API server words them.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

# --------------------------------------------------------------------------------------------------
# Validation of names, labels and owner references (the rules kubectl users meet)

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
DNS_LABEL = re.compile(_DNS_LABEL)
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
GENERATED_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"


def name_problems(name: Any, *, dns_label: bool = False) -> list[str]:
    if not isinstance(name, str) or not name:
        return ["Required value: name or generateName is required"]
    limit, pattern = (63, DNS_LABEL) if dns_label else (253, DNS_SUBDOMAIN)
    if len(name) > limit or not pattern.fullmatch(name):
        kind = "RFC 1123 label" if dns_label else "RFC 1123 subdomain"
        return [f'Invalid value: "{name}": a lowercase {kind} must consist of lower case alphanumeric '
                f"characters, '-' or '.', and must start and end with an alphanumeric character"]
    return []


def _key_problems(key: Any) -> list[str]:
    if not isinstance(key, str):
        return [f"Invalid value: {key!r}: keys must be strings"]
    prefix, _, name = key.rpartition("/")
    problems = []
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.fullmatch(prefix)):
        problems.append(f'Invalid value: "{key}": prefix part must be a lowercase RFC 1123 subdomain')
    if not name or len(name) > 63 or not QUALIFIED_NAME.fullmatch(name):
        problems.append(f'Invalid value: "{key}": name part must consist of alphanumeric characters, '
                        "'-', '_' or '.', must start and end with an alphanumeric character, at most 63")
    return problems


def metadata_problems(meta: dict[str, Any]) -> list[tuple[str, str]]:
    """Everything the API server would reject in `metadata` (except the name, checked on create)."""
    causes: list[tuple[str, str]] = []
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        return [("metadata.labels", "Invalid value: must be a map of strings")]
    for key, value in labels.items():
        causes += [("metadata.labels", p) for p in _key_problems(key)]
        if not isinstance(value, str) or len(value) > 63 or (value and not QUALIFIED_NAME.fullmatch(value)):
            causes.append(("metadata.labels", f'Invalid value: "{value}": a valid label must be an empty string or '
                           "consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
                           "alphanumeric character, at most 63 characters"))
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        return causes + [("metadata.annotations", "Invalid value: must be a map of strings")]
    for key, value in annotations.items():
        causes += [("metadata.annotations", p) for p in _key_problems(key)]
        if not isinstance(value, str):
            causes.append(("metadata.annotations", f"Invalid value: {value!r}: values must be strings"))
    for i, owner in enumerate(meta.get("ownerReferences") or ()):
        for field in ("apiVersion", "kind", "name", "uid"):
            if not isinstance(owner, dict) or not owner.get(field):
                causes.append((f"metadata.ownerReferences[{i}].{field}", "Required value"))
    finalizers = meta.get("finalizers") or []
    if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
        causes.append(("metadata.finalizers", "Invalid value: must be a list of strings"))
    return causes


# --------------------------------------------------------------------------------------------------
# Selectors

_SET_OP = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\((.*)\)\s*$")


def _split_terms(selector: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for ch in selector:
        if ch == "," and depth == 0:
            terms.append(current)
            current = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        current += ch
    terms.append(current)
    return [t.strip() for t in terms if t.strip()]


def label_matcher(selector: str | None):
    """`a=b,c!=d,e,!f,g in (x,y),h notin (z)` as a predicate on a labels dict."""
    checks = []
    for term in _split_terms(selector or ""):
        if m := _SET_OP.match(term):
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                checks.append(lambda labels, k=key, vs=values: labels.get(k) in vs)
            else:
                checks.append(lambda labels, k=key, vs=values: labels.get(k) not in vs)
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            checks.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            checks.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif term.startswith("!"):
            checks.append(lambda labels, k=term[1:].strip(): k not in labels)
        else:
            checks.append(lambda labels, k=term: k in labels)
    return lambda labels: all(check(labels or {}) for check in checks)


def _field(obj: dict[str, Any], path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return "" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def field_matcher(selector: str | None):
    """`metadata.name=x,status.phase!=Running` as a predicate on an object (any dotted path)."""
    checks = []
    for term in _split_terms(selector or ""):
        if "!=" in term:
            path, value = (s.strip() for s in term.split("!=", 1))
            checks.append(lambda obj, p=path, v=value: _field(obj, p) != v)
        elif "=" in term:
            path, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            checks.append(lambda obj, p=path, v=value: _field(obj, p) == v)
    return lambda obj: all(check(obj) for check in checks)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (also used for strategic merge patches: lists are replaced)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --------------------------------------------------------------------------------------------------
# Structural schemas of CustomResourceDefinitions: pruning, defaulting, validation (as the API server does)

_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool}


def prune(value: Any, schema: dict[str, Any] | None) -> Any:
    """Drop the fields a structural schema does not declare, and fill in `default`s of absent properties."""
    if not schema:
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep = schema.get("x-kubernetes-preserve-unknown-fields") or extra is True
        out = {}
        for key, item in value.items():
            if key in props:
                out[key] = prune(item, props[key])
            elif isinstance(extra, dict):
                out[key] = prune(item, extra)
            elif keep:
                out[key] = item
        for key, sub in props.items():
            if key not in out and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(item, schema["items"]) for item in value]
    return value


def _type_ok(value: Any, schema: dict[str, Any]) -> bool:
    if schema.get("x-kubernetes-int-or-string"):
        return isinstance(value, (int, str)) and not isinstance(value, bool)
    wanted = schema.get("type")
    if wanted in (None, ""):
        return True
    if wanted == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if wanted == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES.get(wanted, object))


def schema_problems(value: Any, schema: dict[str, Any] | None, path: str) -> list[tuple[str, str]]:
    """What the API server's OpenAPI validation reports, as (field, message) pairs."""
    if not schema:
        return []
    shown = json.dumps(value)
    if value is None:
        ok = schema.get("nullable") or not schema.get("type")
        return [] if ok else [(path, f'Invalid value: "null": {path} in body must be of type {schema["type"]}')]
    if not _type_ok(value, schema):
        return [(path, f'Invalid value: {shown}: {path} in body must be of type {schema.get("type")}')]
    causes: list[tuple[str, str]] = []
    if "enum" in schema and value not in schema["enum"]:
        supported = ", ".join(json.dumps(v) for v in schema["enum"])
        causes.append((path, f"Unsupported value: {shown}: supported values: {supported}"))
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            causes.append((path, f"Invalid value: {shown}: {path} in body should match '{schema['pattern']}'"))
        if "minLength" in schema and len(value) < schema["minLength"]:
            causes.append((path, f"Invalid value: {shown}: {path} in body should be at least "
                                 f"{schema['minLength']} chars long"))
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            causes.append((path, f"Too long: may not be longer than {schema['maxLength']}"))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            causes.append((path, f"Invalid value: {shown}: {path} in body should be greater than or equal to "
                                 f"{schema['minimum']}"))
        if "maximum" in schema and value > schema["maximum"]:
            causes.append((path, f"Invalid value: {shown}: {path} in body should be less than or equal to "
                                 f"{schema['maximum']}"))
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            causes.append((path, f"Invalid value: {len(value)}: {path} in body should have at least "
                                 f"{schema['minItems']} items"))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            causes.append((path, f"Too many: {len(value)}: must have at most {schema['maxItems']} items"))
        for i, item in enumerate(value):
            causes += schema_problems(item, schema.get("items"), f"{path}[{i}]")
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key in schema.get("required") or ():
            if key not in value:
                causes.append((f"{path}.{key}" if path else key, "Required value"))
        for key, item in value.items():
            sub = props.get(key) if key in props else extra if isinstance(extra, dict) else None
            causes += schema_problems(item, sub, f"{path}.{key}" if path else key)
    return causes


def conform(obj: dict[str, Any], schema: dict[str, Any] | None) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """Prune, default and validate a custom object against its CRD's schema; `metadata` is the server's own."""
    if not schema:
        return obj, []
    root = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    pruned = prune(root, schema)
    # the server checks apiVersion, kind and metadata itself (a CRD may list `metadata` as required, as
    # controller-gen writes it for a `metadata` field without omitempty)
    root_schema = dict(schema, properties={k: v for k, v in (schema.get("properties") or {}).items()
                                           if k not in ("apiVersion", "kind", "metadata")},
                       required=[k for k in schema.get("required") or () if k not in ("apiVersion", "kind", "metadata")])
    problems = schema_problems(pruned, root_schema, "")
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": obj["metadata"], **pruned}, problems
