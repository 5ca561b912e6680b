"""Installing and upgrading dagline's CRDs in a cluster: server-side apply of the generated definitions.

Helm installs a chart's `crds/` folder on the first install only and never upgrades it, and Flux's
default skips it too: after `helm upgrade` the old schema stays, and the apiserver prunes every spec
field it does not declare. This module is the chart's upgrade path (ADR 0084): its pre-install and
pre-upgrade hook Job runs `python -m dagline.k8s.crds apply` in the operator image, which hands this
module the CRDs generated from that image's own models (`dagline.k8s.crds.custom_resource_definition`),
so the schemas always match the operator that reads the objects.

Each CRD is sent as a server-side apply (`PATCH` with `application/apply-patch+yaml`, field manager
`dagline`, `force=true`): the apiserver creates a missing CRD and otherwise sets exactly the fields
applied, taking over the fields `helm install` or an earlier `kubectl apply` wrote (`force`) instead of
failing on a conflict. No client-side diff, no `last-applied-configuration` annotation (a DAG CRD is
larger than that annotation may be). The CRD is read first (`get`) only to say what changed: created,
updated or unchanged. The chart's hook account may `get`, `create` and `patch` these four
CustomResourceDefinitions by name and nothing else (a server-side apply that creates is authorized as
`create` of that name).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dagline.errors import OperationFailed
from dagline.k8s.client import CALL_ERRORS, DEFAULT_TIMEOUT, api_message

FIELD_MANAGER = "dagline"
APPLY_PATCH = "application/apply-patch+yaml"  # JSON is YAML: the body is sent as JSON


@dataclasses.dataclass(frozen=True)
class Applied:
    name: str
    outcome: str  # "created" | "updated" | "unchanged"


def _resource_version(api: client.ApiextensionsV1Api, name: str) -> str | None:
    try:
        response = api.read_custom_resource_definition(name, _preload_content=False, _request_timeout=DEFAULT_TIMEOUT)
    except CALL_ERRORS as exc:
        if isinstance(exc, ApiException) and exc.status == 404:
            return None
        raise _failed(name, "reading", exc) from None
    return json.loads(response.data)["metadata"].get("resourceVersion")


def _failed(name: str, doing: str, exc: Exception) -> OperationFailed:
    if isinstance(exc, ApiException):
        hint = (" (the account needs get, create and patch on this customresourcedefinition)"
                if exc.status == 403 else "")
        return OperationFailed(f"{doing} CustomResourceDefinition {name}: {exc.status} {api_message(exc)}{hint}")
    return OperationFailed(f"{doing} CustomResourceDefinition {name}: the Kubernetes API could not be reached: {exc}")


def apply_crds(api_client: client.ApiClient, definitions: Iterable[dict], *,
               field_manager: str = FIELD_MANAGER) -> list[Applied]:
    """Server-side apply each CRD in turn; raises `OperationFailed` naming the CRD the API refused."""
    api = client.ApiextensionsV1Api(api_client)
    done = []
    for body in definitions:
        name = body["metadata"]["name"]
        before = _resource_version(api, name)
        try:
            response = api.patch_custom_resource_definition(
                name, body, field_manager=field_manager, force=True, _content_type=APPLY_PATCH,
                _preload_content=False, _request_timeout=DEFAULT_TIMEOUT)
        except CALL_ERRORS as exc:
            raise _failed(name, "applying", exc) from None
        after = json.loads(response.data)["metadata"].get("resourceVersion")
        outcome = "created" if before is None else "unchanged" if after == before else "updated"
        done.append(Applied(name, outcome))
    return done
