"""A Kubernetes API server for the tests: kmock's `KubernetesEmulator`, made strict enough for kopf and the client.

kmock serves discovery, lists, watch streams and patches over real HTTP, but stores objects as plain
JSON. This subclass adds the API server's rules that kopf and the `kubernetes` client rely on:
`resourceVersion` (one counter for the whole server, bumped on every write; a stale one in a patch or
PUT is a 409, a failed JSON-patch `test` a 422), `uid`, `generation` (bumped when anything but
metadata and status changes), `creationTimestamp`, `generateName`, label and field selectors on list,
watch and delete-collection, `limit`/`continue`, watches that resume from a `resourceVersion`
(410 Gone once compacted), PUT, `kind`/`apiVersion` on lists, 201 on create, 409 AlreadyExists,
404 NotFound, deletion with `deletionTimestamp` held by finalizers, namespace deletion (Terminating,
its objects deleted, gone once they are; no new objects in it meanwhile), garbage collection by
`ownerReferences`, the status subresource, name and label validation (422 Invalid), and
`CustomResourceDefinition` objects that add their resources to discovery and whose schemas prune,
default and validate the custom objects (the content rules themselves are in
`tests.helpers.k8s.api_rules`), and server-side apply (below).

Server-side apply: a PATCH with `Content-Type: application/apply-patch+yaml` (a JSON body) needs a
`fieldManager` (422 without one, as the API server answers), creates a missing object, and otherwise
merges the applied configuration into the object (objects field by field, lists as a whole) and
removes the fields this manager applied last time and no longer applies. Simplified: each manager's
fields are remembered by the emulator (`emulator.applied`), not written to `metadata.managedFields`,
and conflicts with other managers are not detected (an applier sending `force=true`, as dagline's does,
takes them over anyway).

Watch streams can be made to go quiet (`freeze_watches`: open streams get nothing more and never end;
with `new_ones=True` new streams too, until `thaw_watches`), as behind a load balancer that drops long
connections silently.

Everything runs in the event loop of the thread that serves it (`tests.helpers.k8s.cluster`); handlers
are synchronous between awaits, so each request is atomic. Objects keep kmock's history of versions:
`emulator.objects[resource, namespace, name].history`.

Pod logs: `GET /api/v1/namespaces/{ns}/pods/{name}/log` (CoreV1 `read_namespaced_pod_log`) answers
the log's bytes from `emulator.pod_logs[(namespace, pod)]` (a str, or a `pathlib.Path` read at request time,
so a growing file shows its latest content; `tailLines` and `limitBytes` are honoured), 404 for a pod
that does not exist, 400 for a pod that exists but has no log yet (as a container still being created).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import json
import random
import re
import uuid
from collections.abc import AsyncIterator, Iterable
from typing import Any

import attrs
import jsonpatch
import jsonpointer
import kmock
from kmock._internal import parsing as kmock_parsing

from dagline.k8s import resources as dagline_resources
from tests.helpers.k8s.api_rules import (
    GENERATED_SUFFIX,
    conform,
    field_matcher,
    label_matcher,
    merge_patch,
    metadata_problems,
    name_problems,
)

# --------------------------------------------------------------------------------------------------
# kmock 0.8 reads `/api/v1/namespaces[/name]` as a namespace prefix and fails on it (HTTP 500), so
# nobody can list, get or watch Namespace objects; kopf does. Namespaces are parsed as a resource here.

_kmock_parse_path = kmock_parsing.parse_path


def _parse_path(path: str) -> kmock_parsing.ParsedPath:
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and (
            len(parts) <= 4 or (len(parts) == 5 and parts[4] in ("status", "finalize"))):
        return kmock_parsing.ParsedPath(group="", version="v1", plural="namespaces",
                                        name=parts[3] if len(parts) > 3 else None,
                                        subresource=parts[4] if len(parts) > 4 else None)
    return _kmock_parse_path(path)


kmock_parsing.parse_path = _parse_path

# --------------------------------------------------------------------------------------------------
# Resources the server knows


@dataclasses.dataclass(frozen=True)
class ApiResource:
    """One resource type the emulator serves: where it lives in the URL space and how it behaves."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = True
    singular: str = ""
    short_names: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def ref(self) -> kmock.resource:
        return kmock.resource(self.group, self.version, self.plural)

    @property
    def qualified(self) -> str:
        """`dags.dagline.io`, or `pods` for the core group: how the API server names a resource in errors."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        parts = [root]
        if self.namespaced and namespace is not None:
            parts.append(f"namespaces/{namespace}")
        parts.append(self.plural)
        if name is not None:
            parts.append(name)
            if subresource:
                parts.append(subresource)
        return "/".join(parts)


CORE_RESOURCES = (
    ApiResource("", "v1", "namespaces", "Namespace", namespaced=False, singular="namespace", short_names=("ns",)),
    ApiResource("", "v1", "events", "Event", status_subresource=False, singular="event", short_names=("ev",)),
    ApiResource("", "v1", "pods", "Pod", singular="pod", short_names=("po",)),
    ApiResource("", "v1", "configmaps", "ConfigMap", status_subresource=False, singular="configmap",
                short_names=("cm",)),
    ApiResource("", "v1", "secrets", "Secret", status_subresource=False, singular="secret"),
    ApiResource("coordination.k8s.io", "v1", "leases", "Lease", status_subresource=False, singular="lease"),
    ApiResource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
                namespaced=False, singular="customresourcedefinition", short_names=("crd", "crds")),
)
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public")
DAGLINE_RESOURCES = tuple(
    ApiResource(dagline_resources.GROUP, dagline_resources.VERSION, k.plural, k.kind,
                singular=k.singular, short_names=k.short_names)
    for k in dagline_resources.KINDS
)
SPARK_APPLICATIONS = ApiResource("sparkoperator.k8s.io", "v1beta2", "sparkapplications", "SparkApplication",
                                 singular="sparkapplication", short_names=("sparkapp",))
CUSTOM_RESOURCES = (*DAGLINE_RESOURCES, SPARK_APPLICATIONS)


def crd_body(res: ApiResource) -> dict[str, Any]:
    """A minimal CustomResourceDefinition for a resource: names, scope, one served version, no schema."""
    version: dict[str, Any] = {
        "name": res.version, "served": True, "storage": True,
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    }
    if res.status_subresource:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": res.qualified},
        "spec": {
            "group": res.group,
            "scope": "Namespaced" if res.namespaced else "Cluster",
            "names": {"plural": res.plural, "kind": res.kind, "singular": res.singular or res.kind.lower(),
                      "shortNames": list(res.short_names), "listKind": f"{res.kind}List"},
            "versions": [version],
        },
    }


def resources_of_crd(crd: dict[str, Any]) -> list[ApiResource]:
    """The resources a CustomResourceDefinition declares (one per served version)."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    return [
        ApiResource(
            group=spec.get("group", ""), version=v["name"], plural=names.get("plural", ""), kind=names.get("kind", ""),
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            status_subresource="status" in ((v.get("subresources") or {})),
            singular=names.get("singular", ""), short_names=tuple(names.get("shortNames") or ()),
        )
        for v in spec.get("versions") or ()
        if v.get("served", True) and v.get("name") and names.get("plural")
    ]


