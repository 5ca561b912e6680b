"""The emulator running in its own thread, and a small synchronous client the tests use to drive it.

`Cluster.start()` serves a `KubeEmulator` on a free localhost port from a thread with its own event loop
(kopf and the code under test run in other threads and loops), writes a kubeconfig pointing at it,
and installs the CustomResourceDefinitions of the dagline kinds and of `SparkApplication`.
The helpers talk HTTP to the emulator, as any client would.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import pathlib
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import aiohttp.test_utils

from dagline.k8s import crds as dagline_crds
from dagline.k8s import resources as dagline_resources
from tests.helpers.k8s.emulator import SPARK_APPLICATIONS, ApiResource, KubeEmulator
from tests.helpers.polling import wait_for


class KubeApiError(Exception):
    """A non-2xx answer to a helper call; `status` is the HTTP code and `body` the API's Status object."""

    def __init__(self, status: int, body: Any, what: str):
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{what}: HTTP {status}: {message}")
        self.status, self.body = status, body


def default_crds() -> list[dict[str, Any] | ApiResource]:
    """dagline's generated CRDs (`make crds`: their schemas prune and validate), and a schemaless SparkApplication."""
    return [*(dagline_crds.custom_resource_definition(k) for k in dagline_resources.KINDS), SPARK_APPLICATIONS]


def _kubeconfig(url: str) -> str:
    return json.dumps({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "emulator", "cluster": {"server": url}}],
        "users": [{"name": "tester", "user": {"token": "emulator-token"}}],
        "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "tester",
                                                       "namespace": "default"}}],
        "current-context": "emulator",
    }, indent=2)


