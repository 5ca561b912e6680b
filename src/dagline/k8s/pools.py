"""Pool objects: a Pool resource sets the slots of the database pool of its name; status shows their use.

A Pool object's pool belongs to its namespace (`pool.namespace`): only that namespace's DAGs may use
it, so it limits that namespace's tasks only (docs/adr/0050). Refused, visibly (condition and Warning
Event) and with nothing changed:
- `Reserved`: the name `default` (the platform's default pool: chart values or `dagline pools set`);
- `PlatformPool`: a pool the platform owns (made by `dagline pools set`, shared by every namespace);
- `PoolInUse`: a pool name that active DAGs of another namespace name in their tasks;
- `NameTaken`: pool names are global in the database; when several namespaces declare one, the oldest
  object (by `creationTimestamp`, then namespace) defines it; the others wait until it is deleted.
Deleting the defining object hands the pool to the next one, or removes the pool: tasks already queued
or running in it finish, the others wait until a pool of that name exists again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from dagline.db.engine import Database
from dagline.k8s import conditions
from dagline.k8s.conditions import Outcome
from dagline.store.pools import (
    DEFAULT_POOL,
    PoolNotOwned,
    list_pools,
    pool_namespaces,
    pool_users_outside,
    remove_pool,
    set_pool,
)

RESERVED_POOLS = frozenset({DEFAULT_POOL})
RETRIED_REASONS = ("NameTaken", "PlatformPool", "PoolInUse")  # the status sync tries these objects again


def _age_key(body: Mapping[str, Any]) -> tuple[str, str]:
    meta = body.get("metadata") or {}
    return meta.get("creationTimestamp") or "", meta.get("namespace") or ""


def pool_owner(objects: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The object that defines a pool name: the oldest not being deleted."""
    live = [o for o in objects if not (o.get("metadata") or {}).get("deletionTimestamp")]
    return min(live, key=_age_key) if live else None


def stored_pools(db: Database) -> dict[str, dict[str, Any]]:
    """Pool name -> its slots, `used_slots` (taken by queued and running task instances), description."""
    with db.begin() as conn:
        return {p["name"]: p for p in list_pools(conn)}


def apply_pool_object(db: Database, body: Mapping[str, Any], others: Iterable[Mapping[str, Any]], *,
                      now: dt.datetime, who: str) -> Outcome:
    """Set the pool's slots if this object defines its name (`others`: the other Pool objects of that name)."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    name, previous = meta["name"], status.get("conditions")
    namespace = meta.get("namespace") or "default"

    def refused(reason: str, message: str) -> Outcome:
        return conditions.refused(reason, f"metadata.name: {message}", now=now, previous=previous, slots=None,
                                  occupiedSlots=None, observedGeneration=meta.get("generation"))

    if name in RESERVED_POOLS:
        return refused("Reserved", f"pool {name!r} is the platform's, shared by every namespace: its slots are "
                       "set in the chart's values (or `dagline pools set`) by a platform admin, not by a Pool object")
    owner = pool_owner([body, *others])
    if owner is not None and (owner.get("metadata") or {}).get("uid") != meta.get("uid"):
        where = owner["metadata"].get("namespace")
        return refused("NameTaken", f"pool {name!r} is defined by the Pool object in namespace {where!r}; pool "
                       "names are global in the database")
    with db.begin() as conn:
        stored_owner = pool_namespaces(conn, [name])
        users = pool_users_outside(conn, name, namespace)
    if name in stored_owner and stored_owner[name] is None:
        return refused("PlatformPool", f"pool {name!r} is a platform pool, shared by every namespace; a platform "
                       f"admin can hand it to this namespace (`dagline pools set {name} SLOTS --namespace "
                       f"{namespace}`), or choose another name")
    if users:
        return refused("PoolInUse", f"pool {name!r} is named by DAGs of other namespaces ({', '.join(users[:5])}): a "
                       "Pool object limits only its own namespace's tasks; choose another name")
    spec = body.get("spec") or {}
    try:
        set_pool(db, name, int(spec["slots"]), now=now, description=spec.get("description"), who=who,
                 namespace=namespace, owned_by=stored_owner.get(name, namespace))
    except PoolNotOwned as exc:  # another replica or namespace took it meanwhile
        return refused("NameTaken", str(exc))
    pool = stored_pools(db).get(name, {"slots": int(spec["slots"]), "used_slots": 0})
    slots, used = pool["slots"], pool["used_slots"]
    return Outcome({"slots": slots, "occupiedSlots": used, "observedGeneration": meta.get("generation"),
                    "conditions": conditions.ready("Applied", f"{slots} slots", now=now, previous=previous)})


def release_pool_object(db: Database, body: Mapping[str, Any], others: Iterable[Mapping[str, Any]], *,
                        now: dt.datetime, who: str) -> Outcome | None:
    """The object is being deleted: remove its pool (if it is this object's), then let the next object of
    that name take it (the status sync writes that object's status). Returns Events for the deleted object, if any."""
    meta = body.get("metadata") or {}
    others = [o for o in others if (o.get("metadata") or {}).get("uid") != meta.get("uid")]
    as_it_was = {**body, "metadata": {**meta, "deletionTimestamp": None}}
    if pool_owner([as_it_was, *others]) is not as_it_was:
        return None  # another object defines the pool: nothing changes
    if meta["name"] in RESERVED_POOLS:
        return None  # it never set the pool: the platform's pool stays as it is
    namespace = meta.get("namespace") or "default"
    with db.begin() as conn:
        stored_owner = pool_namespaces(conn, [meta["name"]])
    if meta["name"] not in stored_owner or stored_owner[meta["name"]] != namespace:
        return None  # it was refused: the pool is not this object's
    remove_pool(db, meta["name"], now=now, who=who)
    successor = pool_owner(others)
    if successor is not None:  # the next object's namespace may take the name (its own checks apply)
        apply_pool_object(db, successor, [], now=now, who=who)
    return None
