"""Replica liveness as data: the `replica` rows of scheduler replicas, on the database's clock.

A replica registers (`running`), heartbeats, and ends `stopped` (a graceful stop) or `dead` (a peer
saw its heartbeat go stale, see `claims.claim_stale_replicas`). Every time written here comes from
the database (`now()`), never from a replica: replicas whose clocks disagree by hours, or that run
with a frozen `--now`, still agree on who is alive.

A heartbeat is a compare-and-set on `state = 'running'`: a replica its peers already declared dead
learns it from its next heartbeat (`Beat.alive` is False) and must stop at once, because its task
instances now belong to someone else. `alive_since` starts again whenever a replica's own previous
heartbeat is older than `gap_s`: after a database outage nobody has a fresh heartbeat, and nobody
may judge its peers until it has been alive again for a whole timeout.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import socket

from sqlalchemy import case, func, insert, select, type_coerce, update
from sqlalchemy.engine import Connection

from dagline.db.models import UTCDateTime, replica_t
from dagline.domain.states import ReplicaState

HOSTNAME = socket.gethostname()


def database_now(conn: Connection) -> dt.datetime:
    """The database's current time (on PostgreSQL: the start of this transaction), as aware UTC."""
    return conn.execute(select(type_coerce(func.now(), UTCDateTime()))).scalar_one()


def register(conn: Connection, *, executor: str) -> tuple[int, dt.datetime]:
    """Register a running replica on this host; returns its id and the database time of registration."""
    now = database_now(conn)
    replica_id = conn.execute(insert(replica_t).values(
        hostname=HOSTNAME, pid=os.getpid(), executor=executor, state=ReplicaState.RUNNING,
        started_at=now, latest_heartbeat=now, alive_since=now,
    ).returning(replica_t.c.id)).scalar_one()
    return replica_id, now


@dataclasses.dataclass(frozen=True)
class Beat:
    alive: bool                      # False: the row is no longer `running` (peers declared it dead)
    at: dt.datetime                  # the database time of this heartbeat
    alive_since: dt.datetime | None  # start of the unbroken run of heartbeats this one belongs to


def heartbeat(conn: Connection, replica_id: int, *, gap_s: float) -> Beat:
    """Record that replica `replica_id` is alive, if it still is `running`."""
    now = database_now(conn)
    row = conn.execute(
        update(replica_t)
        .where(replica_t.c.id == replica_id, replica_t.c.state == ReplicaState.RUNNING)
        .values(
            alive_since=case(
                (replica_t.c.latest_heartbeat < now - dt.timedelta(seconds=gap_s), now),
                (replica_t.c.alive_since.is_(None), now),
                else_=replica_t.c.alive_since,
            ),
            latest_heartbeat=now,
        )
        .returning(replica_t.c.alive_since)
    ).first()
    return Beat(alive=row is not None, at=now, alive_since=row.alive_since if row else None)


def deregister(conn: Connection, replica_id: int) -> bool:
    """A graceful stop: `running` -> `stopped`. False if peers had already declared the replica dead."""
    now = database_now(conn)
    return conn.execute(
        update(replica_t).where(replica_t.c.id == replica_id, replica_t.c.state == ReplicaState.RUNNING)
        .values(state=ReplicaState.STOPPED, ended_at=now).returning(replica_t.c.id)
    ).first() is not None


def mark_all_others_dead(conn: Connection, replica_id: int) -> list:
    """Every other `running` replica is dead: only true where this one is provably the only one (SQLite,
    whose file lock the replica holds). Returns the rows changed (id, hostname, pid, ended_at)."""
    now = database_now(conn)
    return conn.execute(
        update(replica_t).where(replica_t.c.id != replica_id, replica_t.c.state == ReplicaState.RUNNING)
        .values(state=ReplicaState.DEAD, ended_at=now)
        .returning(replica_t.c.id, replica_t.c.hostname, replica_t.c.pid,
                   replica_t.c.latest_heartbeat, replica_t.c.ended_at)
    ).all()
