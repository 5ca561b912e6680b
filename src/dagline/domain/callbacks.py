"""Callbacks: what the spec asks to be told (success, failure, retry, deadline miss), and how.

Pure domain: the `callbacks` models of the spec, which callbacks an event of a run or a task instance
fires, the JSON body every channel receives, and the redelivery backoff. Storing and delivering live
elsewhere: `dagline.db.outbox` writes one outbox row per (event, callback) in the transaction of the
state change, `dagline.scheduler.deliveries` delivers them.

A callback is one channel and the events it listens to:

    callbacks:
      - events: [failure, deadline_miss]
        webhook:
          urlFrom: {env: SECRET_SALES_HOOK_URL}    # or {secretKeyRef: {name: hooks, key: url}}, or url: https://...
          headers:
            - {name: Authorization, valueFrom: {secretKeyRef: {name: hooks, key: token}}}
      - events: [success, failure, retry, deadline_miss]
        log: {}
      - events: [failure]
        kubernetesEvent: {}                        # delivered by the operator

On the DAG (`spec.callbacks`) they fire for the run's events; on a task (or in `spec.defaults`, for every
task without its own) for the task instance's. Secrets never sit in the spec: a literal `url` may not
carry credentials (`user:password@`), and header values come only from a secret variable (a name
under the secret prefix, never `DAGLINE_*`: `dagline.domain.secrets`) or a Kubernetes Secret of the
DAG's namespace, read when the callback is delivered.
"""

from __future__ import annotations

import datetime as dt
import urllib.parse
from collections.abc import Iterator, Mapping, Sequence
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from dagline.domain.secrets import check_readable
from dagline.domain.states import RunState, TIState
from dagline.times import isoformat


class CallbackEvent(str, Enum):
    SUCCESS = "success"
    FAILURE = "failure"
    RETRY = "retry"
    DEADLINE_MISS = "deadline_miss"


class Channel:
    """How a callback is delivered (the outbox's `channel` column)."""

    WEBHOOK = "webhook"
    LOG = "log"
    KUBERNETES_EVENT = "kubernetes_event"

    ALL = (WEBHOOK, LOG, KUBERNETES_EVENT)


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class SecretKeyRef(_Model):
    """A key of a Kubernetes Secret of the DAG object's namespace; outside Kubernetes, the secret variable
    `<prefix><NAME>__<KEY>` (`dagline.domain.secrets.secret_variable`)."""

    name: str = Field(min_length=1)
    key: str = Field(min_length=1)


def _exactly_one_of(model, first: str, second: str, names: str):
    """A model validator's check that exactly one of two optional fields is given."""
    if (getattr(model, first) is None) == (getattr(model, second) is None):
        raise ValueError(f"give exactly one of {names}")
    return model


class ValueFrom(_Model):
    """Where a secret value comes from: exactly one of a secret variable of the scheduler (a name under
    the secret prefix, `SECRET_` by default; never `DAGLINE_*`), or a Kubernetes Secret's key."""

    env: str | None = Field(None, min_length=1, description="a secret variable of the scheduler: its name must "
                            "start with the secret prefix (SECRET_ unless DAGLINE_SECRET_PREFIX says otherwise); "
                            "DAGLINE_* is refused")
    secret_key_ref: SecretKeyRef | None = None

    @field_validator("env")
    @classmethod
    def _readable(cls, value: str | None) -> str | None:
        return None if value is None else check_readable(value)

    @model_validator(mode="after")
    def _exactly_one(self) -> ValueFrom:
        return _exactly_one_of(self, "env", "secret_key_ref", "env or secretKeyRef")


class WebhookHeader(_Model):
    name: str = Field(min_length=1)
    value_from: ValueFrom


class WebhookSpec(_Model):
    """An HTTP POST of the JSON body to `url` (literal, without credentials) or `urlFrom`."""

    url: str | None = Field(None, description="http(s) URL without user:password; use urlFrom for a secret URL")
    url_from: ValueFrom | None = None
    headers: list[WebhookHeader] = Field(default_factory=list, description="values from env or a Secret only")

    @field_validator("url")
    @classmethod
    def _plain_url(cls, value: str | None) -> str | None:
        if value is not None:
            check_webhook_url(value)
        return value

    @model_validator(mode="after")
    def _one_url(self) -> WebhookSpec:
        return _exactly_one_of(self, "url", "url_from", "url or urlFrom")


class LogSpec(_Model):
    """A line in the scheduler's log (logger `dagline.domain.callbacks`)."""


class KubernetesEventSpec(_Model):
    """A Kubernetes Event on the DAG resource and on the run's DagRun resource (operator only)."""


