"""The kopf controller: thin handlers that call the per-kind modules and write back what they derive.

Start it with `dagline operator` (which also runs the probes and metrics) or with
`kopf run -m dagline.k8s.handlers --standalone [-n NAMESPACE | -A]`: the startup handler then builds the
replica's `Runtime` from the environment (`DAGLINE_DB_URL`, ... see `dagline.k8s.settings`) and starts
the scheduler loop, the status sync and the probe servers beside kopf; the cleanup handler stops them.

Every replica runs every handler (standalone kopf, no peering, no leader). Handlers are idempotent and
their statuses are derived from the database, so two replicas handling one event agree:

| kind | create / resume / spec change | deleted (`k8s.deletions`) |
|---|---|---|
| DAG | validate, apply a version (`k8s.dags`) | deactivate the DAG |
| DagRun (user's) | trigger one manual run (`k8s.dagruns`) | nothing: the run keeps going |
| Backfill | create the backfill once; `spec.paused` (`k8s.backfills`) | cancel it |
| Pool | set its namespace's pool's slots (`k8s.pools`) | remove that pool |

No handler needs a finalizer (docs/adr/0083): a deletion is handled from the `DELETED` watch event,
after the object is gone, and what no replica saw is found by the listing (`k8s.listing`). kopf
removes the finalizer older versions put on objects (`dagline.io/finalizer`) at its next event.

kopf's event handlers feed the `ObjectCache` the status sync (`k8s.mirror`) reads. An invalid object
gets conditions and a Warning Event and is not retried (its next change is); an outage of the
database raises, and kopf retries the handler after `BACKOFF_S`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

import kopf

from dagline.k8s import backfills, dagruns, dags, deletions, pools, preflight
from dagline.k8s.conditions import READY, Outcome, as_merge_patch, reason_of
from dagline.k8s.resources import GROUP, LABEL_MANAGED, VERSION

registry = kopf.get_default_registry()  # the one `kopf run -m dagline.k8s.handlers` serves

DAGS = (GROUP, VERSION, "dags")
DAGRUNS = (GROUP, VERSION, "dagruns")
BACKFILLS = (GROUP, VERSION, "backfills")
POOLS = (GROUP, VERSION, "pools")
FINALIZER = "dagline.io/finalizer"  # no handler needs it; kopf removes it from objects older versions marked
ANNOTATION_PREFIX = "kopf.dagline.io"
BACKOFF_S = 10.0

log = logging.getLogger(__name__)


def _runtime(memo):
    return memo["runtime"]


def _plain(body) -> dict[str, Any]:
    return {key: body[key] for key in body}


def _report(body, patch, outcome: Outcome | None) -> None:
    """Write an outcome: its status through kopf's patch, its Events on the object."""
    if outcome is None:
        return
    for key, value in as_merge_patch(body.get("status"), outcome.status).items():
        patch.status[key] = value
    for type_, reason, message in outcome.events:
        kopf.event(body, type=type_, reason=reason, message=message[:1024])


# -- lifecycle -----------------------------------------------------------------------------------------

@kopf.on.startup(registry=registry)
async def start_replica(settings: kopf.OperatorSettings, memo, **_):
    """Standalone kopf with dagline's own finalizer and annotations, then the replica's other parts."""
    settings.peering.standalone = True
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration")
    if memo.get("runtime") is None:  # `kopf run -m dagline.k8s.handlers`: everything from the environment
        from dagline.k8s.runtime import Runtime

        memo["runtime"] = await asyncio.to_thread(Runtime.from_env)
    runtime = _runtime(memo)
    watch_settings(settings, runtime.settings)
    await asyncio.to_thread(runtime.start)
    memo["heartbeat"] = asyncio.create_task(_kopf_heartbeat(runtime.health), name="dagline kopf heartbeat")


def watch_settings(settings: kopf.OperatorSettings, operator) -> None:
    """kopf's watch timeouts from the operator's settings (docs/adr/0082): each watch request ends after
    `DAGLINE_WATCH_TIMEOUT` on the server's side and 30 s later on the client's; a stream that brings
    nothing for `DAGLINE_WATCH_INACTIVITY_TIMEOUT` is replaced by a new one, resuming where it was."""
    settings.watching.server_timeout = operator.watch_timeout_s
    settings.watching.client_timeout = operator.watch_client_timeout_s
    settings.watching.connect_timeout = operator.watch_connect_timeout_s
    settings.watching.inactivity_timeout = operator.watch_inactivity_timeout_s


async def _kopf_heartbeat(health) -> None:
    """Proves to /healthz that kopf's event loop turns."""
    while True:
        health.kopf_beat = time.monotonic()
        await asyncio.sleep(1.0)


