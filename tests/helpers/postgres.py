"""A fresh PostgreSQL database per test, cloned from a migrated template: cheap (`CREATE DATABASE ...
TEMPLATE`) and dropped afterwards.

The server is at $DAGLINE_TEST_POSTGRES_URL (`PG_URL`). The session fixture `pg_admin` (tests/conftest.py)
makes the template `TEMPLATE` and hands out an AUTOCOMMIT engine on the server; `make_pg_database(pg_admin)`
then returns `(database, drop)` for a new database, for fixtures of any scope (the `db` and `pg_db`
fixtures, the browser tests' module-wide scene).
"""

from __future__ import annotations

import os
import uuid

from sqlalchemy import text

from dagline.db.engine import Database, normalize_url

PG_URL = normalize_url(os.environ.get("DAGLINE_TEST_POSTGRES_URL",
                                      "postgresql+psycopg2://postgres@127.0.0.1:5432/test"))
TEMPLATE = f"dagline_tpl_{os.getpid()}"


def database_url(name: str) -> str:
    """The URL of database `name` on the test server."""
    return PG_URL.rsplit("/", 1)[0] + f"/{name}"


def make_pg_database(pg_admin, *, migrated: bool = True) -> tuple[Database, callable]:
    """A new database on the test server, migrated (a copy of the template) unless `migrated` is False
    (empty), and a function that drops it."""
    name = f"dagline_t_{uuid.uuid4().hex[:10]}"
    template = f' TEMPLATE "{TEMPLATE}"' if migrated else ""
    with pg_admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"{template}'))
    db = Database(database_url(name))

    def drop():
        db.dispose()
        with pg_admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    return db, drop
