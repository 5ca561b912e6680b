"""The objects kopf watches, kept in memory for the status sync (no extra list calls to the API).

kopf's event handlers (`handlers.py`) put every DAG, DagRun, Backfill and Pool object they see here and
drop deleted ones; the status sync reads snapshots from another thread. The cache may lag the API by a
watch event: every action taken from it is idempotent (a create that finds the object is a 409, a
status patch that changes nothing writes nothing).

It also remembers when the watch last brought news of each object (`seen_at`, monotonic seconds, kept
after a removal), which the listing (`k8s.listing`) compares with what the API lists to tell a watch
that has gone quiet.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any


class ObjectCache:
    def __init__(self):
        self._lock = threading.Lock()
        self._objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        self._seen: dict[tuple[str, str, str], float] = {}  # (plural, namespace, name) -> monotonic time

    def put(self, plural: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = (meta.get("namespace") or "", meta.get("name") or "")
        snapshot = {part: body.get(part) for part in ("apiVersion", "kind", "metadata", "spec", "status")}
        with self._lock:
            self._objects.setdefault(plural, {})[key] = snapshot
            self._seen[(plural, *key)] = time.monotonic()

    def remove(self, plural: str, namespace: str | None, name: str) -> None:
        with self._lock:
            self._objects.get(plural, {}).pop((namespace or "", name), None)
            self._seen[(plural, namespace or "", name)] = time.monotonic()

    def remove_unless_seen_since(self, plural: str, namespace: str, name: str, since: float) -> dict[str, Any] | None:
        """Drop an object the watch has brought no news of since `since` (a listing then found it gone);
        returns it, or None if it was not there or was seen since."""
        with self._lock:
            if self._seen.get((plural, namespace, name), 0.0) >= since:
                return None
            return self._objects.get(plural, {}).pop((namespace, name), None)

    def prune_seen(self, before: float) -> None:
        """Forget when deleted objects were last seen, for those gone before `before`."""
        with self._lock:
            self._seen = {key: at for key, at in self._seen.items()
                          if at >= before or (key[1], key[2]) in self._objects.get(key[0], {})}

    def seen_at(self, plural: str, namespace: str, name: str) -> float | None:
        """When the watch last brought this object (or its deletion); None if never."""
        with self._lock:
            return self._seen.get((plural, namespace, name))

    def objects(self, plural: str) -> list[dict[str, Any]]:
        """A snapshot of the objects of one kind, sorted by namespace and name."""
        with self._lock:
            items = sorted(self._objects.get(plural, {}).items())
        return [body for _, body in items]

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get(plural, {}).get((namespace, name))
