"""Sending signals from a job: `from dagline.sdk.client import send_signal`.

Standard library only (urllib), so a PySpark job needs nothing besides this file's package. Inside a
task try, dagline's executors set `DAGLINE_API_URL` and `DAGLINE_SIGNAL_TOKEN` (a token valid for
that try only, which names the try as the signal's source), so a job just calls

    send_signal("model.published", {"path": "/models/42"})

Every call has an id (a fresh UUID unless you pass one): a connection error, a timeout or a 502,
503 or 504 is retried with the same id until `timeout` seconds have passed, and the API stores a
signal once per key and id, so a retry never sends it twice. Pass your own `id` (e.g. the model
version) to make a re-run of the job idempotent too.

Errors: `SignalRejected` (the API refused it: `.status`, `.field`, `.message`; 401/403 are
`SignalUnauthorized`, 409 `SignalConflict`), `SignalUnreachable` (no answer within `timeout`),
`SignalConfigError` (no URL or token).
"""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

__all__ = ["send_signal", "send_signals", "SignalError", "SignalRejected", "SignalUnauthorized", "SignalConflict",
           "SignalUnreachable", "SignalConfigError"]

RETRY_STATUSES = (502, 503, 504)


class SignalError(Exception):
    """Base class of the errors of this module."""


class SignalConfigError(SignalError):
    """No API URL or no token: pass them, or run inside a dagline try (which sets both)."""


class SignalRejected(SignalError):
    """The API answered with an error: `status`, `field` (the field at fault, if any) and `message`."""

    def __init__(self, status: int, message: str, field: str | None = None):
        self.status = status
        self.message = message
        self.field = field
        super().__init__(f"HTTP {status}: {message}" + (f" (field {field})" if field else ""))


class SignalUnauthorized(SignalRejected):
    """401 (no, wrong or expired token) or 403 (the token may not send signals)."""


class SignalConflict(SignalRejected):
    """409: this key and id were sent before with another value."""


class SignalUnreachable(SignalError):
    """The API did not answer (connection refused, timeouts, 5xx) within the time allowed."""


def send_signal(key: str, value: Any = None, *, id: str | None = None, url: str | None = None,  # noqa: A002
                token: str | None = None, timeout: float = 30.0) -> dict:
    """Send one signal; returns the API's answer (`seq`, `key`, `id`, `created`, maybe `warning`).
    Retries with the same id for up to `timeout` seconds."""
    body = {"key": key, "value": value, "id": id or str(uuid.uuid4())}
    return _post(body, url=url, token=token, timeout=timeout)


def send_signals(signals: list[dict], *, url: str | None = None, token: str | None = None,
                 timeout: float = 30.0) -> list[dict]:
    """Send several signals in one request (all stored or none); each dict has `key`, optional
    `value` and `id` (one is made up for those without). Returns one answer per signal."""
    body = [{"key": s["key"], "value": s.get("value"), "id": s.get("id") or str(uuid.uuid4())} for s in signals]
    return _post(body, url=url, token=token, timeout=timeout)["signals"]


def _post(body, *, url: str | None, token: str | None, timeout: float):
    base = url or os.environ.get("DAGLINE_API_URL")
    secret = token or os.environ.get("DAGLINE_SIGNAL_TOKEN")
    if not base:
        raise SignalConfigError("no API URL: pass url= or set DAGLINE_API_URL (dagline sets it in every try)")
    if not secret:
        raise SignalConfigError("no token: pass token= or set DAGLINE_SIGNAL_TOKEN (dagline sets it in every try)")
    try:
        data = json.dumps(body, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise SignalRejected(0, f"the value is not JSON: {exc}", field="value") from None
    endpoint = base.rstrip("/") + "/api/v1/signals"
    deadline = time.monotonic() + timeout
    pause = 0.1
    while True:
        left = deadline - time.monotonic()
        request = urllib.request.Request(endpoint, data=data, method="POST", headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {secret}", "User-Agent": "dagline-client"})
        try:
            with urllib.request.urlopen(request, timeout=max(0.5, min(10.0, left))) as answer:
                return json.loads(answer.read().decode("utf-8"))
        except urllib.error.HTTPError as exc:
            with exc:  # the error is the response: close it
                if exc.code not in RETRY_STATUSES:
                    raise _rejected(exc) from None
                problem = f"HTTP {exc.code}"
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            problem = str(getattr(exc, "reason", exc))
        if time.monotonic() + pause > deadline:
            raise SignalUnreachable(f"no answer from {endpoint} within {timeout:g} s: {problem}")
        time.sleep(pause)  # then the same request again: the same id, so at most one signal
        pause = min(pause * 2, 2.0)


def _rejected(exc: urllib.error.HTTPError) -> SignalRejected:
    try:
        answer = json.loads(exc.read().decode("utf-8"))
        message, field = answer.get("error") or str(answer), answer.get("field")
    except (ValueError, AttributeError, OSError):
        message, field = exc.reason or "no reason given", None
    kind = {401: SignalUnauthorized, 403: SignalUnauthorized, 409: SignalConflict}.get(exc.code, SignalRejected)
    return kind(exc.code, str(message), field)