@kopf.on.cleanup(registry=registry)
async def stop_replica(memo, **_):
    heartbeat = memo.get("heartbeat")
    if heartbeat is not None:
        heartbeat.cancel()
    runtime = memo.get("runtime")
    if runtime is not None:
        await asyncio.to_thread(runtime.stop)


# -- the cache of watched objects ------------------------------------------------------------------------

@kopf.on.event(*DAGS, registry=registry)
@kopf.on.event(*DAGRUNS, registry=registry)
@kopf.on.event(*BACKFILLS, registry=registry)
@kopf.on.event(*POOLS, registry=registry)
async def remember(event: Mapping[str, Any], resource, memo, **_):
    obj = event.get("object") or {}
    meta = obj.get("metadata") or {}
    runtime = _runtime(memo)
    if event.get("type") == "DELETED":
        runtime.cache.remove(resource.plural, meta.get("namespace"), meta.get("name"))
        try:
            await asyncio.to_thread(deletions.object_gone, runtime.db, runtime.cache, resource.plural, obj,
                                    clock=runtime.clock, who=runtime.who)
        except Exception:
            # kopf does not retry event handlers: back in the cache, the next listing finds it gone
            # and tries again (`k8s.listing`).
            runtime.cache.put(resource.plural, obj)
            raise
    else:
        runtime.cache.put(resource.plural, obj)


# -- DAG -------------------------------------------------------------------------------------------------

@kopf.on.resume(*DAGS, registry=registry, backoff=BACKOFF_S)
@kopf.on.create(*DAGS, registry=registry, backoff=BACKOFF_S)
@kopf.on.update(*DAGS, field="spec", registry=registry, backoff=BACKOFF_S)
def dag_changed(body, patch, memo, **_):
    runtime = _runtime(memo)
    outcome = dags.apply_dag_object(runtime.db, _plain(body), now=runtime.clock.now(), who=runtime.who,
                                    spark_policy=runtime.settings.spark_policy)
    _report(body, patch, _with_spark_ready(runtime, body, outcome))


def _with_spark_ready(runtime, body, outcome: Outcome) -> Outcome:
    """An applied DAG keeps the Spark preflight's `SparkReady` condition (the status sync keeps it up to
    date); a DAG applied while Spark is not ready also gets a Warning Event saying why."""
    verdict = runtime.preflight.verdict if runtime.preflight is not None else None
    if verdict is None or reason_of(outcome.status, READY) is None:
        return outcome
    previous = (body.get("status") or {}).get("conditions")
    outcome.status["conditions"] = preflight.with_condition(outcome.status.get("conditions"), verdict,
                                                            now=runtime.clock.now(), previous=previous)
    before = next((c.get("status") for c in previous or () if c.get("type") == preflight.CONDITION), None)
    if verdict.ready is False and before != "False":
        outcome.warn(verdict.reason, verdict.message)
    return outcome


# -- DagRun ----------------------------------------------------------------------------------------------

USER_DAGRUNS = {LABEL_MANAGED: kopf.ABSENT}


@kopf.on.resume(*DAGRUNS, labels=USER_DAGRUNS, registry=registry, backoff=BACKOFF_S)
@kopf.on.create(*DAGRUNS, labels=USER_DAGRUNS, registry=registry, backoff=BACKOFF_S)
def dagrun_created(body, patch, memo, **_):
    runtime = _runtime(memo)
    _report(body, patch, dagruns.trigger_from_object(runtime.db, _plain(body), now=runtime.clock.now(),
                                                     who=runtime.who))


# -- Backfill --------------------------------------------------------------------------------------------

@kopf.on.resume(*BACKFILLS, registry=registry, backoff=BACKOFF_S)
@kopf.on.create(*BACKFILLS, registry=registry, backoff=BACKOFF_S)
@kopf.on.update(*BACKFILLS, field="spec", registry=registry, backoff=BACKOFF_S)
def backfill_changed(body, patch, memo, **_):
    runtime = _runtime(memo)
    _report(body, patch, backfills.ensure_backfill(runtime.db, _plain(body), now=runtime.clock.now(),
                                                   who=runtime.who))


# -- Pool ------------------------------------------------------------------------------------------------

@kopf.on.resume(*POOLS, registry=registry, backoff=BACKOFF_S)
@kopf.on.create(*POOLS, registry=registry, backoff=BACKOFF_S)
@kopf.on.update(*POOLS, field="spec", registry=registry, backoff=BACKOFF_S)
def pool_changed(body, patch, memo, **_):
    runtime = _runtime(memo)
    _report(body, patch, pools.apply_pool_object(runtime.db, _plain(body), now=runtime.clock.now(), who=runtime.who))
