"""The operator's callback channels: Kubernetes Events from the outbox, and Secrets for webhooks.

`kubernetesEvent` callbacks are delivered only by operator replicas (a plain `dagline scheduler` does
not claim them): each becomes a core/v1 Event on the DAG object and one on the run's DagRun object
(dagline's mirror, or the user's own DagRun that triggered the run), when the cache knows them. The
Event's name is derived from the delivery id, so a redelivery (a replica died before recording the
outcome) finds it already there (409) and counts as delivered: one Event per callback.
Type `Warning` for failure and deadline_miss, `Normal` for success and retry; reason `DagRunSucceeded`,
`DagRunFailed`, `TaskRetrying`, `DeadlineMissed`, ...; the message is the callback's one-line summary.

`read_secret(dag_id, name, key)` reads a webhook's `secretKeyRef` from the namespace of the DAG's
object (as a Pod reads Secrets of its own namespace); the chart grants `get` on the Secrets it lists
(`callbacks.secretNames`) and nothing else.

Both find the DAG's namespace in the database (`dag.namespace`, the namespace of the object that
defines the DAG), never by the name alone: a same-named DAG object of another namespace (refused,
or not yet handled) gets neither the owner's Secrets nor its Events. A DAG applied from a file has no
namespace: its Secrets cannot be read and its Events have no object (docs/adr/0050).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dagline.db.engine import Database
from dagline.domain.callbacks import CallbackEvent, summary
from dagline.k8s import dagruns
from dagline.k8s.cache import ObjectCache
from dagline.k8s.client import DEFAULT_TIMEOUT
from dagline.k8s.conditions import k8s_time
from dagline.scheduler.channels import Callback, DeliveryFailed
from dagline.store.dags import dag_namespaces
from dagline.times import parse_instant

_REASONS = {
    ("run", CallbackEvent.SUCCESS): "DagRunSucceeded", ("run", CallbackEvent.FAILURE): "DagRunFailed",
    ("run", CallbackEvent.DEADLINE_MISS): "DeadlineMissed", ("task", CallbackEvent.SUCCESS): "TaskSucceeded",
    ("task", CallbackEvent.FAILURE): "TaskFailed", ("task", CallbackEvent.RETRY): "TaskRetrying",
    ("task", CallbackEvent.DEADLINE_MISS): "DeadlineMissed",
}


def _meta(body: Mapping[str, Any]) -> Mapping[str, Any]:
    return body.get("metadata") or {}


def owner_namespace(db: Database, dag_id: str) -> str | None:
    """The namespace owning the stored DAG (None: unknown, or a file's DAG)."""
    with db.begin() as conn:
        return dag_namespaces(conn, [dag_id]).get(dag_id)


def dag_object(db: Database, cache: ObjectCache, dag_id: str) -> dict[str, Any] | None:
    """The DAG object that defines `dag_id`: the one of that name in the namespace owning the DAG."""
    namespace = owner_namespace(db, dag_id)
    return None if namespace is None else cache.get("dags", namespace, dag_id)


def dagrun_object(cache: ObjectCache, namespace: str, dag_id: str, run_id: str) -> dict[str, Any] | None:
    mirror = cache.get("dagruns", namespace, dagruns.mirror_name(dag_id, run_id))
    if mirror is not None:
        return mirror
    for body in cache.objects("dagruns"):
        if _meta(body).get("namespace") == namespace and dagruns.run_of_object(body) == (dag_id, run_id):
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
                     "labels": {"dagline.io/dag": body["dag_id"], "dagline.io/callback-event": body["event"]}},
        "involvedObject": {"apiVersion": involved.get("apiVersion"), "kind": involved.get("kind"),
                           "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
        "type": "Warning" if warning else "Normal",
        "reason": _REASONS.get((body["kind"], body["event"]), "Callback"),
        "message": summary(body)[:1024],
        "source": {"component": "dagline"}, "reportingComponent": "dagline.io/operator",
        "reportingInstance": reporter[:128], "firstTimestamp": at, "lastTimestamp": at, "count": 1,
    }


def kubernetes_event_channel(db: Database, cache: ObjectCache, api_client, *, reporter: str):
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
        dag = dag_object(db, cache, body["dag_id"])
        if dag is None:
            raise DeliveryFailed(f"no DAG object defining {body['dag_id']!r} in its namespace is known to this replica")
        create(event_manifest(dag, callback, suffix="", reporter=reporter))
        run = dagrun_object(cache, _meta(dag)["namespace"], body["dag_id"], body["run_id"])
        if run is not None:
            create(event_manifest(run, callback, suffix="-run", reporter=reporter))

    return deliver


def secret_reader(db: Database, api_client):
    """`read_secret(dag_id, name, key)` for `SecretReader`: the Secret in the namespace owning the DAG."""
    core = client.CoreV1Api(api_client)

    def read(dag_id: str, name: str, key: str) -> str:
        namespace = owner_namespace(db, dag_id)
        if namespace is None:
            raise DeliveryFailed(f"DAG {dag_id!r} belongs to no namespace (applied from a file, or gone): "
                                 "no Secret is read for it")
        try:
            secret = core.read_namespaced_secret(name, namespace, _request_timeout=DEFAULT_TIMEOUT)
        except ApiException as exc:
            raise DeliveryFailed(f"Secret {namespace}/{name}: {exc.status} {exc.reason}") from None
        data = secret.data or {}
        if key not in data:
            raise DeliveryFailed(f"Secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data[key]).decode()

    return read
