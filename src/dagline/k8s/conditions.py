"""What handling an object produces (`Outcome`: a status to write, Events to post), its conditions
(`Ready`, `Invalid`) and times as the objects' statuses write them.

A condition keeps its `lastTransitionTime` while its status stays the same, so writing the same
verdict again (a second replica, a resumed operator) changes nothing in the object.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from dagline.times import UTC

READY = "Ready"
INVALID = "Invalid"


@dataclasses.dataclass
class Outcome:
    """A status patch (camelCase fields; None deletes one) and Events (type, reason, message) to post."""

    status: dict[str, Any] = dataclasses.field(default_factory=dict)
    events: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)

    def warn(self, reason: str, message: str) -> Outcome:
        self.events.append(("Warning", reason, message))
        return self


def as_merge_patch(current: Mapping[str, Any] | None, fields: Mapping[str, Any]) -> dict[str, Any]:
    """Status fields as a merge patch that replaces them: a merge patch merges maps, so keys a map-valued
    field no longer has (a task state no task instance is in any more) are sent as null."""
    current = current or {}
    patch = {}
    for key, value in fields.items():
        old = current.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            value = {**{gone: None for gone in old if gone not in value}, **value}
        patch[key] = value
    return patch


def k8s_time(value: dt.datetime | None) -> str | None:
    """RFC 3339 in UTC with a `Z`, to the second: how the API server writes times."""
    if value is None:
        return None
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(type_: str, status: str, reason: str, message: str, now: dt.datetime,
               previous: Sequence[Mapping[str, Any]] | None) -> dict[str, Any]:
    before = next((c for c in previous or () if c.get("type") == type_), None)
    since = before.get("lastTransitionTime") if before and before.get("status") == status else None
    return {"type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": since or k8s_time(now)}


def condition(type_: str, status: str, reason: str, message: str, *, now: dt.datetime,
              previous: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """One condition of any type (e.g. the Spark preflight's `SparkReady`)."""
    return _condition(type_, status, reason, message, now, previous)


def ready(reason: str, message: str, *, now: dt.datetime, previous=None) -> list[dict[str, Any]]:
    """The object is in the database and served."""
    return [_condition(READY, "True", reason, message, now, previous)]


def invalid(reason: str, message: str, *, now: dt.datetime, previous=None) -> list[dict[str, Any]]:
    """The object was refused: `Ready` False and `Invalid` True, both saying why."""
    return [_condition(READY, "False", reason, message, now, previous),
            _condition(INVALID, "True", reason, message, now, previous)]


def refused(reason: str, message: str, /, *, now: dt.datetime, previous=None, **fields: Any) -> Outcome:
    """The outcome of refusing an object: `fields` and the `invalid` conditions in its status, and a
    Warning Event saying why."""
    return Outcome({**fields, "conditions": invalid(reason, message, now=now, previous=previous)}).warn(reason, message)


def reason_of(status: Mapping[str, Any] | None, type_: str = INVALID) -> str | None:
    """The reason of the condition of that type when it is True (e.g. why an object was refused)."""
    for condition in (status or {}).get("conditions") or ():
        if condition.get("type") == type_ and condition.get("status") == "True":
            return condition.get("reason")
    return None
