"""Pools: named numbers of slots, the platform's or a namespace's.

- **Platform pools** (`namespace` None, key = the bare name): `default` (128 slots, from the first
  migration, never removed), those `dagline pools set NAME SLOTS` (no `--namespace`) and the chart's
  `pools` values make. Shared by every namespace's tasks.
- **A namespace's pools** (`namespace` NS, key `NS/NAME`, `dagline.domain.names.pool_key`, in every
  namespace, `default` included): made by a Pool object `NAME` in NS or by `dagline pools set NAME SLOTS
  --namespace NS`. Only NS's tasks ever use one, so it limits NS's tasks only.

**Which pool a task takes** (`names.resolve_pool`, applied when its task instance is created, and stored in
`task_instance.pool` as the key): a task's `pool: NAME` in a DAG of namespace NS is the platform's pool
NAME if one exists, else NS's own pool `NS/NAME`. So a team can never escape a platform pool's limit by
making a pool of that name (a namespace pool named like a platform pool is refused, `PlatformPool`, and
`default` is the platform's alone), and no namespace's task ever takes another namespace's slots. A task
instance waits while its pool does not exist; when a platform pool is created, the waiting task
instances (not queued yet) whose namespace pool of that name does not exist move to it. A platform pool
created after a namespace made its own pool of that name takes that namespace's new task instances from
then on; those already created keep the pool they resolved to.

Removing a pool makes its waiting tasks wait (as for a pool never created) until it exists again; the
task instances queued or running in it finish.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from sqlalchemy import delete, func, insert, literal, select, update
from sqlalchemy.engine import Connection

from dagline.db.claims import lock_pool
from dagline.db.engine import Database
from dagline.db.models import dag_run_t, dag_t, event_t, pool_t, ti_t
from dagline.db.transitions import record_events
from dagline.domain import names
from dagline.domain.states import TIState
from dagline.errors import InvalidInput, OperationFailed
from dagline.limits import MAX_POOL_SLOTS
from dagline.spec.fields import check_pool_name
from dagline.store.timeline import platform_pool_names

DEFAULT_POOL = "default"
# Task instances not holding slots yet: a platform pool created for them may take them (`set_pool`).
_NOT_QUEUED = (TIState.NONE, TIState.SCHEDULED, TIState.UP_FOR_RETRY)


class PlatformPool(OperationFailed):
    """A namespace's pool named like a platform pool: its tasks take the platform's, so it is refused (409)."""

    http_status = 409


def set_pool(db: Database, name: str, slots: int, *, now: dt.datetime, description: str | None = None,
             who: str = "cli", namespace: str | None = None) -> str:
    """Create or resize the platform's pool `name` (`namespace` None) or `namespace`'s own pool (key
    `namespace/name`); returns 'created', 'updated' or 'unchanged'. Shrinking below the slots in use takes
    effect as running tasks end: nothing running is stopped. A namespace's pool named `default` or like a
    platform pool is refused (its tasks take the platform's: `PlatformPool`). A new platform pool takes the
    waiting task instances whose namespace pool of its name does not exist."""
    try:
        check_pool_name(name)
    except ValueError as exc:
        raise InvalidInput(str(exc), field="NAME") from None
    if namespace is not None:
        names.check_namespace(namespace)
        if name == DEFAULT_POOL:
            raise InvalidInput(f"pool {DEFAULT_POOL!r} is the platform's, shared by every namespace: set it without "
                               "--namespace", field="NAME")
    if not 0 <= slots <= MAX_POOL_SLOTS:
        raise InvalidInput(f"must be 0 to {MAX_POOL_SLOTS:,} (what the slots column holds), got {slots:,}",
                           field="SLOTS")
    key = names.pool_key(namespace, name)
    with db.begin() as conn:
        if namespace is not None and name in platform_pool_names(conn):
            raise PlatformPool(f"pool {name!r} is a platform pool: the tasks of namespace {namespace!r} naming it "
                               "take the platform's slots, so a pool of that name of the namespace would never be "
                               "used; choose another name")
        row = lock_pool(conn, key)
        if row is None:
            conn.execute(insert(pool_t).values(name=key, slots=slots, description=description, namespace=namespace))
            action = "created"
            if namespace is None:
                _take_waiting(conn, name)
        elif row.slots == slots and (description is None or description == row.description):
            return "unchanged"
        else:
            values = {"slots": slots}
            if description is not None:
                values["description"] = description
            conn.execute(update(pool_t).where(pool_t.c.name == key).values(**values))
            action = "updated"
        record_events(conn, [{"at": now, "who": who, "entity": "pool", "detail": f"pool {key}",
                              "from_state": None if row is None else str(row.slots), "to_state": str(slots)}])
    return action


def _take_waiting(conn: Connection, name: str) -> None:
    """A platform pool `name` was just created: the task instances not queued yet that wait for a
    namespace pool `NS/name` that does not exist (they resolved to it for want of a platform pool) take it."""
    pools = set(conn.execute(select(pool_t.c.name)).scalars())
    waiting = [key for key in conn.execute(select(ti_t.c.pool).where(ti_t.c.state.in_(_NOT_QUEUED)).distinct())
               .scalars() if key not in pools and names.split_pool(key)[0] is not None
               and names.split_pool(key)[1] == name]
    if waiting:
        conn.execute(update(ti_t).where(ti_t.c.pool.in_(waiting), ti_t.c.state.in_(_NOT_QUEUED)).values(pool=name))


def _active_dags(conn: Connection, namespace: str | None = None) -> list[tuple[str, str, object]]:
    """(dag_id, namespace, current Dag) of the active DAGs (of `namespace`, else all)."""
    from dagline.store.dags import DagCache  # dagstore builds on this module's layer

    cache = DagCache()
    stmt = (select(dag_t.c.dag_id, dag_t.c.namespace, dag_t.c.current_version_id)
            .where(dag_t.c.is_active.is_(True)).order_by(dag_t.c.dag_id))
    if namespace is not None:
        stmt = stmt.where(dag_t.c.namespace == namespace)
    return [(row.dag_id, row.namespace, cache.get(conn, row.current_version_id))
            for row in conn.execute(stmt) if row.current_version_id is not None]


def pool_users(conn: Connection, key: str) -> tuple[list[str], list[str]]:
    """Who uses the pool of `key`: (`dag.task` of the active DAGs' current versions whose tasks take it,
    `dag.task@run` of task instances queued or running in it)."""
    namespace, name = names.split_pool(key)
    platform = platform_pool_names(conn) | ({name} if namespace is None else set())
    tasks = [f"{dag_id}.{t.task_id}" for dag_id, dag_namespace, dag in _active_dags(conn, namespace)
             for t in dag.tasks.values() if t.pool == name and names.resolve_pool(dag_namespace, name, platform) == key]
    active = [f"{r.dag_id}.{r.task_id}@{r.run_id}" for r in conn.execute(
        select(ti_t.c.dag_id, ti_t.c.task_id, dag_run_t.c.run_id).join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
        .where(ti_t.c.pool == key, ti_t.c.state.in_(TIState.ACTIVE)).order_by(ti_t.c.id))]
    return tasks, active


def object_pools(conn: Connection, namespace: str | None, *, written_by: str) -> dict[str, str]:
    """Pool key -> its namespace, for the namespaces' pools (of `namespace`; None: every namespace) last
    written by a writer whose name starts with `written_by` (the operator's replicas), so not one an admin
    made (`pools set --namespace`) that no Pool object set since. What a listing of Pool objects is
    compared with."""
    writer = (select(event_t.c.who)
              .where(event_t.c.dag_run_id.is_(None), event_t.c.entity == "pool",
                     event_t.c.detail == literal("pool ") + pool_t.c.name)
              .order_by(event_t.c.id.desc()).limit(1).scalar_subquery())
    stmt = select(pool_t.c.name, pool_t.c.namespace, writer.label("writer")).where(pool_t.c.namespace.is_not(None))
    if namespace is not None:
        stmt = stmt.where(pool_t.c.namespace == namespace)
    return {row.name: row.namespace for row in conn.execute(stmt)
            if row.writer is not None and row.writer.startswith(written_by)}


def remove_pool(db: Database, name: str, *, now: dt.datetime, who: str = "cli", refuse_in_use: bool = False,
                namespace: str | None = None) -> bool:
    """Remove the platform's pool `name` (`namespace` None) or `namespace`'s own; returns False if there
    was none. Task instances already queued or running in it finish; waiting ones wait until it exists
    again. `default` cannot be removed. With `refuse_in_use` (`dagline pools delete`), a pool that a task
    of an active DAG takes, or that holds queued or running task instances, is refused with their names."""
    if name == DEFAULT_POOL and namespace is None:
        raise OperationFailed("the default pool cannot be removed; set its slots instead")
    key = names.pool_key(namespace, name)
    with db.begin() as conn:
        row = lock_pool(conn, key)
        if row is None:
            return False
        if refuse_in_use:
            tasks, active = pool_users(conn, key)
            if tasks or active:
                why = []
                if tasks:
                    why.append(f"tasks of active DAGs use it: {', '.join(tasks[:20])}"
                               + (f" and {len(tasks) - 20} more" if len(tasks) > 20 else ""))
                if active:
                    why.append(f"task instances are queued or running in it: {', '.join(active[:20])}"
                               + (f" and {len(active) - 20} more" if len(active) > 20 else ""))
                raise OperationFailed(f"pool {key!r} is in use, not deleted: {'; '.join(why)} (give those tasks "
                                      "another pool and apply their DAGs again, or delete the DAGs, first)")
        conn.execute(delete(pool_t).where(pool_t.c.name == key))
        # The audit replays pool sizes from these events: a removed pool has no slots.
        record_events(conn, [{"at": now, "who": who, "entity": "pool", "detail": f"pool {key}",
                              "from_state": str(row.slots), "to_state": "0"}])
    return True


def list_pools(conn: Connection, namespaces: Iterable[str] | None = None) -> list[dict]:
    """Every pool (with `namespaces`: the platform's and those namespaces' own), by key: `name` (within
    its namespace), `namespace` (None: the platform's), `key` (what task instances name), `slots`,
    `used_slots` (held by queued and running task instances), `description`."""
    used = dict(conn.execute(
        select(ti_t.c.pool, func.sum(ti_t.c.pool_slots)).where(ti_t.c.state.in_(TIState.ACTIVE))
        .group_by(ti_t.c.pool)).all())
    stmt = select(pool_t).order_by(pool_t.c.name)
    if namespaces is not None:
        stmt = stmt.where(pool_t.c.namespace.is_(None) | pool_t.c.namespace.in_(sorted(set(namespaces))))
    return [
        {"name": names.split_pool(r.name)[1], "namespace": r.namespace, "key": r.name, "slots": r.slots,
         "used_slots": int(used.get(r.name) or 0), "description": r.description}
        for r in conn.execute(stmt)
    ]
