"""The `dagline operator` process: kopf (standalone) and one `Runtime` (scheduler loop, status sync, probes).

kopf runs in the main thread, so SIGTERM and SIGINT stop it the way kopf stops: handlers finish, the
cleanup handler stops the scheduler loop gracefully and the servers, and the process exits 0. If the
scheduler loop dies (e.g. a peer declared this replica dead), kopf is stopped too and the exit status
is 1, so Kubernetes restarts the pod.

The replica itself (`Runtime.from_env()`) is built by `dagline operator`; the handlers it serves are
`dagline.k8s.handlers`, which never import this module.

The database: any number of replicas on PostgreSQL; SQLite works for exactly one (the scheduler's file
lock refuses a second, which then exits 1 saying so).
"""

from __future__ import annotations

import asyncio
import logging

import kopf

from dagline.k8s import handlers
from dagline.k8s.runtime import Runtime

log = logging.getLogger(__name__)


def run(runtime: Runtime) -> int:
    """Run kopf with dagline's handlers and this runtime until a signal; returns the exit status."""
    asyncio.run(_serve(runtime))
    return 1 if runtime.failed else 0


async def _serve(runtime: Runtime) -> None:
    # An asyncio flag: kopf waits for a threading one in an executor thread, which then never ends
    # when a signal, not the flag, stops kopf (and `asyncio.run` waits for that thread for ever).
    loop, stop = asyncio.get_running_loop(), asyncio.Event()
    runtime.on_fatal = lambda: loop.call_soon_threadsafe(stop.set)
    namespace = runtime.settings.namespace
    log.info("dagline operator: watching %s", f"namespace {namespace}" if namespace else "every namespace")
    await kopf.operator(registry=handlers.registry, standalone=True, clusterwide=namespace is None,
                        namespaces=[namespace] if namespace else (), memo=kopf.Memo(runtime=runtime), stop_flag=stop)
