"""Pools: named numbers of slots. `default` (128 slots) exists from the first migration and cannot be
removed; removing another pool makes its tasks wait (as for a pool never created) until it exists again.

A pool is a platform pool (`namespace` None: `default`, `dagline pools set`, shared by every namespace)
or owned by the namespace of the Pool object that set it (only that namespace's DAGs may use it; see
`k8s.pools` and docs/adr/0050)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, func, insert, literal, select, update
from sqlalchemy.engine import Connection

from dagline.db.claims import lock_pool
from dagline.db.engine import Database
from dagline.db.models import dag_run_t, dag_t, event_t, pool_t, ti_t
from dagline.db.transitions import record_events
from dagline.domain.states import TIState
from dagline.errors import InvalidInput, OperationFailed
from dagline.limits import MAX_POOL_SLOTS
from dagline.spec.fields import check_pool_name

DEFAULT_POOL = "default"
_KEEP = object()  # `set_pool(namespace=...)` not given: the owner stays (a new pool is a platform pool)


class PoolNotOwned(OperationFailed):
    """A pool owned by another namespace (or by the platform) than the one asking to set it: 409."""

    http_status = 409


def set_pool(db: Database, name: str, slots: int, *, now: dt.datetime, description: str | None = None,
             who: str = "cli", namespace=_KEEP, owned_by=_KEEP) -> str:
    """Create or resize a pool; returns 'created', 'updated' or 'unchanged'. Shrinking below the slots in
    use takes effect as running tasks end: nothing running is stopped. `namespace`: its owner from now
    on (None: the platform); `owned_by`: refuse (PoolNotOwned) unless the existing pool's owner is that."""
    try:
        check_pool_name(name)
    except ValueError as exc:
        raise InvalidInput(str(exc), field="NAME") from None
    if not 0 <= slots <= MAX_POOL_SLOTS:
        raise InvalidInput(f"must be 0 to {MAX_POOL_SLOTS:,} (what the slots column holds), got {slots:,}",
                           field="SLOTS")
    with db.begin() as conn:
        row = lock_pool(conn, name)
        if row is not None and owned_by is not _KEEP and row.namespace != owned_by:
            owner = f"namespace {row.namespace!r}" if row.namespace else "the platform (a shared pool)"
            raise PoolNotOwned(f"pool {name!r} belongs to {owner}; pool names are global in the database")
        owner = (None if row is None else row.namespace) if namespace is _KEEP else namespace
        if row is None:
            conn.execute(insert(pool_t).values(name=name, slots=slots, description=description, namespace=owner))
            action = "created"
        elif row.slots == slots and (description is None or description == row.description) \
                and row.namespace == owner:
            return "unchanged"
        else:
            values = {"slots": slots, "namespace": owner}
            if description is not None:
                values["description"] = description
            conn.execute(update(pool_t).where(pool_t.c.name == name).values(**values))
            action = "updated"
        record_events(conn, [{"at": now, "who": who, "entity": "pool", "detail": f"pool {name}",
                              "from_state": None if row is None else str(row.slots), "to_state": str(slots)}])
    return action


def pool_users(conn: Connection, name: str) -> tuple[list[str], list[str]]:
    """Who uses a pool: (`dag.task` of the active DAGs' current versions that name it, `dag.task@run`
    of task instances queued or running in it)."""
    from dagline.store.dags import DagCache  # dagstore builds on this module's layer

    cache = DagCache()
    tasks = []
    for row in conn.execute(select(dag_t.c.dag_id, dag_t.c.current_version_id)
                            .where(dag_t.c.is_active.is_(True)).order_by(dag_t.c.dag_id)):
        if row.current_version_id is not None:
            dag = cache.get(conn, row.current_version_id)
            tasks += [f"{row.dag_id}.{t.task_id}" for t in dag.tasks.values() if t.pool == name]
    active = [f"{r.dag_id}.{r.task_id}@{r.run_id}" for r in conn.execute(
        select(ti_t.c.dag_id, ti_t.c.task_id, dag_run_t.c.run_id).join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id)
        .where(ti_t.c.pool == name, ti_t.c.state.in_(TIState.ACTIVE)).order_by(ti_t.c.id))]
    return tasks, active


