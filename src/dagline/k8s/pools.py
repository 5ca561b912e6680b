"""Pool objects: a Pool resource sets the slots of the database pool of its name; status shows their use.

Pool names are global in the database. When several namespaces declare a pool of one name, the oldest
object (by `creationTimestamp`, then namespace) defines it; the others are refused (`NameTaken`, naming
the owner's namespace) until it is deleted. Deleting the defining object hands the pool to the next one,
or removes the pool: tasks already queued or running in it finish, the others wait until a pool of
that name exists again. The `default` pool is never removed: deleting its object leaves its slots as
they are (a Warning Event says so).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from dagline.db.engine import Database
from dagline.k8s import conditions
from dagline.k8s.conditions import Outcome
from dagline.store.pools import DEFAULT_POOL, list_pools, remove_pool, set_pool


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
    owner = pool_owner([body, *others])
    if owner is not None and (owner.get("metadata") or {}).get("uid") != meta.get("uid"):
        where = owner["metadata"].get("namespace")
        message = (f"metadata.name: pool {name!r} is defined by the Pool object in namespace {where!r}; pool "
                   "names are global in the database")
        return conditions.refused("NameTaken", message, now=now, previous=previous, slots=None, occupiedSlots=None,
                                  observedGeneration=meta.get("generation"))
    spec = body.get("spec") or {}
    set_pool(db, name, int(spec["slots"]), now=now, description=spec.get("description"), who=who)
    pool = stored_pools(db).get(name, {"slots": int(spec["slots"]), "used_slots": 0})
    slots, used = pool["slots"], pool["used_slots"]
    return Outcome({"slots": slots, "occupiedSlots": used, "observedGeneration": meta.get("generation"),
                    "conditions": conditions.ready("Applied", f"{slots} slots", now=now, previous=previous)})


def release_pool_object(db: Database, body: Mapping[str, Any], others: Iterable[Mapping[str, Any]], *,
                        now: dt.datetime, who: str) -> Outcome | None:
    """The object is being deleted: hand its pool to the next object of that name (the status sync
    then writes that object's status), or remove it. Returns Events for the deleted object, if any."""
    meta = body.get("metadata") or {}
    others = [o for o in others if (o.get("metadata") or {}).get("uid") != meta.get("uid")]
    as_it_was = {**body, "metadata": {**meta, "deletionTimestamp": None}}
    if pool_owner([as_it_was, *others]) is not as_it_was:
        return None  # another object defines the pool: nothing changes
    successor = pool_owner(others)
    if successor is not None:
        apply_pool_object(db, successor, [], now=now, who=who)
        return None
    if meta["name"] == DEFAULT_POOL:
        return Outcome().warn("DefaultPoolKept", "the default pool cannot be removed: its slots stay as they are")
    remove_pool(db, meta["name"], now=now, who=who)
    return None
