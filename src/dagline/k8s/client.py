"""The Kubernetes API as dagline uses it: loading credentials, and SparkApplication calls with errors sorted.

`load_api_client` finds credentials the way kubectl and in-cluster pods do. `SparkApplications` and
`SparkConnects` wrap the few custom-object calls the `spark-k8s` executor makes, `Pods` the calls on
Spark Connect tries' driver pods, with a request timeout on each (a hung
API server must not hang the scheduler loop), `Secrets` the per-try Secret calls (a try's signal
token), and both turn the client's exceptions into three kinds
the executor acts on:
- `ApiUnavailable`: connection refused or reset, timeouts, 429 and 5xx — transient: keep state, retry;
- `AlreadyExists` (409 on create): the deterministic name is taken — adopt the object if it is ours;
- `ApiRejected`: any other 4xx (403 forbidden, 422 invalid, 404 no such kind/namespace) — permanent,
  with the API's own message.
A missing object is not an error: `get` returns None and `delete` returns False.
"""

from __future__ import annotations

import json
import os

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from dagline.errors import DaglineError, OperationFailed, Unavailable
from dagline.k8s.sparkapp import GROUP, PLURAL, VERSION
from dagline.k8s.sparkconnect import GROUP as CONNECT_GROUP
from dagline.k8s.sparkconnect import PLURAL as CONNECT_PLURAL
from dagline.k8s.sparkconnect import VERSION as CONNECT_VERSION

DEFAULT_TIMEOUT = (5.0, 30.0)  # (connect, read) seconds per request
LIST_PAGE = 500


def load_api_client() -> client.ApiClient:
    """An API client: in-cluster credentials when `KUBERNETES_SERVICE_HOST` is set, else the kubeconfig
    (`$KUBECONFIG`, which may list several files, else ~/.kube/config). Raises `OperationFailed`."""
    configuration = client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config(client_configuration=configuration)
        except ConfigException as exc:
            raise OperationFailed(
                f"KUBERNETES_SERVICE_HOST is set but the in-cluster service account could not be used: {exc}"
            ) from None
        return client.ApiClient(configuration)
    path = os.environ.get("KUBECONFIG") or os.path.join("~", ".kube", "config")
    try:
        config.load_kube_config(config_file=path, client_configuration=configuration)
    except (ConfigException, OSError, TypeError, ValueError) as exc:
        raise OperationFailed(
            f"no Kubernetes credentials: not in a cluster (KUBERNETES_SERVICE_HOST is not set) and the "
            f"kubeconfig {path!r} could not be used ({exc}); set KUBECONFIG or run inside the cluster"
        ) from None
    return client.ApiClient(configuration)


class ApiUnavailable(Unavailable):
    """The API could not answer now (connection error, timeout, 429, 5xx): try again later."""


class ApiRejected(DaglineError):
    """The API refused the request for good (4xx); the message is the API's own. To dagline's own caller
    that is 502: what dagline called refused."""

    http_status = 502

    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(f"{status}: {message}")


class AlreadyExists(ApiRejected):
    """409 on create: an object with that name exists."""


def api_message(exc: ApiException) -> str:
    """The `message` of the API's Status body, else the HTTP reason."""
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (TypeError, ValueError):
        body = {}
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return str(exc.reason or "no reason given")


def is_unknown_kind(exc: ApiException) -> bool:
    """A 404 on a create or list meaning the API serves no such resource (its CRD is not installed: "the
    server could not find the requested resource", or "404 page not found" for an unknown group), not a
    missing namespace (`namespaces "x" not found`)."""
    return exc.status == 404 and not api_message(exc).startswith('namespaces "')


def sorted_error(exc: Exception) -> Exception:
    """A failed API call as dagline's error: ApiUnavailable (retry later), AlreadyExists or ApiRejected."""
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        if status == 0 or status == 429 or status >= 500:
            return ApiUnavailable(f"HTTP {status or 'error'}: {api_message(exc)}")
        if status == 409:
            return AlreadyExists(status, api_message(exc))
        return ApiRejected(status, api_message(exc))
    return ApiUnavailable(f"{type(exc).__name__}: {exc}")


CALL_ERRORS = (  # what a call through the kubernetes client may raise
    ApiException, urllib3.exceptions.HTTPError, OSError)


def all_pages(list_page, label_selector: str) -> list[dict]:
    """Every item of a listing, page by page (`limit`, then each page's `continue` token)."""
    items: list[dict] = []
    token = None
    while True:
        kwargs = {"label_selector": label_selector, "limit": LIST_PAGE}
        if token:
            kwargs["_continue"] = token
        try:
            page = list_page(**kwargs)
        except CALL_ERRORS as exc:
            raise sorted_error(exc) from None
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


