"""How a callback reaches someone: the webhook and log channels (the operator adds Kubernetes Events).

A channel is a function `deliver(callback)` that returns when the callback was delivered and raises
`DeliveryFailed` (or any error) when it was not; the deliverer (`deliveries`) calls it in a worker
thread, outside any transaction, and retries it with backoff. Secret values (a webhook's `urlFrom`,
its header values) are read at delivery time by a `SecretReader`: secret variables of this process
(`SECRET_*`, never `DAGLINE_*`: `dagline.executors.secret_sources`), and, in the operator, Kubernetes
Secrets of the DAG's namespace.

The webhook: `POST <url>` with the JSON body (`dagline.domain.callbacks.payload`) and the headers
`Content-Type: application/json`, `User-Agent: dagline`, `X-Dagline-Delivery: <delivery id>`,
`X-Dagline-Event: <event>`, `X-Dagline-Attempt: <n>`, plus the spec's own. Any 2xx answer is a
delivery; anything else (an error status, a redirect, a refused connection, a timeout) is a failed
attempt. The destination must pass the egress policy (`dagline.domain.egress`, judged on the address
connected to: `dagline.scheduler.egress`); a refused one fails for good at once (`DeliveryRefused`),
its reason recorded as the row's `last_error`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from collections.abc import Callable, Mapping
from typing import Any

from dagline.domain import names
from dagline.domain.callbacks import CallbackEvent, summary
from dagline.domain.egress import DEFAULT_EGRESS, EgressPolicy
from dagline.executors.secret_sources import LocalSecrets, SecretNotFound
from dagline.scheduler.egress import DeliveryFailed, DeliveryRefused, post

__all__ = ["Callback", "DeliveryFailed", "DeliveryRefused", "SecretReader", "log_channel", "webhook_channel"]

callback_log = logging.getLogger("dagline.domain.callbacks")


@dataclasses.dataclass(frozen=True)
class Callback:
    """One claimed outbox row: what to send, where, and which attempt this is."""

    outbox_id: int
    delivery_id: str
    channel: str
    event: str
    target: Mapping[str, Any]
    payload: Mapping[str, Any]
    attempt: int


class SecretReader:
    """Reads `valueFrom` references. `{env: NAME}`: a secret variable of this process (a name under the
    secret prefix, from the environment or the secrets file; never `DAGLINE_*`: `LocalSecrets`).
    `{secretKeyRef: {name, key}}`: with `read_secret(dag_id, name, key)` (the operator's, a Kubernetes
    Secret of the DAG object's namespace), or outside Kubernetes the secret variable it maps to."""

    def __init__(self, read_secret: Callable[[str, str, str], str] | None = None,
                 environ: Mapping[str, str] | None = None, *, secrets: LocalSecrets | None = None):
        self.read_secret = read_secret
        self.secrets = secrets if secrets is not None else LocalSecrets.from_env(
            os.environ if environ is None else environ)

    def __call__(self, ref: Mapping[str, Any], what: str, dag_id: str) -> str:
        if "env" in ref:
            try:
                return self.secrets.variable(ref["env"])
            except SecretNotFound as exc:
                raise DeliveryFailed(f"{what}: {exc}") from None
        secret = ref["secretKeyRef"]
        if self.read_secret is None:
            try:
                return self.secrets.secret_key(secret["name"], secret["key"])
            except SecretNotFound as exc:
                raise DeliveryFailed(f"{what}: {exc}") from None
        try:
            return self.read_secret(dag_id, secret["name"], secret["key"])
        except DeliveryFailed as exc:
            raise DeliveryFailed(f"{what}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - reported as a failed attempt, retried
            raise DeliveryFailed(f"{what}: secret {secret['name']}/{secret['key']}: {exc}") from exc


def webhook_channel(secrets: SecretReader, *, timeout_s: float,
                    egress: EgressPolicy = DEFAULT_EGRESS) -> Callable[[Callback], None]:
    """The webhook channel; `egress` says which destinations it may connect to (`dagline.scheduler.egress`)."""

    def deliver(callback: Callback) -> None:
        target = callback.target
        # the DAG's key (Secrets are its namespace's): `dag_id` is the key, or the name with `namespace` beside it
        name, namespace = callback.payload["dag_id"], callback.payload.get("namespace")
        dag_id = names.qualify(namespace, names.name_of(name)) if namespace else name
        url = target.get("url") or secrets(target["urlFrom"], "webhook urlFrom", dag_id)
        headers = {
            "Content-Type": "application/json", "User-Agent": "dagline",
            "X-Dagline-Delivery": callback.delivery_id, "X-Dagline-Event": callback.event,
            "X-Dagline-Attempt": str(callback.attempt),
        }
        for header in target.get("headers", []):
            headers[header["name"]] = secrets(header["valueFrom"], f"webhook header {header['name']}", dag_id)
        body = json.dumps(callback.payload, sort_keys=True).encode()
        post(url, body, headers, policy=egress, timeout_s=timeout_s)

    return deliver


def log_channel(callback: Callback) -> None:
    """One line in the scheduler's log, with the whole body as structured fields (`--log-format json`)."""
    level = logging.INFO if callback.event in (CallbackEvent.SUCCESS, CallbackEvent.RETRY) else logging.WARNING
    callback_log.log(level, "callback %s: %s", callback.delivery_id, summary(callback.payload),
                     extra={"decision": "callback", "fields": dict(callback.payload)})
