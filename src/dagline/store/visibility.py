"""Reads that only ever look within the namespaces a caller may see (ADR 92: every DAG key carries its
namespace, so a row's namespace is read off its `dag_id` without a join):

- `find_visible_run`: a run by numeric id or run id string, chosen only among the runs of the visible
  namespaces' DAGs. A run id string that several DAGs share is resolved among those alone, and the
  refusal of one still shared names only those DAGs: no answer differs by another namespace's runs.
- `newest_change` and `changes_after`: what the live pages watch (`dagline.web.live`). Every change of
  stored state a page shows records an event (its `dag_id` says whose) or stores a signal (its
  `namespace` column says whose); reading those past the last seen ids tells which namespaces changed,
  so a namespace-limited reader is told of its namespaces' changes only.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import case, func, or_, select
from sqlalchemy.engine import Connection

from dagline.db.models import dag_run_t, event_t, signal_t
from dagline.domain import names
from dagline.errors import NotFound, OperationFailed
from dagline.limits import MAX_ROW_ID


def unknown_run(run_ref: str) -> NotFound:
    """The one refusal of a run a caller cannot have: unknown, or another namespace's (same words)."""
    return NotFound(f"unknown run {run_ref!r} (see `dagline runs list`)")


def find_visible_run(conn: Connection, run_ref: str, namespaces: Collection[str] | None):
    """The run `run_ref` names (numeric id, else run id string) among the runs of DAGs of `namespaces`
    (None: every namespace). NotFound (`unknown_run`) when none; OperationFailed (409) when a run id
    string is shared by several of those runs, naming their DAGs (all of them visible)."""
    text = str(run_ref)
    cond = dag_run_t.c.run_id == text
    numeric = text.isascii() and text.isdigit() and int(text) <= MAX_ROW_ID
    if numeric:
        cond = or_(dag_run_t.c.id == int(text), cond)
    rows = conn.execute(select(dag_run_t).where(cond).order_by(dag_run_t.c.id)).all()
    if namespaces is not None:
        rows = [r for r in rows if names.namespace_of(r.dag_id) in namespaces]
    if not rows:
        raise unknown_run(text)
    by_id = [r for r in rows if numeric and r.id == int(text)]
    if by_id:
        return by_id[0]
    if len(rows) > 1:
        dags = ", ".join(sorted({r.dag_id for r in rows}))
        raise OperationFailed(f"run id {text!r} exists in several DAGs ({dags}): use the numeric id")
    return rows[0]


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
