"""The operator's callback channels: Kubernetes Events from the outbox, and Secrets for webhooks.

`kubernetesEvent` callbacks are delivered only by operator replicas (a plain `dagline scheduler` does
not claim them): each becomes a core/v1 Event on the DAG object and one on the run's DagRun object
(dagline's mirror, or the user's own DagRun that triggered the run), when the cache knows them. The
Event's name is derived from the delivery id, so a redelivery (a replica died before recording the
outcome) finds it already there (409) and counts as delivered: one Event per callback.
Type `Warning` for failure and deadline_miss, `Normal` for success and retry; reason `DagRunSucceeded`,
`DagRunFailed`, `TaskRetrying`, `DeadlineMissed`, ...; the message is the callback's one-line summary.

`read_secret(dag_key, name, key)` reads a webhook's (and a spark-k8s task's env) `secretKeyRef` from the
DAG's namespace (as a Pod reads Secrets of its own namespace); the chart grants `get` on the Secrets it
lists (`callbacks.secretNames`) and nothing else.

Both take the namespace from the DAG's key (`dagline.domain.names.split`: `a-team/etl` is `etl` of
`a-team`, `etl` is `default`'s), never from a lookup by name: a same-named DAG of another namespace is
another key, and gets neither these Secrets nor these Events; a deleted DAG's running run still reads
its own namespace's Secrets and nobody else's. A DAG applied from a file is `default`'s.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dagline.domain import names
from dagline.domain.callbacks import CallbackEvent, summary
from dagline.k8s import dagruns
from dagline.k8s.cache import ObjectCache
from dagline.k8s.client import DEFAULT_TIMEOUT
from dagline.k8s.conditions import k8s_time
from dagline.scheduler.channels import Callback, DeliveryFailed
from dagline.times import parse_instant

_REASONS = {
    ("run", CallbackEvent.SUCCESS): "DagRunSucceeded", ("run", CallbackEvent.FAILURE): "DagRunFailed",
    ("run", CallbackEvent.DEADLINE_MISS): "DeadlineMissed", ("task", CallbackEvent.SUCCESS): "TaskSucceeded",
    ("task", CallbackEvent.FAILURE): "TaskFailed", ("task", CallbackEvent.RETRY): "TaskRetrying",
    ("task", CallbackEvent.DEADLINE_MISS): "DeadlineMissed",
}


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return body.get("metadata") or {}


def dag_key_of(payload: Mapping[str, Any]) -> str:
    """The key of a callback's DAG: its `dag_id` (the key, or the name with `namespace` beside it)."""
    dag_id = payload["dag_id"]
    return names.qualify(payload.get("namespace") or names.namespace_of(dag_id), names.name_of(dag_id))


def dag_object(cache: ObjectCache, dag_key: str) -> dict[str, Any] | None:
    """The DAG object of the DAG `dag_key`: the one of its name in its namespace."""
    return cache.get("dags", *names.split(dag_key))


def dagrun_object(cache: ObjectCache, dag_key: str, run_id: str) -> dict[str, Any] | None:
    """The DagRun object showing a run of the DAG `dag_key`, in the DAG's namespace."""
    namespace = names.namespace_of(dag_key)
    mirror = cache.get("dagruns", namespace, dagruns.mirror_name(dag_key, run_id))
    if mirror is not None:
        return mirror
    for body in cache.objects("dagruns"):
        if _meta(body).get("namespace") == namespace and dagruns.run_of_object(body) == (dag_key, run_id):
            return body
    return None


def event_manifest(involved: Mapping[str, Any], callback: Callback, *, suffix: str, reporter: str) -> dict[str, Any]:
    body = callback.payload
    meta = _meta(involved)
    at = k8s_time(parse_instant(body["occurred_at"]))
    warning = body["event"] in ("failure", "deadline_miss")
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"dagline-{callback.delivery_id}{suffix}", "namespace": meta["namespace"],
                     "labels": {"dagline.io/dag": names.name_of(body["dag_id"]),
                                "dagline.io/callback-event": body["event"]}},
        "involvedObject": {"apiVersion": involved.get("apiVersion"), "kind": involved.get("kind"),
                           "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
        "type": "Warning" if warning else "Normal",
        "reason": _REASONS.get((body["kind"], body["event"]), "Callback"),
        "message": summary(body)[:1024],
        "source": {"component": "dagline"}, "reportingComponent": "dagline.io/operator",
        "reportingInstance": reporter[:128], "firstTimestamp": at, "lastTimestamp": at, "count": 1,
    }


def kubernetes_event_channel(cache: ObjectCache, api_client, *, reporter: str):
    core = client.CoreV1Api(api_client)

    def create(manifest: dict[str, Any]) -> None:
        try:
            core.create_namespaced_event(manifest["metadata"]["namespace"], manifest,
                                         _request_timeout=DEFAULT_TIMEOUT)
        except ApiException as exc:
            if exc.status == 409:
                return  # delivered before (a redelivery): the Event is there once
            raise DeliveryFailed(f"Event not created: {exc.status} {exc.reason}") from None

    def deliver(callback: Callback) -> None:
        body = callback.payload
        key = dag_key_of(body)
        dag = dag_object(cache, key)
        if dag is None:
            namespace, name = names.split(key)
            raise DeliveryFailed(f"no DAG object {name!r} in namespace {namespace!r} is known to this replica")
        create(event_manifest(dag, callback, suffix="", reporter=reporter))
        run = dagrun_object(cache, key, body["run_id"])
        if run is not None:
            create(event_manifest(run, callback, suffix="-run", reporter=reporter))

    return deliver


def secret_reader(api_client):
    """`read_secret(dag_key, name, key)` for `SecretReader` and the spark-k8s executor: the Secret in the
    namespace of the DAG's key (`a-team/etl`: `a-team`), whatever the database says of DAGs of that name."""
    core = client.CoreV1Api(api_client)

    def read(dag_key: str, name: str, key: str) -> str:
        namespace = names.namespace_of(dag_key)
        try:
            secret = core.read_namespaced_secret(name, namespace, _request_timeout=DEFAULT_TIMEOUT)
        except ApiException as exc:
            raise DeliveryFailed(f"Secret {namespace}/{name}: {exc.status} {exc.reason}") from None
        data = secret.data or {}
        if key not in data:
            raise DeliveryFailed(f"Secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data[key]).decode()

    return read