class CallbackSpec(_Model):
    """One callback: the events it fires on and exactly one channel."""

    events: list[CallbackEvent] = Field(min_length=1)
    webhook: WebhookSpec | None = None
    log: LogSpec | None = None
    kubernetes_event: KubernetesEventSpec | None = None

    @model_validator(mode="after")
    def _one_channel(self) -> CallbackSpec:
        given = [name for name in ("webhook", "log", "kubernetes_event") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one channel: webhook, log or kubernetesEvent")
        return self

    @property
    def channel(self) -> str:
        if self.webhook is not None:
            return Channel.WEBHOOK
        if self.log is not None:
            return Channel.LOG
        return Channel.KUBERNETES_EVENT

    def target(self) -> dict[str, Any]:
        """What the deliverer needs besides the body (the webhook's url or references; no secret)."""
        if self.webhook is None:
            return {}
        return self.webhook.model_dump(mode="json", by_alias=True, exclude_none=True)


def env_references(callbacks: Sequence[CallbackSpec], where: str) -> Iterator[tuple[str, str]]:
    """(field path, variable name) of every `{env: NAME}` these callbacks read, `where` being their path."""
    for index, callback in enumerate(callbacks or ()):
        hook = callback.webhook
        if hook is None:
            continue
        if hook.url_from is not None and hook.url_from.env is not None:
            yield f"{where}[{index}].webhook.urlFrom.env", hook.url_from.env
        for number, header in enumerate(hook.headers):
            if header.value_from.env is not None:
                yield f"{where}[{index}].webhook.headers[{number}].valueFrom.env", header.value_from.env


def check_webhook_url(value: str) -> None:
    """An http(s) URL with a host and no credentials in it (those belong in urlFrom)."""
    parts = urllib.parse.urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http(s) URL")
    if parts.username is not None or parts.password is not None:
        raise ValueError("a URL with credentials (user:password@) must not be written in the spec; "
                         "use urlFrom: {env: NAME} or {secretKeyRef: {name, key}}")


RUN_EVENTS = frozenset({CallbackEvent.SUCCESS, CallbackEvent.FAILURE, CallbackEvent.DEADLINE_MISS})

# The state a run or task instance enters -> the callback event it is (other states fire nothing).
_TASK_EVENTS = {TIState.SUCCESS: CallbackEvent.SUCCESS, TIState.FAILED: CallbackEvent.FAILURE,
                TIState.UP_FOR_RETRY: CallbackEvent.RETRY}
_RUN_EVENTS = {RunState.SUCCESS: CallbackEvent.SUCCESS, RunState.FAILED: CallbackEvent.FAILURE}


def event_of_state(kind: str, state: str) -> CallbackEvent | None:
    """The callback event of a run (`kind` "run") or task instance ("task") entering `state`."""
    return (_RUN_EVENTS if kind == "run" else _TASK_EVENTS).get(state)


def listening(callbacks: list[CallbackSpec], event: CallbackEvent) -> list[CallbackSpec]:
    return [c for c in callbacks if event in c.events]


def payload(
    *, delivery_id: str, event: CallbackEvent, kind: str, dag_id: str, run_id: str, run_type: str,
    state: str, occurred_at: dt.datetime, logical_date: dt.datetime, data_interval_start: dt.datetime,
    data_interval_end: dt.datetime, task_id: str | None = None, try_number: int | None = None,
    deadline: dt.datetime | None = None, message: str | None = None, namespace: str = "default",
) -> dict[str, Any]:
    """The JSON body every channel gets (docs/how-to/operations.md); the same on every redelivery. `dag_id`
    is the DAG's name in `namespace`."""
    return {
        "delivery_id": delivery_id,
        "event": event.value,
        "kind": kind,
        "dag_id": dag_id,
        "namespace": namespace,
        "run_id": run_id,
        "run_type": run_type,
        "task_id": task_id,
        "try_number": try_number,
        "state": state,
        "occurred_at": isoformat(occurred_at),
        "logical_date": isoformat(logical_date),
        "data_interval_start": isoformat(data_interval_start),
        "data_interval_end": isoformat(data_interval_end),
        "deadline": isoformat(deadline),
        "message": message,
    }


def summary(body: Mapping[str, Any]) -> str:
    """One human line for a callback body (the log channel, Kubernetes Events)."""
    what = f"task {body['task_id']} (try {body['try_number']})" if body.get("task_id") else "run"
    event = str(body["event"]).replace("_", " ")
    text = f"{body['dag_id']} {body['run_id']}: {what} {event}"
    if body.get("event") == CallbackEvent.DEADLINE_MISS.value:
        text += f" (deadline {body['deadline']}, state {body['state']})"
    if body.get("message"):
        text += f": {body['message']}"
    return text


def redelivery_delay(attempts: int, *, base_s: float, cap_s: float) -> dt.timedelta:
    """Wait before the next try after `attempts` failed ones: base, 2x, 4x, ... capped."""
    return dt.timedelta(seconds=min(cap_s, base_s * 2 ** max(0, attempts - 1)))
