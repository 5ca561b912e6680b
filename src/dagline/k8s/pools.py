"""Pool objects: a Pool resource sets the slots of its namespace's own pool; status shows their use.

A Pool object `spark` in namespace `a-team` sets the pool whose key is `a-team/spark` (namespace
`a-team`, `dagline.domain.names.pool_key`): only a-team's tasks naming `pool: spark` take it, so it
limits a-team's tasks only, and another namespace's Pool object `spark` is another pool. A task takes the
platform's pool of its name when there is one (`dagline.domain.names.resolve_pool`), so a Pool object
cannot make a team's tasks escape a platform pool's limit. Refused, visibly (condition and Warning
Event) and with nothing changed:
- `Reserved`: the name `default` (the platform's default pool: chart values or `dagline pools set`);
- `PlatformPool`: the name of a platform pool (the chart's `pools`, `dagline pools set` without
  `--namespace`): this namespace's tasks naming it take the platform's slots. The status sync tries it
  again, and refuses an applied object whose name became a platform pool's since (its pool stays, for
  the task instances already in it, until the object is deleted).
Deleting the object removes its pool: tasks already queued or running in it finish, the others wait until
a pool of that name exists again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from dagline.db.engine import Database
from dagline.domain import names
from dagline.k8s import conditions
from dagline.k8s.conditions import Outcome
from dagline.store.pools import DEFAULT_POOL, PlatformPool, list_pools, remove_pool, set_pool
from dagline.store.timeline import platform_pool_names

RESERVED_POOLS = frozenset({DEFAULT_POOL})
RETRIED_REASONS = ("PlatformPool",)  # the status sync tries these objects again


def object_pool(body: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of a Pool object."""
    meta = body.get("metadata") or {}
    return meta.get("namespace") or names.DEFAULT_NAMESPACE, meta["name"]


def pool_key(body: Mapping[str, Any]) -> str:
    """The key of the pool a Pool object sets: `namespace/name`."""
    return names.pool_key(*object_pool(body))


def stored_pools(db: Database) -> dict[str, dict[str, Any]]:
    """Pool key -> its `name`, `namespace`, `slots`, `used_slots` (taken by queued and running task
    instances), `description`."""
    with db.begin() as conn:
        return {p["key"]: p for p in list_pools(conn)}


def platform_pools(stored: Mapping[str, Mapping[str, Any]]) -> frozenset[str]:
    """The names of the platform's pools, from `stored_pools`."""
    return frozenset(p["name"] for p in stored.values() if p["namespace"] is None)


def apply_pool_object(db: Database, body: Mapping[str, Any], *, now: dt.datetime, who: str) -> Outcome:
    """Set the slots of the object's namespace's pool of its name."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    namespace, name = object_pool(body)
    previous = status.get("conditions")

    def refused(reason: str, message: str) -> Outcome:
        return conditions.refused(reason, f"metadata.name: {message}", now=now, previous=previous, slots=None,
                                  occupiedSlots=None, observedGeneration=meta.get("generation"))

    if name in RESERVED_POOLS:
        return refused("Reserved", f"pool {name!r} is the platform's, shared by every namespace: its slots are "
                       "set in the chart's values (or `dagline pools set`) by a platform admin, not by a Pool object")
    platform_refusal = (f"pool {name!r} is a platform pool, shared by every namespace: this namespace's tasks "
                        "naming it take the platform's slots, so a Pool object of that name would limit nothing; "
                        "choose another name")
    with db.begin() as conn:
        platform = name in platform_pool_names(conn)
    if platform:
        return refused("PlatformPool", platform_refusal)
    spec = body.get("spec") or {}
    try:
        set_pool(db, name, int(spec["slots"]), now=now, description=spec.get("description"), who=who,
                 namespace=namespace)
    except PlatformPool:  # a platform pool of that name was made meanwhile
        return refused("PlatformPool", platform_refusal)
    pool = stored_pools(db).get(names.pool_key(namespace, name), {"slots": int(spec["slots"]), "used_slots": 0})
    slots, used = pool["slots"], pool["used_slots"]
    return Outcome({"slots": slots, "occupiedSlots": used, "observedGeneration": meta.get("generation"),
                    "conditions": conditions.ready("Applied", f"{slots} slots", now=now, previous=previous)})


def release_pool_object(db: Database, body: Mapping[str, Any], *, now: dt.datetime, who: str) -> bool:
    """The object was deleted: remove its namespace's pool of its name; returns whether there was one.
    Nothing of another namespace, nor of the platform, changes."""
    namespace, name = object_pool(body)
    if name in RESERVED_POOLS:
        return False  # it never set a pool: the platform's pool stays as it is
    return remove_pool(db, name, namespace=namespace, now=now, who=who)
