"""The listing: what a replica's watches should have brought it, checked against what the API lists.

kopf learns of objects through watch streams only. Behind some load balancers a stream goes quiet
without closing, and the objects created meanwhile would be ignored until the pod restarts. kopf
opens a new stream after `DAGLINE_WATCH_INACTIVITY_TIMEOUT` seconds without an event (and at the end
of each `DAGLINE_WATCH_TIMEOUT` request); the new stream replays what was missed. The listing checks
that this works (docs/adr/0082). At a replica's start and every `DAGLINE_LIST_INTERVAL` seconds, it
lists the DAG, DagRun, Backfill and Pool objects the replica serves and:

1. **watch check**: an object the API lists in a version the watch has not brought (and about which
   it brought nothing since the listing began) is *owed*. An object owed longer than
   `OperatorSettings.watch_bound_s` makes `/healthz` fail, naming the kind and the object: the watch
   cannot be renewed, and a restarted pod lists afresh.
2. **missed deletions**: an object the cache holds but the API no longer lists (and the watch said
   nothing of since) is dropped from the cache and undone in the database (`k8s.deletions`).
3. **sweep**: an active DAG whose defining object is gone (deleted while no replica ran: objects carry
   no finalizer, docs/adr/0083) is deactivated, and a namespace's pool whose Pool object is gone is
   removed, each after a GET confirms the object is gone. Only a pool a Pool
   object set last is swept: one an admin handed to a namespace (`dagline pools set --namespace`) waits
   for its object. A Backfill deleted while no replica ran is not swept: the database keeps no name to
   look it up by, so it runs to its end.

A listing that fails (an outage of the API or the database) is logged and tried again at the next
interval. A deletion whose undoing failed (here or from its DELETED event) stays in the cache, so the
next listing finds it gone again.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from dagline.clock import Clock
from dagline.db.engine import Database
from dagline.domain import names
from dagline.k8s import dags, pools
from dagline.k8s.cache import ObjectCache
from dagline.k8s.deletions import object_gone
from dagline.k8s.objects import DaglineObjects
from dagline.store.dags import active_object_dags
from dagline.store.pools import object_pools

log = logging.getLogger(__name__)

KINDS = ("dags", "dagruns", "backfills", "pools")


def _key(body: Mapping[str, Any]) -> tuple[str, str]:
    meta = body.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


@dataclasses.dataclass
class ListingStats:
    """Counters since start (exported as metrics)."""

    listings: int = 0
    failed_listings: int = 0
    missed_deletions: int = 0
    dags_swept: int = 0
    pools_swept: int = 0


class Listing:
    def __init__(self, db: Database, cache: ObjectCache, objects: DaglineObjects, *, namespace: str | None,
                 clock: Clock, who: str, bound_s: float):
        self.db = db
        self.cache = cache
        self.objects = objects
        self.namespace = namespace
        self.clock = clock
        self.who = who
        self.bound_s = bound_s
        self.stats = ListingStats()
        self._lock = threading.Lock()
        self._owed: dict[tuple[str, str, str], float] = {}  # (plural, namespace, name) -> owed since (monotonic)

    def run(self) -> None:
        """One listing of every kind, then the watch check, missed deletions and the sweep. API errors raise."""
        began = time.monotonic()
        listed = {plural: self.objects.list(plural, self.namespace) for plural in KINDS}
        self._check_watch(listed, began)
        for plural, items in listed.items():
            self._missed_deletions(plural, items, began)
        self._sweep_dags(listed["dags"])
        self._sweep_pools(listed["pools"])
        self.cache.prune_seen(began - self.bound_s)
        self.stats.listings += 1

    # -- 1. the watch check -------------------------------------------------------------------------

    def _check_watch(self, listed: Mapping[str, list[dict[str, Any]]], began: float) -> None:
        owed = {}
        with self._lock:
            for plural, items in listed.items():
                for body in items:
                    namespace, name = _key(body)
                    cached = self.cache.get(plural, namespace, name)
                    version = (body.get("metadata") or {}).get("resourceVersion")
                    if cached is not None and (cached.get("metadata") or {}).get("resourceVersion") == version:
                        continue
                    seen = self.cache.seen_at(plural, namespace, name)
                    if seen is not None and seen >= began:
                        continue  # the watch brought news of it after the listing began: it is alive
                    key = (plural, namespace, name)
                    owed[key] = self._owed.get(key, began)
            self._owed = owed

    def owed_count(self) -> int:
        """How many listed objects the watches have not brought yet (a gauge)."""
        with self._lock:
            return len(self._owed)

    def problems(self) -> list[str]:
        """Why the watches are not live: objects owed longer than the bound, per kind (empty: live)."""
        now = time.monotonic()
        late: dict[str, list[tuple[float, str]]] = {}
        with self._lock:
            owed = list(self._owed.items())
        for (plural, namespace, name), since in owed:
            seen = self.cache.seen_at(plural, namespace, name)
            if now - since > self.bound_s and (seen is None or seen < since):
                late.setdefault(plural, []).append((now - since, f"{namespace}/{name}"))
        found = []
        for plural, items in sorted(late.items()):
            items.sort(reverse=True)
            names = ", ".join(name for _age, name in items[:3]) + (f" and {len(items) - 3} more" if len(items) > 3
                                                                   else "")
            found.append(f"the watch of {plural} has not brought {names} for {items[0][0]:.0f} s (limit "
                         f"{self.bound_s:g} s): it cannot be renewed")
        return found

    # -- 2. deletions the watch did not bring ---------------------------------------------------------

    def _missed_deletions(self, plural: str, items: list[dict[str, Any]], began: float) -> None:
        there = {_key(body) for body in items}
        for body in self.cache.objects(plural):
            namespace, name = _key(body)
            if (namespace, name) in there:
                continue
            gone = self.cache.remove_unless_seen_since(plural, namespace, name, began)
            if gone is None:
                continue
            self.stats.missed_deletions += 1
            log.info("%s %s/%s is gone, and the watch did not say so: undone now", plural, namespace, name)
            try:
                object_gone(self.db, self.cache, plural, gone, clock=self.clock, who=self.who)
            except Exception:
                self.cache.put(plural, gone)  # the next listing tries again
                raise

    # -- 3. the sweep ---------------------------------------------------------------------------------

    def _sweep_dags(self, items: list[dict[str, Any]]) -> None:
        there = {dags.object_source(namespace, name) for namespace, name in map(_key, items)}
        with self.db.begin() as conn:  # after the listing: a DAG applied meanwhile is checked by a GET below
            stored = active_object_dags(conn, self.namespace)
        for dag_id, source in sorted(stored.items()):
            if source in there:
                continue
            namespace, _, name = source[len(dags.SOURCE_SCHEME):].partition("/")
            if (not namespace or names.qualify(namespace, name) != dag_id
                    or self.objects.exists("dags", namespace, name)):
                continue
            body = {"metadata": {"namespace": namespace, "name": name}}
            cancelled = dags.delete_dag_object(self.db, body, now=self.clock.now(), who=self.who)
            if cancelled is not None:
                self.stats.dags_swept += 1
                log.info("DAG %s: its object %s/%s is gone (deleted while no replica ran): deactivated, %s queued "
                         "runs cancelled", dag_id, namespace, name, cancelled)

    def _sweep_pools(self, items: list[dict[str, Any]]) -> None:
        there = set(map(_key, items))
        with self.db.begin() as conn:  # after the listing: a Pool applied meanwhile is checked by a GET below
            # written last by an operator (this replica's kind of writer): not a pool an admin handed over
            stored = object_pools(conn, self.namespace, written_by=self.who.partition(":")[0] + ":")
        for key, namespace in sorted(stored.items()):
            name = names.split_pool(key)[1]
            if (namespace, name) in there or self.objects.exists("pools", namespace, name):
                continue
            body = {"metadata": {"namespace": namespace, "name": name}}  # the object as it was
            pools.release_pool_object(self.db, body, now=self.clock.now(), who=self.who)
            self.stats.pools_swept += 1
            log.info("pool %s: its Pool object %s/%s is gone (deleted while no replica ran): removed", key,
                     namespace, name)
