"""Metrics that count stored changes are counted when their transaction commits, not before.

A step may change rows and then roll back (a conflict retried, an outage, `PoolsBusy`): counting
at the statement would count what never happened. `at_commit(conn, fn)` keeps `fn` with the
connection until its transaction ends: a commit calls it, a rollback drops it.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

_PENDING = "dagline_at_commit"  # key in the DBAPI connection's info: callables waiting for the commit


def at_commit(conn: Connection, fn: Callable[[], None]) -> None:
    """Call `fn` once the transaction `conn` is in commits (never, if it rolls back)."""
    conn.info.setdefault(_PENDING, []).append(fn)


@event.listens_for(Engine, "commit")
def _committed(conn) -> None:
    for fn in conn.info.pop(_PENDING, ()):
        fn()


@event.listens_for(Engine, "rollback")
def _rolled_back(conn) -> None:
    conn.info.pop(_PENDING, None)
