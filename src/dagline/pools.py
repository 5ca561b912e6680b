"""Pools: named numbers of slots. `default` (128 slots) exists from the first migration and cannot be
removed; removing another pool makes its tasks wait (as for a pool never created) until it exists again."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Connection

from dagline.db.claims import lock_pool
from dagline.db.engine import Database
from dagline.db.models import pool_t, ti_t
from dagline.db.transitions import record_events
from dagline.errors import InvalidInput, OperationFailed
from dagline.limits import MAX_POOL_SLOTS
from dagline.spec.fields import check_pool_name
from dagline.states import TIState

DEFAULT_POOL = "default"


def set_pool(db: Database, name: str, slots: int, *, now: dt.datetime, description: str | None = None,
             who: str = "cli") -> str:
    """Create or resize a pool; returns 'created', 'updated' or 'unchanged'. Shrinking below the slots in
    use takes effect as running tasks end: nothing running is stopped."""
    try:
        check_pool_name(name)
    except ValueError as exc:
        raise InvalidInput(str(exc), field="NAME") from None
    if not 0 <= slots <= MAX_POOL_SLOTS:
        raise InvalidInput(f"must be 0 to {MAX_POOL_SLOTS:,} (what the slots column holds), got {slots:,}",
                           field="SLOTS")
    with db.begin() as conn:
        row = lock_pool(conn, name)
        if row is None:
            conn.execute(insert(pool_t).values(name=name, slots=slots, description=description))
            action = "created"
        elif row.slots == slots and (description is None or description == row.description):
            return "unchanged"
        else:
            values = {"slots": slots}
            if description is not None:
                values["description"] = description
            conn.execute(update(pool_t).where(pool_t.c.name == name).values(**values))
            action = "updated"
        record_events(conn, [{"at": now, "who": who, "entity": "pool", "detail": f"pool {name}",
                              "from_state": None if row is None else str(row.slots), "to_state": str(slots)}])
    return action


def remove_pool(db: Database, name: str, *, now: dt.datetime, who: str = "cli") -> bool:
    """Remove a pool; returns False if there was none. Task instances already queued or running in it
    finish; scheduled ones wait until a pool of that name exists again. `default` cannot be removed."""
    if name == DEFAULT_POOL:
        raise OperationFailed("the default pool cannot be removed; set its slots instead")
    with db.begin() as conn:
        row = lock_pool(conn, name)
        if row is None:
            return False
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
        {"name": r.name, "slots": r.slots, "used_slots": int(used.get(r.name) or 0), "description": r.description}
        for r in conn.execute(select(pool_t).order_by(pool_t.c.name))
    ]
