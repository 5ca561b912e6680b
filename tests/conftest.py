"""Shared fixtures: a migrated database per test, on SQLite and on the real PostgreSQL server.

PostgreSQL tests never skip: if the server at $DAGLINE_TEST_POSTGRES_URL cannot be reached, they
fail with the reason. Each test gets its own database, cloned from a migrated template (cheap:
`CREATE DATABASE ... TEMPLATE`), and it is dropped afterwards.
"""

from __future__ import annotations

import os
import uuid

import pytest
from sqlalchemy import create_engine, text

from dagline.db.engine import Database, normalize_url, upgrade

PG_URL = normalize_url(os.environ.get("DAGLINE_TEST_POSTGRES_URL",
                                      "postgresql+psycopg2://postgres@127.0.0.1:5432/test"))
TEMPLATE = f"dagline_tpl_{os.getpid()}"


def _pg_url(name: str) -> str:
    return PG_URL.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(scope="session")
def pg_admin():
    engine = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{TEMPLATE}"'))
            conn.execute(text(f'CREATE DATABASE "{TEMPLATE}"'))
    except Exception as exc:  # noqa: BLE001 - turned into a clear failure, never a skip
        pytest.fail(f"PostgreSQL at {PG_URL} is needed by these tests and could not be used: {exc}")
    template = Database(_pg_url(TEMPLATE))
    upgrade(template)
    template.dispose()
    yield engine
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)'))
    engine.dispose()


def make_pg_database(pg_admin) -> tuple[Database, callable]:
    name = f"dagline_t_{uuid.uuid4().hex[:10]}"
    with pg_admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{TEMPLATE}"'))
    db = Database(_pg_url(name))

    def drop():
        db.dispose()
        with pg_admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    return db, drop


@pytest.fixture
def sqlite_db(tmp_path):
    db = Database(f"sqlite:///{tmp_path}/dagline.db")
    upgrade(db)
    yield db
    db.dispose()


@pytest.fixture
def pg_db(pg_admin):
    db, drop = make_pg_database(pg_admin)
    yield db
    drop()


@pytest.fixture(params=["sqlite", "postgres"])
def db(request, tmp_path):
    """A migrated database: every test using it runs on SQLite and on PostgreSQL."""
    if request.param == "sqlite":
        database = Database(f"sqlite:///{tmp_path}/dagline.db")
        upgrade(database)
        yield database
        database.dispose()
    else:
        database, drop = make_pg_database(request.getfixturevalue("pg_admin"))
        yield database
        drop()
