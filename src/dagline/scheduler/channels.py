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
delivery; anything else (an error status, a refused connection, a timeout) is a failed attempt.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from dagline.domain.callbacks import CallbackEvent, summary
from dagline.errors import DaglineError
from dagline.executors.secret_sources import LocalSecrets, SecretNotFound

callback_log = logging.getLogger("dagline.domain.callbacks")


class DeliveryFailed(DaglineError):
    """An attempt that did not get through; the message says why (it is stored as `last_error`). What
    dagline called refused or could not be reached: 502."""

    http_status = 502


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


def webhook_channel(secrets: SecretReader, *, timeout_s: float) -> Callable[[Callback], None]:
    def deliver(callback: Callback) -> None:
        target = callback.target
        dag_id = callback.payload["dag_id"]
        url = target.get("url") or secrets(target["urlFrom"], "webhook urlFrom", dag_id)
        headers = {
            "Content-Type": "application/json", "User-Agent": "dagline",
            "X-Dagline-Delivery": callback.delivery_id, "X-Dagline-Event": callback.event,
            "X-Dagline-Attempt": str(callback.attempt),
        }
        for header in target.get("headers", []):
            headers[header["name"]] = secrets(header["valueFrom"], f"webhook header {header['name']}", dag_id)
        body = json.dumps(callback.payload, sort_keys=True).encode()
        request = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # noqa: S310 - http(s) checked in spec
                answer.read()
        except urllib.error.HTTPError as exc:
            raise DeliveryFailed(f"webhook answered {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise DeliveryFailed(f"webhook not reached: {reason}") from None

    return deliver


def log_channel(callback: Callback) -> None:
    """One line in the scheduler's log, with the whole body as structured fields (`--log-format json`)."""
    level = logging.INFO if callback.event in (CallbackEvent.SUCCESS, CallbackEvent.RETRY) else logging.WARNING
    callback_log.log(level, "callback %s: %s", callback.delivery_id, summary(callback.payload),
                     extra={"decision": "callback", "fields": dict(callback.payload)})
