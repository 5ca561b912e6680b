"""Real kopf in a thread of its own, against the emulator: start, wait until it watches, stop fast.

`run_kopf(cluster, registry_or_module, namespace)` is a context manager. It runs `kopf.operator()` in
standalone mode in a new thread and event loop, waits until kopf is ready (its startup handlers have
run) and every resource its handlers serve has an open watch stream in the emulator, and on exit sets
kopf's stop flag and joins the thread. It fails the test if kopf crashed or did not stop in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
import types
from collections.abc import Iterator
from typing import Any

import kopf
from kopf._cogs.structs import references as kopf_references

from tests.helpers.k8s.cluster import Cluster
from tests.helpers.polling import wait_for


def test_settings() -> kopf.OperatorSettings:
    """kopf's defaults, except what makes tests slow: a short exit and batching window."""
    settings = kopf.OperatorSettings()
    settings.queueing.exit_timeout = 0.5       # how long a stopping worker may finish its current handler
    settings.queueing.idle_timeout = 0.5       # a per-object worker ends this soon after its last event
    settings.watching.reconnect_backoff = 0.05
    settings.persistence.consistency_timeout = 2.0
    return settings


test_settings.__test__ = False  # a factory, not a test


@dataclasses.dataclass
class KopfRun:
    """A running operator: how long it took to be ready, and (after exit) to stop."""

    thread: threading.Thread
    registry: kopf.OperatorRegistry
    settings: kopf.OperatorSettings
    started_in: float = 0.0
    stopped_in: float = 0.0


def _registry_of(target: Any) -> kopf.OperatorRegistry:
    if isinstance(target, types.ModuleType):
        module_registry = getattr(target, "registry", None)
        target = module_registry if isinstance(module_registry, kopf.OperatorRegistry) else kopf.get_default_registry()
    if not isinstance(target, kopf.OperatorRegistry):
        raise TypeError(f"run_kopf needs a kopf.OperatorRegistry or a module of handlers, not {target!r}")
    # A bare OperatorRegistry has no login handler (kopf's default registry adds one): log in as the
    # deployed controller does, through the kubernetes client and its kubeconfig.
    # (kopf does not export its Activity enum: compare by value, `authentication`.)
    if not any(str(getattr(h.activity, "value", h.activity)) == "authentication"
               for h in target._activities.get_all_handlers()):
        kopf.on.login(registry=target)(kopf.login_via_client)
    return target


def _served_resources(cluster: Cluster, registry: kopf.OperatorRegistry) -> set[tuple[str, str, str]]:
    """The (group, version, plural) of every emulator resource that the registry's handlers select."""
    selectors = set()
    for part in (registry._changing, registry._watching, registry._spawning, registry._indexing):
        selectors |= set(part.get_all_selectors())

    def match(emulator) -> set[tuple[str, str, str]]:
        found = set()
        for res in emulator.api_resources.values():
            resource = kopf_references.Resource(
                group=res.group, version=res.version, plural=res.plural, kind=res.kind,
                singular=res.singular, shortcuts=frozenset(res.short_names), namespaced=res.namespaced,
                preferred=True, subresources=frozenset({"status"} if res.status_subresource else ()),
                verbs=frozenset({"list", "watch", "patch", "get"}),
            )
            if any(selector.check(resource) for selector in selectors):
                found.add((res.group, res.version, res.plural))
        return found
    return cluster.call(match)


@contextlib.contextmanager
def run_kopf(cluster: Cluster, target: Any, namespace: str | None = "default", *,
             settings: kopf.OperatorSettings | None = None, memo: Any = None,
             ready_timeout: float = 10.0, stop_timeout: float = 5.0) -> Iterator[KopfRun]:
    """Run kopf with `target`'s handlers, watching `namespace` (None: cluster-wide)."""
    registry = _registry_of(target)
    if namespace is not None and cluster.get("namespaces", None, namespace, missing_ok=True) is None:
        raise RuntimeError(f"namespace {namespace!r} does not exist in the emulator, and kopf would never watch it: "
                           f"kube.create_namespace({namespace!r}) first")
    settings = settings or test_settings()
    stop_flag, ready_flag = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def main() -> None:
        try:
            asyncio.run(kopf.operator(
                registry=registry, settings=settings, standalone=True, memo=memo,
                clusterwide=namespace is None, namespaces=[namespace] if namespace else (),
                stop_flag=stop_flag, ready_flag=ready_flag,
            ))
        except BaseException as exc:  # noqa: BLE001 - reported to the test below
            failures.append(exc)

    began = time.monotonic()
    thread = threading.Thread(target=main, name="kopf", daemon=True)
    run = KopfRun(thread, registry, settings)
    thread.start()
    try:
        wanted = _served_resources(cluster, registry)


        def readiness() -> dict:
            if failures:
                raise RuntimeError(f"kopf stopped while starting: {failures[0]!r}") from failures[0]
            watched = {(res.group, res.version, res.plural) for res, _ns in cluster.call(lambda em: em.open_watches())}
            return {"ready": ready_flag.is_set(), "not watched yet": sorted(wanted - watched)}

        wait_for(readiness, "kopf ready and watching every served resource", timeout=ready_timeout, interval=0.01,
                 until=lambda state: state["ready"] and not state["not watched yet"])
        run.started_in = time.monotonic() - began
        yield run
    finally:
        stopping = time.monotonic()
        stop_flag.set()
        thread.join(stop_timeout)
        run.stopped_in = time.monotonic() - stopping
        if thread.is_alive():
            raise RuntimeError(f"kopf did not stop within {stop_timeout} s")
    if failures:
        raise RuntimeError(f"kopf failed: {failures[0]!r}") from failures[0]
