"""The API calls the status sync makes on dagline's own objects: create and delete DagRuns, patch statuses.

Each call has a request timeout (a hung API server must not hang the sync). Outcomes the sync expects
are values, not errors: a create that finds the object (409) returns False, a delete or status patch
of an object already gone (404) returns False. Connection errors, 429 and 5xx raise `ApiUnavailable`
(the next sync tries again); other refusals raise `ApiRejected` with the API's message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dagline.k8s.client import DEFAULT_TIMEOUT, AlreadyExists, ApiRejected, ApiUnavailable, api_message
from dagline.k8s.resources import GROUP, VERSION

_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)


def _sorted(exc: Exception) -> Exception:
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        if status == 0 or status == 429 or status >= 500:
            return ApiUnavailable(f"HTTP {status or 'error'}: {api_message(exc)}")
        if status == 409:
            return AlreadyExists(status, api_message(exc))
        return ApiRejected(status, api_message(exc))
    return ApiUnavailable(f"{type(exc).__name__}: {exc}")


class DaglineObjects:
    """dagline.io objects through the kubernetes client."""

    def __init__(self, api_client: client.ApiClient, *, timeout=DEFAULT_TIMEOUT):
        self.api = client.CustomObjectsApi(api_client)
        self.timeout = timeout

    def _args(self, plural: str, namespace: str) -> dict[str, Any]:
        return {"group": GROUP, "version": VERSION, "namespace": namespace, "plural": plural,
                "_request_timeout": self.timeout}

    def create(self, plural: str, body: Mapping[str, Any]) -> bool:
        """Create; False if an object of that name exists already."""
        try:
            namespace = body["metadata"]["namespace"]
            self.api.create_namespaced_custom_object(body=dict(body), **self._args(plural, namespace))
        except _ERRORS as exc:
            error = _sorted(exc)
            if isinstance(error, AlreadyExists):
                return False
            raise error from None
        return True

    def delete(self, plural: str, namespace: str, name: str) -> bool:
        """Delete; False if it was gone already."""
        try:
            self.api.delete_namespaced_custom_object(name=name, **self._args(plural, namespace))
        except _ERRORS as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return False
            raise _sorted(exc) from None
        return True

    def patch_status(self, plural: str, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        """Merge these fields into the object's status (None deletes one); False if the object is gone."""
        try:
            self.api.patch_namespaced_custom_object_status(
                name=name, body={"status": dict(status)}, **self._args(plural, namespace))
        except _ERRORS as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return False
            raise _sorted(exc) from None
        return True
