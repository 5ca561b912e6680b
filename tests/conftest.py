"""Shared fixtures: a migrated database per test, on SQLite and on the real PostgreSQL server.

PostgreSQL tests never skip: if the server at $DAGLINE_TEST_POSTGRES_URL cannot be reached, they
fail with the reason. Each test gets its own database, cloned from a migrated template (cheap:
`CREATE DATABASE ... TEMPLATE`), and it is dropped afterwards (tests/helpers/postgres.py).
"""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from dagline.db.engine import Database, upgrade
from tests.helpers.postgres import PG_URL, TEMPLATE, database_url, make_pg_database


@pytest.fixture(scope="session")
def pg_admin():
    engine = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{TEMPLATE}"'))
            conn.execute(text(f'CREATE DATABASE "{TEMPLATE}"'))
    except Exception as exc:  # noqa: BLE001 - turned into a clear failure, never a skip
        pytest.fail(f"PostgreSQL at {PG_URL} is needed by these tests and could not be used: {exc}")
    template = Database(database_url(TEMPLATE))
    upgrade(template)
    template.dispose()
    yield engine
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)'))
    engine.dispose()


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


@pytest.fixture(scope="session")
def connect_server(tmp_path_factory):
    """One real Spark Connect server for the whole session, started by the first test that needs it (it takes
    10-30 s to start here) and stopped at the session's end. Tests run their Connect tasks (`spark.connect:
    true`) on it: a `LocalExecutor(connect_server=...)` then leaves it running, and a `dagline` command or
    scheduler process finds it through `connect_url` (DAGLINE_CONNECT_URL). Only the tests of the replica's
    own server (starting, restarting after a crash) start one of their own."""
    from dagline.executors.connect_server import ConnectServer, ConnectSettings

    server = ConnectServer(ConnectSettings(driver_memory="768m", cores=2),
                           tmp_path_factory.mktemp("connect") / "connect-server.log")
    server.ensure()
    assert server.wait_listening(300), f"the Spark Connect server did not start: see {server.log_file}"
    yield server
    server.stop()


@pytest.fixture
def connect_url(connect_server, monkeypatch):
    """DAGLINE_CONNECT_URL set to the session's server: the `dagline` commands a test runs (in-process or as
    processes inheriting the environment) run their Connect tries there instead of starting a server."""
    assert connect_server.running(), f"the session's Spark Connect server died: see {connect_server.log_file}"
    monkeypatch.setenv("DAGLINE_CONNECT_URL", connect_server.url)
    return connect_server.url
