"""The API calls the status sync and the listing make on dagline's own objects: create and delete DagRuns,
patch statuses, post Events about them, list a kind, check that an object exists.

Each call has a request timeout (a hung API server must not hang the sync). Outcomes the sync expects
are values, not errors: a create that finds the object (409) returns False, a delete or status patch
of an object already gone (404) returns False. Connection errors, 429 and 5xx raise `ApiUnavailable`
(the next sync tries again); other refusals raise `ApiRejected` with the API's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dagline.k8s.client import CALL_ERRORS, DEFAULT_TIMEOUT, LIST_PAGE, AlreadyExists, sorted_error
from dagline.k8s.resources import GROUP, VERSION


class DaglineObjects:
    """dagline.io objects through the kubernetes client."""

    def __init__(self, api_client: client.ApiClient, *, timeout=DEFAULT_TIMEOUT):
        self.api = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.timeout = timeout

    def _args(self, plural: str, namespace: str) -> dict[str, Any]:
        return {"group": GROUP, "version": VERSION, "namespace": namespace, "plural": plural,
                "_request_timeout": self.timeout}

    def create(self, plural: str, body: Mapping[str, Any]) -> bool:
        """Create; False if an object of that name exists already."""
        try:
            namespace = body["metadata"]["namespace"]
            self.api.create_namespaced_custom_object(body=dict(body), **self._args(plural, namespace))
        except CALL_ERRORS as exc:
            error = sorted_error(exc)
            if isinstance(error, AlreadyExists):
                return False
            raise error from None
        return True

    def delete(self, plural: str, namespace: str, name: str) -> bool:
        """Delete; False if it was gone already."""
        try:
            self.api.delete_namespaced_custom_object(name=name, **self._args(plural, namespace))
        except CALL_ERRORS as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return False
            raise sorted_error(exc) from None
        return True

    def post_event(self, involved: Mapping[str, Any], type_: str, reason: str, message: str, *, reporter: str,
                   at: str) -> None:
        """A Kubernetes Event about one of dagline's objects (`at`: its time, as the API writes times)."""
        meta = involved.get("metadata") or {}
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
                "involvedObject": {"apiVersion": involved.get("apiVersion"), "kind": involved.get("kind"),
                                   "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
                "type": type_, "reason": reason, "message": message[:1024], "source": {"component": "dagline"},
                "reportingComponent": "dagline.io/operator", "reportingInstance": reporter[:128],
                "firstTimestamp": at, "lastTimestamp": at, "count": 1}
        try:
            self.core.create_namespaced_event(meta["namespace"], body, _request_timeout=self.timeout)
        except CALL_ERRORS as exc:
            raise sorted_error(exc) from None

    def patch_status(self, plural: str, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        """Merge these fields into the object's status (None deletes one); False if the object is gone."""
        try:
            self.api.patch_namespaced_custom_object_status(
                name=name, body={"status": dict(status)}, **self._args(plural, namespace))
        except CALL_ERRORS as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return False
            raise sorted_error(exc) from None
        return True

    def list(self, plural: str, namespace: str | None) -> list[dict[str, Any]]:
        """Every object of a kind in a namespace (None: every namespace), page by page."""
        found: list[dict[str, Any]] = []
        token = None
        while True:
            args = {"group": GROUP, "version": VERSION, "plural": plural, "limit": LIST_PAGE,
                    "_request_timeout": self.timeout, **({"_continue": token} if token else {})}
            try:
                if namespace is None:
                    page = self.api.list_cluster_custom_object(**args)
                else:
                    page = self.api.list_namespaced_custom_object(namespace=namespace, **args)
            except CALL_ERRORS as exc:
                raise sorted_error(exc) from None
            found.extend(page.get("items") or ())
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return found

    def exists(self, plural: str, namespace: str, name: str) -> bool:
        """Whether the object exists now (one being deleted counts): a list by name, as the operator's role
        grants `list`, not `get`."""
        try:
            page = self.api.list_namespaced_custom_object(
                group=GROUP, version=VERSION, namespace=namespace, plural=plural,
                field_selector=f"metadata.name={name}", _request_timeout=self.timeout)
        except CALL_ERRORS as exc:
            raise sorted_error(exc) from None
        return bool(page.get("items"))