class CustomObjects:
    """Calls on one kind of custom object in one namespace (SparkApplications, SparkConnects)."""

    group, version, plural = GROUP, VERSION, PLURAL

    def __init__(self, api_client: client.ApiClient, namespace: str, *, timeout=DEFAULT_TIMEOUT):
        self.api = client.CustomObjectsApi(api_client)
        self.namespace = namespace
        self.timeout = timeout

    def _args(self) -> dict:
        return {"group": self.group, "version": self.version, "namespace": self.namespace, "plural": self.plural,
                "_request_timeout": self.timeout}

    def create(self, body: dict) -> dict:
        try:
            return self.api.create_namespaced_custom_object(body=body, **self._args())
        except CALL_ERRORS as exc:
            raise sorted_error(exc) from None

    def get(self, name: str) -> dict | None:
        try:
            return self.api.get_namespaced_custom_object(name=name, **self._args())
        except CALL_ERRORS as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return None
            raise sorted_error(exc) from None

    def list(self, label_selector: str) -> list[dict]:
        """Every object matching the selector (page by page where the server pages)."""
        return all_pages(lambda **kwargs: self.api.list_namespaced_custom_object(**kwargs, **self._args()),
                         label_selector)

    def kind_installed(self) -> bool:
        """Whether the API serves this kind (its CRD is installed): a one-item list, which the
        executor's `list` permission allows (no permission on CRDs needed). False on the API's 404 for an
        unknown resource; a missing namespace or a refusal raises `ApiRejected`."""
        try:
            self.api.list_namespaced_custom_object(limit=1, **self._args())
        except CALL_ERRORS as exc:
            if isinstance(exc, ApiException) and is_unknown_kind(exc):
                return False
            raise sorted_error(exc) from None
        return True

    def delete(self, name: str, *, resource_version: str | None = None) -> bool:
        """Delete (what it owns goes with it); False if it was already gone. With `resource_version`, only
        that version of it: a changed object is a 409 (`AlreadyExists` is not raised: `ApiRejected`)."""
        body = {"preconditions": {"resourceVersion": resource_version}} if resource_version else None
        try:
            self.api.delete_namespaced_custom_object(name=name, body=body, **self._args())
        except CALL_ERRORS as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return False
            if isinstance(exc, ApiException) and exc.status == 409:
                raise ApiRejected(409, api_message(exc)) from None
            raise sorted_error(exc) from None
        return True

    def patch_metadata(self, name: str, metadata: dict) -> dict | None:
        """Merge labels or annotations into the object's; the object, or None if it is gone."""
        try:
            return self.api.patch_namespaced_custom_object(name=name, body={"metadata": metadata}, **self._args())
        except CALL_ERRORS as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return None
            raise sorted_error(exc) from None

    def set_labels(self, name: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> bool:
        """Merge these labels (and annotations) into the object's; False if it is gone."""
        metadata: dict = {"labels": labels}
        if annotations:
            metadata["annotations"] = annotations
        return self.patch_metadata(name, metadata) is not None


class SparkApplications(CustomObjects):
    """SparkApplication calls in one namespace."""


class SparkConnects(CustomObjects):
    """SparkConnect calls in one namespace: the Spark Connect servers of DAGs (ADR 0086)."""

    group, version, plural = CONNECT_GROUP, CONNECT_VERSION, CONNECT_PLURAL


class Pods:
    """Pod calls in one namespace: the driver Pods of Spark Connect tries, with the same methods as
    `CustomObjects` (objects are the API's JSON, as for custom objects), and a streaming SparkApplication's
    driver pod deleted with its grace period."""

    def __init__(self, api_client: client.ApiClient, namespace: str, *, timeout=DEFAULT_TIMEOUT):
        self.api = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.timeout = timeout

    def _json(self, response) -> dict:
        return json.loads(response.data or b"{}")

    def create(self, body: dict) -> dict:
        try:
            return self._json(self.api.create_namespaced_pod(self.namespace, body, _request_timeout=self.timeout,
                                                             _preload_content=False))
        except CALL_ERRORS as exc:
            raise sorted_error(exc) from None

    def get(self, name: str) -> dict | None:
        try:
            return self._json(self.api.read_namespaced_pod(name, self.namespace, _request_timeout=self.timeout,
                                                           _preload_content=False))
        except CALL_ERRORS as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return None
            raise sorted_error(exc) from None

    def list(self, label_selector: str) -> list[dict]:
        return all_pages(lambda **kwargs: self._json(self.api.list_namespaced_pod(
            self.namespace, _request_timeout=self.timeout, _preload_content=False, **kwargs)), label_selector)

    def delete(self, name: str, *, grace_period_s: int | None = None) -> bool:
        """Delete: the job's container gets SIGTERM, then its terminationGracePeriodSeconds, or
        `grace_period_s` when given (the API server honours a delete's grace period whatever the pod spec
        says: no webhook needed, ADR 0090); False if gone."""
        grace = {} if grace_period_s is None else {"grace_period_seconds": grace_period_s}
        try:
            self.api.delete_namespaced_pod(name, self.namespace, _request_timeout=self.timeout,
                                           _preload_content=False, **grace)
        except CALL_ERRORS as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return False
            raise sorted_error(exc) from None
        return True

    def exists(self, name: str) -> bool:
        return self.get(name) is not None

    def set_labels(self, name: str, labels: dict[str, str], annotations: dict[str, str] | None = None) -> bool:
        metadata: dict = {"labels": labels}
        if annotations:
            metadata["annotations"] = annotations
        try:
            self.api.patch_namespaced_pod(name, self.namespace, {"metadata": metadata},
                                          _request_timeout=self.timeout, _preload_content=False)
        except CALL_ERRORS as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return False
            raise sorted_error(exc) from None
        return True


class Secrets:
    """Secret calls in one namespace: creating the per-try Secrets holding a try's signal token."""

    def __init__(self, api_client: client.ApiClient, namespace: str, *, timeout=DEFAULT_TIMEOUT):
        self.api = client.CoreV1Api(api_client)
        self.namespace = namespace
        self.timeout = timeout

    def create(self, body: dict) -> bool:
        """Create the Secret; False when one of that name exists already (it is left as it is). The
        only Secret call dagline makes in the Spark namespace: the chart grants `create` and no more."""
        try:
            self.api.create_namespaced_secret(self.namespace, body, _request_timeout=self.timeout)
        except CALL_ERRORS as exc:
            error = sorted_error(exc)
            if isinstance(error, AlreadyExists):
                return False
            raise error from None
        return True