def pool_namespaces(conn: Connection, names) -> dict[str, str | None]:
    """Pool name -> the namespace owning it (None: a platform pool), for the pools of `names` that exist."""
    return dict(conn.execute(select(pool_t.c.name, pool_t.c.namespace).where(pool_t.c.name.in_(list(names)))).all())


def object_pools(conn: Connection, namespace: str | None, *, written_by: str) -> dict[str, str]:
    """Pool name -> the namespace whose Pool object defines it: the pools of a namespace (in `namespace`;
    None: every namespace) last written by a writer whose name starts with `written_by` (the operator's
    replicas), so not one an admin handed to a namespace (`pools set --namespace`) before any Pool object
    set it. What a listing of Pool objects is compared with."""
    writer = (select(event_t.c.who)
              .where(event_t.c.dag_run_id.is_(None), event_t.c.entity == "pool",
                     event_t.c.detail == literal("pool ") + pool_t.c.name)
              .order_by(event_t.c.id.desc()).limit(1).scalar_subquery())
    stmt = select(pool_t.c.name, pool_t.c.namespace, writer.label("writer")).where(pool_t.c.namespace.is_not(None))
    if namespace is not None:
        stmt = stmt.where(pool_t.c.namespace == namespace)
    return {row.name: row.namespace for row in conn.execute(stmt)
            if row.writer is not None and row.writer.startswith(written_by)}


def pool_users_outside(conn: Connection, name: str, namespace: str) -> list[str]:
    """`dag.task` of the active DAGs of other namespaces (not files' DAGs) whose current version names the pool."""
    from dagline.store.dags import DagCache  # dagstore builds on this module's layer

    cache = DagCache()
    tasks = []
    for row in conn.execute(select(dag_t.c.dag_id, dag_t.c.current_version_id)
                            .where(dag_t.c.is_active.is_(True), dag_t.c.namespace.is_not(None),
                                   dag_t.c.namespace != namespace).order_by(dag_t.c.dag_id)):
        if row.current_version_id is not None:
            dag = cache.get(conn, row.current_version_id)
            tasks += [f"{row.dag_id}.{t.task_id}" for t in dag.tasks.values() if t.pool == name]
    return tasks


def remove_pool(db: Database, name: str, *, now: dt.datetime, who: str = "cli", refuse_in_use: bool = False) -> bool:
    """Remove a pool; returns False if there was none. Task instances already queued or running in it
    finish; scheduled ones wait until a pool of that name exists again. `default` cannot be removed.
    With `refuse_in_use` (`dagline pools delete`), a pool that a task of an active DAG names, or that
    holds queued or running task instances, is refused with their names."""
    if name == DEFAULT_POOL:
        raise OperationFailed("the default pool cannot be removed; set its slots instead")
    with db.begin() as conn:
        row = lock_pool(conn, name)
        if row is None:
            return False
        if refuse_in_use:
            tasks, active = pool_users(conn, name)
            if tasks or active:
                why = []
                if tasks:
                    why.append(f"tasks of active DAGs use it: {', '.join(tasks[:20])}"
                               + (f" and {len(tasks) - 20} more" if len(tasks) > 20 else ""))
                if active:
                    why.append(f"task instances are queued or running in it: {', '.join(active[:20])}"
                               + (f" and {len(active) - 20} more" if len(active) > 20 else ""))
                raise OperationFailed(f"pool {name!r} is in use, not deleted: {'; '.join(why)} (give those tasks "
                                      "another pool and apply their DAGs again, or delete the DAGs, first)")
        conn.execute(delete(pool_t).where(pool_t.c.name == name))
        # The audit replays pool sizes from these events: a removed pool has no slots.
        record_events(conn, [{"at": now, "who": who, "entity": "pool", "detail": f"pool {name}",
                              "from_state": str(row.slots), "to_state": "0"}])
    return True


def list_pools(conn: Connection) -> list[dict]:
    used = dict(conn.execute(
        select(ti_t.c.pool, func.sum(ti_t.c.pool_slots)).where(ti_t.c.state.in_(TIState.ACTIVE))
        .group_by(ti_t.c.pool)).all())
    return [
        {"name": r.name, "slots": r.slots, "used_slots": int(used.get(r.name) or 0), "description": r.description,
         "namespace": r.namespace}
        for r in conn.execute(select(pool_t).order_by(pool_t.c.name))
    ]