class Cluster:
    """A running emulator plus sync helpers. Resources are named by plural (`dags`), kind or short name."""

    def __init__(self, directory: pathlib.Path):
        self.kubeconfig_path = directory / "kubeconfig"
        self.url = ""
        self.emulator: KubeEmulator | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None
        self.server_errors: list[BaseException] = []  # exceptions inside the emulator (answered as HTTP 500)

    # --------------------------------------------------------------------------------- lifecycle
    def start(self, crds: list[dict[str, Any] | ApiResource] | None = None) -> Cluster:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), name="kube-emulator", daemon=True)
        self._thread.start()
        if not ready.wait(10) or self._failure is not None:
            raise RuntimeError(f"the Kubernetes emulator did not start: {self._failure!r}")
        self.kubeconfig_path.write_text(_kubeconfig(self.url))
        wanted = default_crds() if crds is None else crds
        self.call(lambda em: em.install_crds(wanted))
        return self

    def _run(self, ready: threading.Event) -> None:
        async def main() -> None:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            async with KubeEmulator() as emulator:
                server = aiohttp.test_utils.RawTestServer(emulator, host="127.0.0.1", port=0)
                await server.start_server()
                self.emulator, self.url = emulator, str(server.make_url("")).rstrip("/")
                ready.set()
                try:
                    await self._stop.wait()
                finally:
                    self.server_errors = list(emulator.errors)
                    emulator.close_watches()
                    await asyncio.sleep(0)  # let the streams see the end before the server closes
                    await server.close()

        try:
            asyncio.run(main())
        except BaseException as exc:  # noqa: BLE001 - reported by start() or stop()
            self._failure = exc
            ready.set()

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(10)
            if self._thread.is_alive():
                raise RuntimeError("the Kubernetes emulator did not stop within 10 s")

    def call(self, fn: Callable[[KubeEmulator], Any], timeout: float = 10) -> Any:
        """Run `fn(emulator)` in the emulator's loop (safe against concurrent requests) and return its result."""
        async def run() -> Any:
            return fn(self.emulator)
        future = asyncio.run_coroutine_threadsafe(run(), self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            raise RuntimeError("the emulator's loop did not answer within {timeout} s") from None

    # ------------------------------------------------------------------------------------ HTTP
    def resource(self, name: str) -> ApiResource:
        return self.call(lambda em: em.resource_named(name))

    def request(self, method: str, path: str, body: Any = None, *, params: dict[str, str] | None = None,
                content_type: str = "application/json") -> Any:
        url = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                answer = json.loads(raw)
            except ValueError:
                answer = raw.decode(errors="replace")
            raise KubeApiError(exc.code, answer, f"{method} {path}") from None

    def create_namespace(self, name: str) -> dict[str, Any]:
        """Objects can only be created in a namespace that exists (`default`, `kube-system`, `kube-public` do)."""
        return self.create("namespaces", None, {"metadata": {"name": name}})

    def create(self, kind_plural: str, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", self.resource(kind_plural).path(namespace), body)

    def get(self, kind_plural: str, namespace: str | None, name: str, *, missing_ok: bool = False
            ) -> dict[str, Any] | None:
        try:
            return self.request("GET", self.resource(kind_plural).path(namespace, name))
        except KubeApiError as exc:
            if missing_ok and exc.status == 404:
                return None
            raise

    def list(self, kind_plural: str, namespace: str | None = None, label_selector: str | None = None,
             field_selector: str | None = None) -> list[dict[str, Any]]:
        params = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
        return self.request("GET", self.resource(kind_plural).path(namespace), params=params)["items"]

    def patch(self, kind_plural: str, namespace: str | None, name: str, patch: dict[str, Any] | list[Any]
              ) -> dict[str, Any]:
        """A merge patch (a dict) or a JSON patch (a list of operations)."""
        content_type = "application/json-patch+json" if isinstance(patch, list) else "application/merge-patch+json"
        return self.request("PATCH", self.resource(kind_plural).path(namespace, name), patch,
                            content_type=content_type)

    def patch_status(self, kind_plural: str, namespace: str | None, name: str, status: dict[str, Any]
                     ) -> dict[str, Any]:
        """Merge `status` into the object's status through the status subresource."""
        return self.request("PATCH", self.resource(kind_plural).path(namespace, name, "status"),
                            {"status": status}, content_type="application/merge-patch+json")

    def replace(self, kind_plural: str, namespace: str | None, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.request("PUT", self.resource(kind_plural).path(namespace, name), body)

    def apply(self, kind_plural: str, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        """Create, or replace the existing object's spec/metadata (like `kubectl apply` without the merge)."""
        name = body["metadata"]["name"]
        existing = self.get(kind_plural, namespace, name, missing_ok=True)
        if existing is None:
            return self.create(kind_plural, namespace, body)
        merged = dict(body, metadata=dict(body["metadata"], resourceVersion=existing["metadata"]["resourceVersion"]))
        return self.replace(kind_plural, namespace, name, merged)

    def delete(self, kind_plural: str, namespace: str | None, name: str, *, propagation_policy: str | None = None
               ) -> dict[str, Any]:
        body = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation_policy:
            body["propagationPolicy"] = propagation_policy
        return self.request("DELETE", self.resource(kind_plural).path(namespace, name), body)

    def watch(self, kind_plural: str, namespace: str | None = None, *, resource_version: str | None = None,
              label_selector: str | None = None, seconds: float = 0.3) -> list[dict[str, Any]]:
        """The events a watch stream delivers within `seconds` (the server ends it then: `timeoutSeconds`)."""
        params = {"watch": "true", "timeoutSeconds": str(seconds)}
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if label_selector:
            params["labelSelector"] = label_selector
        url = self.url + self.resource(kind_plural).path(namespace) + "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=seconds + 10) as resp:
            return [json.loads(line) for line in resp.read().splitlines() if line.strip()]

    def events(self, namespace: str | None = None, *, involving: str | None = None) -> list[dict[str, Any]]:
        """Events, oldest first; `involving` keeps those about the object of that name."""
        selector = f"involvedObject.name={involving}" if involving else None
        found = self.list("events", namespace, field_selector=selector)
        return sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))

    def history(self, kind_plural: str, namespace: str | None, name: str) -> list[dict[str, Any] | None]:
        """Every stored version of an object, oldest first (None marks a deletion)."""
        def versions(em: KubeEmulator) -> list[dict[str, Any] | None]:
            res = em.resource_named(kind_plural)
            key = (res.ref, namespace if res.namespaced else None, name)
            if key not in em.objects:
                return []
            return [None if v is None else json.loads(json.dumps(v.raw)) for v in em.objects[key].history]
        return self.call(versions)

    # ---------------------------------------------------------------------------------- waiting
    @staticmethod
    def wait_for(probe: Callable[[], Any], timeout: float = 5.0, *, until: Callable[[Any], Any] | None = None,
                 interval: float = 0.02, what: str | None = None) -> Any:
        """Poll `probe` until its value is truthy (or `until(value)` is), and return that value.

        On timeout, fail with the last value the probe returned (or the exception it raised), so
        `wait_for(lambda: kube.get("dags", ns, "d"), until=lambda d: d.get("status"))` shows the object.
        """
        return wait_for(probe, timeout=timeout, until=until, interval=interval, what=what, tolerate=(Exception,))

    def wait_gone(self, kind_plural: str, namespace: str | None, name: str, timeout: float = 5.0) -> None:
        self.wait_for(lambda: self.get(kind_plural, namespace, name, missing_ok=True) is None, timeout,
                      what=f"{kind_plural}/{name} deleted")
