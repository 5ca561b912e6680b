"""The changes the live pages watch (`dagline.web.live`), with whose they are. Every change of stored
state a page shows records an event (its `dag_id`, a DAG's key, says whose: ADR 92) or stores a signal
(its `namespace` says whose); reading those past the last seen ids tells which namespaces changed, so a
namespace-limited reader is told of its namespaces' changes only."""

from __future__ import annotations

from sqlalchemy import case, func, select
from sqlalchemy.engine import Connection

from dagline.db.models import event_t, signal_t


def newest_change(conn: Connection) -> tuple[int, int]:
    """(the newest event id, the newest signal seq), 0 for none: where watching for changes starts."""
    return (conn.execute(select(func.max(event_t.c.id))).scalar() or 0,
            conn.execute(select(func.max(signal_t.c.seq))).scalar() or 0)


def changes_after(conn: Connection, event_id: int, signal_seq: int, *, limit: int = 5000) -> tuple[list, list]:
    """The events after `event_id` and the signals after `signal_seq` (each at most `limit`, oldest
    first): ([(id, dag_id, pool key or None)], [(seq, namespace)]). Index range reads of the primary
    keys: cheap however long the history is."""
    e = event_t.c
    pool = case((e.entity == "pool", e.detail), else_=None)
    events = conn.execute(select(e.id, e.dag_id, pool).where(e.id > event_id).order_by(e.id).limit(limit)).all()
    signals = conn.execute(select(signal_t.c.seq, signal_t.c.namespace).where(signal_t.c.seq > signal_seq)
                           .order_by(signal_t.c.seq).limit(limit)).all()
    return [tuple(r) for r in events], [tuple(r) for r in signals]