# --------------------------------------------------------------------------------------------------
# Errors as the API server reports them


class ApiError(Exception):
    """An API answer other than success: rendered as a `Status` object with the same code."""

    def __init__(self, code: int, reason: str, message: str, *, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "details": self.details, "code": self.code}


def not_found(res: ApiResource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found',
                    details={"name": name, "group": res.group, "kind": res.plural})


def conflict(res: ApiResource, name: str, why: str) -> ApiError:
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": {why}',
                    details={"name": name, "group": res.group, "kind": res.plural})


def invalid(res: ApiResource, name: str, causes: list[tuple[str, str]]) -> ApiError:
    text = "; ".join(f"{field}: {message}" for field, message in causes)
    return ApiError(422, "Invalid", f'{res.kind}.{res.group or "core"} "{name}" is invalid: {text}',
                    details={"name": name, "group": res.group, "kind": res.kind,
                             "causes": [{"field": f, "message": m, "reason": "FieldValueInvalid"} for f, m in causes]})


STALE = "the object has been modified; please apply your changes to the latest version and try again"

def _leaf_paths(obj: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The paths of an applied configuration's fields: into objects, stopping at lists and scalars."""
    if isinstance(obj, dict) and obj:
        return set().union(*(_leaf_paths(value, (*prefix, key)) for key, value in obj.items()))
    return {prefix} if prefix else set()


def _remove_path(obj: dict[str, Any], path: tuple[str, ...]) -> None:
    for key in path[:-1]:
        obj = obj.get(key)
        if not isinstance(obj, dict):
            return
    obj.pop(path[-1], None)


def _apply_merge(target: Any, config: Any) -> Any:
    """Objects merged field by field, anything else (lists included) replaced."""
    if not isinstance(config, dict) or not isinstance(target, dict):
        return copy.deepcopy(config)
    result = copy.deepcopy(target)
    for key, value in config.items():
        result[key] = _apply_merge(result.get(key), value)
    return result


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _without(obj: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in keys}


# --------------------------------------------------------------------------------------------------
# Watches


@dataclasses.dataclass(frozen=True)
class Change:
    """One write, as the watch streams replay it: the object after it and (for updates) before it."""

    revision: int
    type: str  # ADDED, MODIFIED, DELETED
    res: ApiResource
    obj: dict[str, Any]
    old: dict[str, Any] | None = None


_CLOSE = object()


@dataclasses.dataclass(eq=False)
class Watcher:
    res: ApiResource
    namespace: str | None
    labels: Any
    fields: Any
    queue: asyncio.Queue = dataclasses.field(default_factory=asyncio.Queue)
    frozen: bool = False  # a stream gone quiet: nothing reaches it, and it never ends by itself

    def matches(self, obj: dict[str, Any] | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        return ((self.namespace is None or meta.get("namespace") == self.namespace)
                and self.labels(meta.get("labels")) and self.fields(obj))

    def event(self, change: Change) -> dict[str, Any] | None:
        """What this stream shows of a change: objects moving in or out of its selector appear/disappear."""
        if change.res != self.res:
            return None
        now_in, was_in = self.matches(change.obj), self.matches(change.old)
        kind = change.type
        if kind == "MODIFIED" and now_in != was_in:
            kind = "ADDED" if now_in else "DELETED"
        elif not now_in:
            return None
        return {"type": kind, "object": copy.deepcopy(change.obj)}


# --------------------------------------------------------------------------------------------------
# The server


@attrs.define(kw_only=True)
class KubeEmulator(kmock.KubernetesEmulator):
    """kmock's emulator with the API server's bookkeeping (see the module docstring)."""

    api_resources: dict[tuple[str, str, str], ApiResource] = attrs.field(factory=dict, init=False)
    revision: int = attrs.field(default=0, init=False)
    _changes: list[Change] = attrs.field(factory=list, init=False)
    _compacted: int = attrs.field(default=0, init=False)
    _watchers: list[Watcher] = attrs.field(factory=list, init=False)
    _orphaning: set[str] = attrs.field(factory=set, init=False)
    _freezing: set[str] = attrs.field(factory=set, init=False)  # plurals whose new watches start frozen  # uids deleted with propagationPolicy=Orphan
    schemas: dict[tuple[str, str, str], dict[str, Any]] = attrs.field(factory=dict, init=False)
    pod_logs: dict[tuple[str, str], Any] = attrs.field(factory=dict, init=False)  # (ns, pod) -> str | Path
    # every pod DELETE: (namespace, name, gracePeriodSeconds or None). One with a grace period > 0 leaves the
    # pod terminating (`deletionGracePeriodSeconds`) until `end_pod`, as a kubelet would; a later delete may
    # only shorten the grace period, as on a real API server
    pod_deletions: list[tuple[str, str, int | None]] = attrs.field(factory=list, init=False)
    # (object key, field manager) -> the leaf paths that manager applied last (server-side apply)
    applied: dict[tuple[Any, str], set[tuple[str, ...]]] = attrs.field(factory=dict, init=False)

    def __attrs_post_init__(self) -> None:
        # Discovery and error rendering come from the scaffold; every object URL is served here (as the
        # lowest-priority reaction, so a test may still intercept a request: `emulator["patch"] << 500`).
        kmock.KubernetesScaffold.__attrs_post_init__(self)
        self.fallback[re.compile(r"/api/v1/.+|/apis/[^/]+/[^/]+/.+")] << self._serve
        for res in CORE_RESOURCES:
            self.register(res)
        for namespace in INITIAL_NAMESPACES:
            self.create(self.api_resources[("", "v1", "namespaces")], None, {"metadata": {"name": namespace}})

    async def _handle(self, request: kmock.Request):
        # kmock's own emulator stores objects before dispatching; here `_serve` does all the storing.
        return await kmock.RawHandler._handle(self, request)

    # ----------------------------------------------------------------------------------- registry
    def register(self, res: ApiResource) -> None:
        """Serve a resource and list it in discovery."""
        self.api_resources[(res.group, res.version, res.plural)] = res
        self.resources[res.ref] = kmock.ResourceInfo(
            kind=res.kind, singular=res.singular or res.kind.lower(), namespaced=res.namespaced,
            shortnames=set(res.short_names), subresources={"status"} if res.status_subresource else set(),
            verbs={"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"},
        )

    def install_crds(self, crds: Iterable[ApiResource | dict[str, Any]]) -> None:
        """Create CustomResourceDefinitions (as `kubectl apply -f crds/` would): bodies, or resources for which a
        minimal CRD without a schema is made."""
        definitions = self.api_resources[("apiextensions.k8s.io", "v1", "customresourcedefinitions")]
        for crd in crds:
            self.create(definitions, None, crd_body(crd) if isinstance(crd, ApiResource) else crd)

    def resource_named(self, name: str) -> ApiResource:
        """`dags`, `DagRun`, `dr`, `dags.dagline.io` or `dagline.io/v1alpha1/dags` -> the resource."""
        found = [r for r in self.api_resources.values()
                 if name in (r.plural, r.kind, r.singular, r.qualified, f"{r.api_version}/{r.plural}", *r.short_names)]
        if len(found) != 1:
            known = sorted(r.qualified for r in self.api_resources.values())
            raise KeyError(f"{name!r} names {len(found)} resources; known: {known}")
        return found[0]

    # ------------------------------------------------------------------------------------ storage
    def _key(self, res: ApiResource, namespace: str | None, name: str):
        return (res.ref, namespace if res.namespaced else None, name)

    def current(self, res: ApiResource, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The stored object (a deep copy), or None."""
        key = self._key(res, namespace, name)
        if key in self._objects and not self._objects[key].deleted:
            return copy.deepcopy(self._objects[key].raw)
        return None

    def stored(self, res: ApiResource, namespace: str | None = None) -> list[dict[str, Any]]:
        """Live objects of a resource (all namespaces if `namespace` is None), sorted as the API lists them."""
        found = []
        for (ref, ns, _name), obj in self._objects.items():
            if ref == res.ref and not obj.deleted and (namespace is None or ns == namespace):
                found.append(copy.deepcopy(obj.raw))
        return sorted(found, key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))

    def _all_live(self):
        for (ref, ns, name), obj in list(self._objects.items()):
            if not obj.deleted:
                yield self.api_resources.get((ref.group, ref.version, ref.plural)), ns, name, obj.raw

    def _commit(self, type_: str, res: ApiResource, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        key = self._key(res, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        stored = copy.deepcopy(obj)
        if type_ == "DELETED":
            self._objects[key].history.append(stored)
            self._objects[key].delete()
        elif key in self._objects:
            self._objects[key].history.append(stored)
        else:
            self._objects[key] = stored
        change = Change(self.revision, type_, res, copy.deepcopy(obj), old)
        self._changes.append(change)
        for watcher in self._watchers:
            if not watcher.frozen and (event := watcher.event(change)) is not None:
                watcher.queue.put_nowait(event)
        if res.kind == "CustomResourceDefinition" and type_ != "DELETED":
            for declared in resources_of_crd(obj):
                self.register(declared)
            for version in (obj.get("spec") or {}).get("versions") or ():
                schema = (version.get("schema") or {}).get("openAPIV3Schema")
                if schema:
                    spec = obj["spec"]
                    self.schemas[(spec.get("group", ""), version.get("name"), spec["names"]["plural"])] = schema

    def compact(self) -> None:
        """Forget the history of changes: a watch resuming from an older resourceVersion gets 410 Gone."""
        self._compacted = self.revision
        self._changes.clear()

    def close_watches(self) -> None:
        """End every open watch stream (the server is stopping)."""
        for watcher in self._watchers:
            watcher.queue.put_nowait(_CLOSE)

    def open_watches(self) -> list[tuple[ApiResource, str | None]]:
        return [(w.res, w.namespace) for w in self._watchers]

    def freeze_watches(self, plural: str | None = None, *, new_ones: bool = False) -> int:
        """Make the open watch streams of a resource (every one if None) go quiet, as a load balancer that
        drops a long connection without closing it: no event reaches them, their `timeoutSeconds` passes
        unnoticed, and the client only learns by its own timeouts. With `new_ones`, every watch opened
        later is frozen from its start too (the watch cannot be renewed), until `thaw_watches()`.
        Returns how many open streams were frozen."""
        frozen = 0
        for watcher in self._watchers:
            if (plural is None or watcher.res.plural == plural) and not watcher.frozen:
                watcher.frozen = True
                frozen += 1
        if new_ones:
            self._freezing.add(plural or "*")
        return frozen

    def thaw_watches(self) -> None:
        """New watches work again (streams already frozen stay dead, as dropped connections do)."""
        self._freezing.clear()

    # --------------------------------------------------------------------------------- operations
    def create(self, res: ApiResource, namespace: str | None, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request must be a JSON object")
        obj = copy.deepcopy(body)
        self._check_type(res, obj)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        if res.namespaced:
            if namespace is None:
                raise ApiError(404, "NotFound", f"{res.qualified} is namespaced: POST to a namespace")
            home = self.current(self.api_resources[("", "v1", "namespaces")], None, namespace)
            if home is None:
                raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found',
                               details={"name": namespace, "kind": "namespaces"})
            if home["metadata"].get("deletionTimestamp"):
                raise ApiError(403, "Forbidden", f'{res.qualified} is forbidden: unable to create new content in '
                                                 f'namespace {namespace} because it is being terminated')
            if meta.get("namespace") not in (None, "", namespace):
                raise ApiError(400, "BadRequest", "the namespace of the provided object does not match the "
                                                  "namespace sent on the request")
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            prefix = str(meta["generateName"])[:58]
            for _ in range(100):
                meta["name"] = prefix + "".join(random.choices(GENERATED_SUFFIX, k=5))
                if self.current(res, namespace, meta["name"]) is None:
                    break
        name = meta.get("name")
        problems = [("metadata.name", p) for p in name_problems(name, dns_label=res.kind == "Namespace")]
        problems += metadata_problems(meta)
        if problems:
            raise invalid(res, str(name or meta.get("generateName") or ""), problems)
        if self.current(res, namespace, name) is not None:
            raise ApiError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists',
                           details={"name": name, "group": res.group, "kind": res.plural})
        for field in ("deletionTimestamp", "deletionGracePeriodSeconds", "resourceVersion", "selfLink"):
            meta.pop(field, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        if res.status_subresource:
            obj.pop("status", None)
        if res.kind == "Namespace":
            obj["status"] = {"phase": "Active"}
        obj, problems = conform(obj, self.schemas.get((res.group, res.version, res.plural)))
        if problems:
            raise invalid(res, name, problems)
        self._commit("ADDED", res, obj, None)
        return obj

    def _check_type(self, res: ApiResource, obj: dict[str, Any]) -> None:
        if obj.get("apiVersion") not in (None, res.api_version) or obj.get("kind") not in (None, res.kind):
            raise ApiError(400, "BadRequest", f"the API version/kind in the data ({obj.get('apiVersion')}/"
                                              f"{obj.get('kind')}) does not match the expected ({res.api_version}/"
                                              f"{res.kind})")
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind

    def patch(self, res: ApiResource, namespace: str | None, name: str, patch: Any, *,
              content_type: str = "application/merge-patch+json", subresource: str | None = None,
              field_manager: str | None = None) -> dict[str, Any]:
        if "apply-patch" in content_type:
            return self.server_side_apply(res, namespace, name, patch, field_manager, subresource=subresource)
        current = self.current(res, namespace, name)
        if current is None:
            raise not_found(res, name)
        if isinstance(patch, list) or "json-patch" in content_type:
            if not isinstance(patch, list):
                raise ApiError(400, "BadRequest", "a JSON patch must be a list of operations")
            try:
                updated = jsonpatch.apply_patch(current, patch, in_place=False)
            except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError, KeyError) as exc:
                raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                                               f"{exc}") from exc
        elif isinstance(patch, dict):
            wanted = ((patch.get("metadata") or {}).get("resourceVersion")
                      if isinstance(patch.get("metadata"), dict) else None)
            if wanted is not None and str(wanted) != current["metadata"]["resourceVersion"]:
                raise conflict(res, name, STALE)
            updated = merge_patch(current, patch)
        else:
            raise ApiError(400, "BadRequest", "a patch must be a JSON object or a list of operations")
        return self._update(res, current, updated, subresource)

    def server_side_apply(self, res: ApiResource, namespace: str | None, name: str, config: Any,
                          field_manager: str | None, *, subresource: str | None = None) -> dict[str, Any]:
        """Create the object, or set the fields `config` holds and drop those this manager no longer applies."""
        if not field_manager:
            raise invalid(res, name, [("fieldManager", "Required value: is required for apply patch")])
        if not isinstance(config, dict):
            raise ApiError(400, "BadRequest", "an apply patch must be an object")
        config = copy.deepcopy(config)
        self._check_type(res, config)
        meta = config.get("metadata") if isinstance(config.get("metadata"), dict) else {}
        if meta.get("name") not in (None, name):
            raise ApiError(400, "BadRequest", f"the name of the object ({meta.get('name')}) does not match the name "
                                              f"on the URL ({name})")
        key = (self._key(res, namespace, name), field_manager)
        paths = _leaf_paths(_without(config, "apiVersion", "kind"))
        current = self.current(res, namespace, name)
        if current is None:
            if subresource is not None:
                raise not_found(res, name)
            created = self.create(res, namespace, dict(config, metadata=dict(meta, name=name)))
            self.applied[key] = paths
            return created
        updated = copy.deepcopy(current)
        for gone in sorted(self.applied.get(key, set()) - paths, key=len, reverse=True):
            _remove_path(updated, gone)
        updated = _apply_merge(updated, config)
        result = self._update(res, current, updated, subresource)
        self.applied[key] = paths
        return result

    def replace(self, res: ApiResource, namespace: str | None, name: str, body: Any, *,
                subresource: str | None = None) -> dict[str, Any]:
        current = self.current(res, namespace, name)
        if current is None:
            raise not_found(res, name)
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body of the request must be a JSON object")
        body = copy.deepcopy(body)
        self._check_type(res, body)
        meta = body.get("metadata") or {}
        if meta.get("name") not in (None, name):
            raise ApiError(400, "BadRequest", f"the name of the object ({meta.get('name')}) does not match the name "
                                              f"on the URL ({name})")
        wanted = meta.get("resourceVersion")
        if not wanted:
            raise invalid(res, name, [("metadata.resourceVersion",
                                       "Invalid value: 0x0: must be specified for an update")])
        if str(wanted) != current["metadata"]["resourceVersion"]:
            raise conflict(res, name, STALE)
        return self._update(res, current, body, subresource)

    def _update(self, res: ApiResource, current: dict[str, Any], updated: dict[str, Any],
                subresource: str | None) -> dict[str, Any]:
        name = current["metadata"]["name"]
        if subresource == "status":
            result = copy.deepcopy(current)
            if updated.get("status") is None:
                result.pop("status", None)
            else:
                result["status"] = copy.deepcopy(updated["status"])
        else:
            result = copy.deepcopy(updated)
            result["apiVersion"], result["kind"] = current["apiVersion"], current["kind"]
            if res.status_subresource:
                result.pop("status", None)
                if "status" in current:
                    result["status"] = copy.deepcopy(current["status"])
            meta = result.get("metadata")
            if not isinstance(meta, dict):
                raise invalid(res, name, [("metadata", "Required value")])
            for field in ("name", "namespace", "uid", "creationTimestamp", "generation", "deletionTimestamp",
                          "deletionGracePeriodSeconds", "resourceVersion"):
                meta.pop(field, None)
                if field in current["metadata"]:
                    meta[field] = current["metadata"][field]
            problems = metadata_problems(meta)
            if current["metadata"].get("deletionTimestamp"):
                added = set(meta.get("finalizers") or ()) - set(current["metadata"].get("finalizers") or ())
                if added:
                    problems.append(("metadata.finalizers", f"Forbidden: no new finalizers can be added if the "
                                                            f"object is being deleted, found new finalizers "
                                                            f"{sorted(added)}"))
            if problems:
                raise invalid(res, name, problems)
        result, problems = conform(result, self.schemas.get((res.group, res.version, res.plural)))
        if problems:
            raise invalid(res, name, problems)
        if _without(result, "metadata", "status") != _without(current, "metadata", "status"):
            result["metadata"]["generation"] = current["metadata"].get("generation", 1) + 1
        for empty in ("finalizers", "labels", "annotations", "ownerReferences"):
            if result["metadata"].get(empty) in ([], {}):
                del result["metadata"][empty]
        if result == current:
            return result  # a no-op write: no new resourceVersion, no event (as the API server does)
        meta = result["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            # The last finalizer is gone: the object is deleted by this very update. The answer keeps the
            # old resourceVersion (as the real server's does); watchers see DELETED.
            answer = copy.deepcopy(result)
            self._remove(res, result, current)
            return answer
        self._commit("MODIFIED", res, result, current)
        return result

    def delete(self, res: ApiResource, namespace: str | None, name: str, options: dict[str, Any] | None = None,
               *, propagation: str | None = None, grace_period_s: int | None = None) -> dict[str, Any]:
        current = self.current(res, namespace, name)
        if current is None:
            raise not_found(res, name)
        options = options if isinstance(options, dict) else {}
        if grace_period_s is None and options.get("gracePeriodSeconds") is not None:
            grace_period_s = int(options["gracePeriodSeconds"])
        if res.plural == "pods":
            self.pod_deletions.append((namespace, name, grace_period_s))
            if grace_period_s:  # a pod stopping within its grace period: a kubelet ends it (`end_pod`)
                meta = current["metadata"]
                left = meta.get("deletionGracePeriodSeconds")
                if left is None or grace_period_s < left:  # a later delete may only shorten it
                    result = copy.deepcopy(current)
                    result["metadata"].update(deletionTimestamp=meta.get("deletionTimestamp") or _now(),
                                              deletionGracePeriodSeconds=grace_period_s)
                    self._commit("MODIFIED", res, result, current)
                    return result
                return current
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != current["metadata"]["uid"]:
            raise conflict(res, name, f"Precondition failed: UID in precondition: {pre['uid']}, "
                                      f"UID in object meta: {current['metadata']['uid']}")
        if pre.get("resourceVersion") and pre["resourceVersion"] != current["metadata"]["resourceVersion"]:
            raise conflict(res, name, STALE)
        if (options.get("propagationPolicy") or propagation) == "Orphan":
            self._orphaning.add(current["metadata"]["uid"])
        meta = current["metadata"]
        if res.kind == "Namespace":
            return self._delete_namespace(res, current)
        if meta.get("deletionTimestamp"):
            return current
        if meta.get("finalizers"):
            result = copy.deepcopy(current)
            result["metadata"].update(deletionTimestamp=_now(), deletionGracePeriodSeconds=0,
                                      generation=meta.get("generation", 1) + 1)
            self._commit("MODIFIED", res, result, current)
            return result
        result = copy.deepcopy(current)
        self._remove(res, result, current)
        return result

    def end_pod(self, namespace: str, name: str) -> None:
        """The kubelet's part: a terminating pod's containers have exited; it leaves the store."""
        res = self.resource_named("pods")
        current = self.current(res, namespace, name)
        if current is None:
            raise not_found(res, name)
        self._remove(res, copy.deepcopy(current), current)

    def _delete_namespace(self, res: ApiResource, current: dict[str, Any]) -> dict[str, Any]:
        """As the namespace controller: the namespace is Terminating, everything in it is deleted, and the
        namespace goes once the last object has (objects held by finalizers keep it Terminating)."""
        name = current["metadata"]["name"]
        if not current["metadata"].get("deletionTimestamp"):
            marked = copy.deepcopy(current)
            marked["metadata"]["deletionTimestamp"] = _now()
            marked["status"] = {"phase": "Terminating"}
            self._commit("MODIFIED", res, marked, current)
            current = marked
        for dep_res, ns, dep_name, _obj in list(self._all_live()):
            if dep_res is not None and dep_res.namespaced and ns == name:
                if self.current(dep_res, ns, dep_name) is not None:
                    self.delete(dep_res, ns, dep_name)
        self._finish_namespace(name)
        return current

    def _finish_namespace(self, name: str | None) -> None:
        """A Terminating namespace with nothing left in it is removed."""
        namespaces = self.api_resources[("", "v1", "namespaces")]
        current = self.current(namespaces, None, name) if name else None
        if current is None or not current["metadata"].get("deletionTimestamp"):
            return
        if any(r is not None and r.namespaced and ns == name for r, ns, _n, _o in self._all_live()):
            return
        self._remove(namespaces, copy.deepcopy(current), current)

    def _remove(self, res: ApiResource, final: dict[str, Any], before: dict[str, Any]) -> None:
        """The object leaves the store; its dependents are garbage-collected (or orphaned)."""
        self._commit("DELETED", res, final, before)
        if res.namespaced:
            self._finish_namespace(final["metadata"].get("namespace"))
        uid = final["metadata"]["uid"]
        orphan = uid in self._orphaning
        self._orphaning.discard(uid)
        live_uids = {o["metadata"].get("uid") for _r, _ns, _n, o in self._all_live()}
        for dep_res, ns, dep_name, obj in list(self._all_live()):
            owners = obj["metadata"].get("ownerReferences") or []
            if dep_res is None or not any(o.get("uid") == uid for o in owners):
                continue
            if orphan:
                kept = [o for o in owners if o.get("uid") != uid]
                self.patch(dep_res, ns, dep_name, {"metadata": {"ownerReferences": kept or None}})
            elif not any(o.get("uid") in live_uids for o in owners if o.get("uid") != uid):
                if self.current(dep_res, ns, dep_name) is not None:
                    self.delete(dep_res, ns, dep_name)

    def list(self, res: ApiResource, namespace: str | None, params: dict[str, str]) -> dict[str, Any]:
        labels, fields = label_matcher(params.get("labelSelector")), field_matcher(params.get("fieldSelector"))
        items = [o for o in self.stored(res, namespace)
                 if labels(o["metadata"].get("labels")) and fields(o)]
        start = int(params.get("continue") or 0)
        limit = int(params.get("limit") or 0)
        end = start + limit if limit > 0 else len(items)
        meta: dict[str, Any] = {"resourceVersion": str(self.revision)}
        if end < len(items):
            meta["continue"] = str(end)
            meta["remainingItemCount"] = len(items) - end
        return {"apiVersion": res.api_version, "kind": f"{res.kind}List", "metadata": meta, "items": items[start:end]}

    async def watch(self, res: ApiResource, namespace: str | None, params: dict[str, str]) -> AsyncIterator[Any]:
        yield b""  # send the headers now: the client waits for them before it reads events
        watcher = Watcher(res, namespace, label_matcher(params.get("labelSelector")),
                          field_matcher(params.get("fieldSelector")))
        since = params.get("resourceVersion") or ""
        backlog: list[dict[str, Any]] = []
        if since in ("", "0"):
            backlog = [{"type": "ADDED", "object": o} for o in self.stored(res, namespace) if watcher.matches(o)]
            if params.get("sendInitialEvents") == "true":
                backlog.append({"type": "BOOKMARK", "object": {
                    "apiVersion": res.api_version, "kind": res.kind,
                    "metadata": {"resourceVersion": str(self.revision),
                                 "annotations": {"k8s.io/initial-events-end": "true"}}}})
        elif not since.isdigit():
            yield {"type": "ERROR", "object": ApiError(400, "BadRequest", f"invalid resourceVersion {since!r}").status()}
            return
        elif int(since) < self._compacted:
            yield {"type": "ERROR", "object": ApiError(
                410, "Expired", f"too old resource version: {since} ({self._compacted})").status()}
            return
        else:
            backlog = [e for c in self._changes if c.revision > int(since) if (e := watcher.event(c)) is not None]
        if "*" in self._freezing or res.plural in self._freezing:
            watcher.frozen = True
            backlog = []
        self._watchers.append(watcher)  # in the same step as the snapshot: no change falls in between
        try:
            for event in backlog:
                yield event
            timeout = float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
            deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
            while True:
                remaining = None if deadline is None else deadline - asyncio.get_running_loop().time()
                if remaining is not None and remaining <= 0 and not watcher.frozen:
                    return
                try:
                    event = await asyncio.wait_for(watcher.queue.get(), None if watcher.frozen else remaining)
                except TimeoutError:
                    return
                if event is _CLOSE:
                    return
                yield event
        finally:
            self._watchers.remove(watcher)

    # -------------------------------------------------------------------------------------- HTTP
    def _serve(self, request: kmock.Request) -> kmock.Response:
        try:
            return self._dispatch(request)
        except ApiError as exc:
            return kmock.Response(status=exc.code, payload=exc.status())

    def _dispatch(self, request: kmock.Request) -> kmock.Response:
        ref = request.resource
        res = self.api_resources.get((ref.group, ref.version, ref.plural)) if ref is not None else None
        if res is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({request.url.path})")
        method, params, name, sub = request.method.value, dict(request.params), request.name, request.subresource
        namespace = request.namespace
        if (res.group, res.plural, sub, method) == ("", "pods", "log", "GET") and name and namespace:
            return self._pod_log(res, namespace, name, params)
        if (namespace is not None and not res.namespaced) or sub not in (None, "status") or (
                sub == "status" and not res.status_subresource):
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({request.url.path})")
        if name is not None and res.namespaced and namespace is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({request.url.path})")
        body = self._body(request)
        if method == "GET" and params.get("watch") in ("true", "1"):
            return kmock.Response(status=200, payload=self.watch(res, namespace, params))
        if method == "GET" and name is None:
            return kmock.Response(status=200, payload=self.list(res, namespace, params))
        if method == "GET":
            obj = self.current(res, namespace, name)
            if obj is None:
                raise not_found(res, name)
            return kmock.Response(status=200, payload=obj)
        if method == "POST" and name is None:
            return kmock.Response(status=201, payload=self.create(res, namespace, body))
        if method == "PUT" and name is not None:
            return kmock.Response(status=200, payload=self.replace(res, namespace, name, body, subresource=sub))
        if method == "PATCH" and name is not None:
            content_type = next((v for k, v in request.headers.items() if k.lower() == "content-type"),
                                "application/merge-patch+json")
            return kmock.Response(status=200, payload=self.patch(res, namespace, name, body,
                                                                 content_type=content_type, subresource=sub,
                                                                 field_manager=params.get("fieldManager")))
        if method == "DELETE" and name is not None:
            grace = params.get("gracePeriodSeconds")
            return kmock.Response(status=200, payload=self.delete(res, namespace, name, body,
                                                                  propagation=params.get("propagationPolicy"),
                                                                  grace_period_s=None if grace is None else int(grace)))
        if method == "DELETE":
            gone = self.list(res, namespace, params)
            for obj in gone["items"]:
                meta = obj["metadata"]
                self.delete(res, meta.get("namespace"), meta["name"], body, propagation=params.get("propagationPolicy"))
            return kmock.Response(status=200, payload=gone)
        raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on {request.url.path}")

    def _pod_log(self, res: ApiResource, namespace: str, name: str, params: dict[str, str]) -> kmock.Response:
        if self.current(res, namespace, name) is None:
            raise not_found(res, name)
        source = self.pod_logs.get((namespace, name))
        if source is None:
            raise ApiError(400, "BadRequest", f'container "spark-kubernetes-driver" in pod "{name}" is waiting to '
                                              "start: ContainerCreating")
        text = source.read_text(errors="replace") if hasattr(source, "read_text") else str(source)
        if params.get("tailLines"):
            text = "".join(text.splitlines(keepends=True)[-int(params["tailLines"]):])
        data = text.encode()
        if params.get("limitBytes"):
            data = data[:int(params["limitBytes"])]
        # No Content-Type header: kmock would keep it for the responses that follow (every later JSON
        # answer would read as text/plain to the client); a log reader does not look at it anyway.
        return kmock.Response(status=200, payload=data)

    @staticmethod
    def _body(request: kmock.Request) -> Any:
        if not request.body:
            return None
        try:
            return json.loads(request.body)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"the body is not JSON: {exc}") from exc
