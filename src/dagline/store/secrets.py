"""Secrets every replica shares without configuration (`server_secret`): made at first use by whichever
replica asks first, read by all the others (an insert that loses the race writes nothing, and the winner's
secret is read back). The web UI signs its CSRF values with one (ADR 61)."""

from __future__ import annotations

import datetime as dt
import secrets

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

from dagline.db.models import server_secret_t

_S = server_secret_t.c


def shared_secret(conn: Connection, name: str, *, now: dt.datetime) -> str:
    """The secret called `name`, made now if there is none yet."""
    found = conn.execute(select(_S.secret).where(_S.name == name)).scalar()
    if found is not None:
        return found
    dialect_insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
    conn.execute(dialect_insert(server_secret_t).values(name=name, secret=secrets.token_urlsafe(48), created_at=now)
                 .on_conflict_do_nothing(index_elements=["name"]))
    return conn.execute(select(_S.secret).where(_S.name == name)).scalar_one()
