"""The objects kopf watches, kept in memory for the status sync (no extra list calls to the API).

kopf's event handlers (`handlers.py`) put every DAG, DagRun, Backfill and Pool object they see here and
drop deleted ones; the status sync reads snapshots from another thread. The cache may lag the API by a
watch event: every action taken from it is idempotent (a create that finds the object is a 409, a
status patch that changes nothing writes nothing).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any


class ObjectCache:
    def __init__(self):
        self._lock = threading.Lock()
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}

    def put(self, plural: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = (meta.get("namespace") or "", meta.get("name") or "")
        snapshot = {part: body.get(part) for part in ("apiVersion", "kind", "metadata", "spec", "status")}
        with self._lock:
            self._objects.setdefault(plural, {})[key] = snapshot

    def remove(self, plural: str, namespace: str | None, name: str) -> None:
        with self._lock:
            self._objects.get(plural, {}).pop((namespace or "", name), None)

    def objects(self, plural: str) -> list[dict[str, Any]]:
        """A snapshot of the objects of one kind, sorted by namespace and name."""
        with self._lock:
            items = sorted(self._objects.get(plural, {}).items())
        return [body for _, body in items]

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get(plural, {}).get((namespace, name))
