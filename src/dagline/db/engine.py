"""Connections: URL normalisation, engine set-up per database, transactions and the schema check.

SQLite: WAL journal, foreign keys on, a busy timeout, and `BEGIN IMMEDIATE` for every transaction:
SQLite has no row locks, so writers are serialised by the database lock instead (and only one
scheduler may run on it, see `scheduler.replica.guard`); `writer_lock` lines them up so a waiter gets in as
soon as the holder commits. PostgreSQL: `postgresql://` URLs are read as
psycopg2 (the driver dagline ships with); a pooled connection idle for a second or more is checked
before use (`_check_idle_connections_before_use`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DisconnectionError, OperationalError, SQLAlchemyError

from dagline.db.faults import first_line, is_read_only
from dagline.db.writer_lock import WriterLock
from dagline.errors import DatabaseUnreachable, InvalidInput, OperationFailed

DEFAULT_URL = "sqlite:///dagline.db"


def normalize_url(url: str) -> str:
    """Accept the spellings users type and return the one SQLAlchemy should use."""
    url = url.strip()
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg2://" + url[len(prefix):]
    return url


def default_url() -> str:
    return os.environ.get("DAGLINE_DB_URL") or DEFAULT_URL


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url


class Database:
    """An engine plus the few facts the rest of dagline asks about it."""

    def __init__(self, url: str, *, echo: bool = False):
        self.url = normalize_url(url)
        try:
            parsed = make_url(self.url)
        except ArgumentError:
            raise InvalidInput(
                f"{url!r} is not a database URL (examples: sqlite:///dagline.db, "
                "postgresql://user@host:5432/dbname)", field="--db",
            ) from None
        self.dialect = parsed.get_backend_name()
        if self.dialect not in ("sqlite", "postgresql"):
            raise InvalidInput(f"unsupported database {self.dialect!r}: use sqlite or postgresql", field="--db")
        self.engine = _make_engine(self.url, self.dialect, echo=echo)
        self.sqlite_path = parsed.database if self.dialect == "sqlite" else None
        in_file = self.sqlite_path and self.sqlite_path != ":memory:" and not self.sqlite_path.startswith("file:")
        self.writer_lock = WriterLock(os.path.abspath(self.sqlite_path)) if in_file else None

    @property
    def is_sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @contextlib.contextmanager
    def begin(self) -> Iterator[Connection]:
        """One transaction: commits on success, rolls back on any error. On SQLite, after waiting for
        the writers' turn (`writer_lock`): every SQLite transaction here writes (`BEGIN IMMEDIATE`)."""
        try:
            with self._turn(), self.engine.begin() as conn:
                yield conn
        except OperationalError as exc:
            if _is_connection_error(exc):
                raise DatabaseUnreachable(
                    f"cannot reach the database at {redact(self.url)}: {first_line(exc.orig)}"
                ) from exc
            if is_read_only(exc):
                raise read_only_error(self, exc) from exc
            raise

    def _turn(self):
        return self.writer_lock.turn() if self.writer_lock is not None else contextlib.nullcontext()

    def check_reachable(self) -> None:
        with self.begin() as conn:
            conn.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()
        if self.writer_lock is not None:
            self.writer_lock.close()


def read_only_error(db: Database, exc: BaseException) -> OperationFailed:
    """A write refused because the database is read-only, said as a person can act on it."""
    hint = ("make the file and its folder writable by this user (SQLite writes -wal and -shm files beside it)"
            if db.is_sqlite else "connect to the primary server, not a standby")
    return OperationFailed(f"the database at {redact(db.url)} is read-only ({first_line(exc)}): nothing was "
                           f"written; {hint}")


def _is_connection_error(exc: OperationalError) -> bool:
    message = str(exc.orig).lower()
    return any(
        needle in message
        for needle in ("could not connect", "connection refused", "unable to open database", "could not translate host",
                       "does not exist", "server closed the connection", "timeout expired", "no such host")
    )


def _make_engine(url: str, dialect: str, *, echo: bool) -> Engine:
    if dialect == "sqlite":
        engine = create_engine(url, echo=echo, connect_args={"timeout": 30, "check_same_thread": False})

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_conn, _record):
            dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.close()

        @event.listens_for(engine, "begin")
        def _on_begin(conn):
            conn.exec_driver_sql("BEGIN IMMEDIATE")

        return engine
    engine = create_engine(url, echo=echo, pool_size=5, max_overflow=5)
    _check_idle_connections_before_use(engine)
    return engine


PING_AFTER_IDLE_S = 1.0  # a pooled connection unused this long is checked before it is handed out


def _check_idle_connections_before_use(engine: Engine) -> None:
    """Hand out a pooled connection that sat unused for `PING_AFTER_IDLE_S` or longer only after a
    `SELECT 1` on it (a restarted server or a dropped link is found then, and the pool connects
    afresh), as SQLAlchemy's `pool_pre_ping` does for every checkout. A connection given back a moment
    ago, as the scheduler's loop does many times a second, goes out unchecked: a ping per transaction
    was a round trip in every short transaction. If the server went away in that moment, the first
    statement fails as a lost connection, SQLAlchemy empties the pool, and the caller's transaction
    fails as any other in an outage (the scheduler's loop carries on after a backoff)."""

    @event.listens_for(engine, "checkin")
    def _returned(_dbapi_conn, record):
        record.info["returned_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _check(dbapi_conn, record, _proxy):
        returned = record.info.get("returned_at")  # none yet: a connection just made
        if returned is None or time.monotonic() - returned < PING_AFTER_IDLE_S:
            return
        try:
            with dbapi_conn.cursor() as cursor:
                cursor.execute("SELECT 1")
        except Exception as exc:  # noqa: BLE001 - any failure: let the pool connect afresh
            raise DisconnectionError() from exc


# --- schema version -------------------------------------------------------------------------------

def migrations_config(db: Database):
    from alembic.config import Config

    here = os.path.join(os.path.dirname(__file__), "migrations")
    cfg = Config()
    cfg.set_main_option("script_location", here)
    cfg.attributes["database"] = db
    return cfg


def upgrade(db: Database) -> tuple[str | None, str]:
    """Create or migrate the schema to the newest revision; idempotent. Returns (before, after)."""
    from alembic import command

    before = current_revision(db)
    cfg = migrations_config(db)
    with db.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    return before, head_revision(db)


def head_revision(db: Database) -> str:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(migrations_config(db)).get_current_head()


def current_revision(db: Database) -> str | None:
    from alembic.runtime.migration import MigrationContext

    try:
        with db.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    except OperationalError as exc:
        raise DatabaseUnreachable(f"cannot reach the database at {redact(db.url)}: {first_line(exc.orig)}") from exc


def require_current_schema(db: Database) -> None:
    """Refuse to work on a database whose schema is missing or older than this dagline."""
    current = current_revision(db)
    head = head_revision(db)
    if current == head:
        return
    if current is None:
        with db.engine.connect() as conn:
            has_tables = bool(inspect(conn).get_table_names())
        what = "has tables but no dagline schema version" if has_tables else "has no dagline schema yet"
    else:
        what = f"has schema revision {current}, this dagline needs {head}"
    raise OperationFailed(f"the database at {redact(db.url)} {what}: run `dagline db upgrade` first")


def missing_file(db: Database) -> str | None:
    """The absolute path of the SQLite file `db` names, if there is no such file (None: it exists, or
    `db` is not a SQLite file). Opening a SQLite URL creates its file: ask this first to avoid that."""
    if db.writer_lock is None:  # PostgreSQL, or SQLite in memory or by `file:` URI
        return None
    path = os.path.abspath(db.sqlite_path)
    return None if os.path.exists(path) else path


def require_file(db: Database) -> None:
    """Refuse, touching nothing, a SQLite database whose file does not exist (see `missing_file`)."""
    path = missing_file(db)
    if path is not None:
        db.dispose()
        raise OperationFailed(f"no database file at {path}: nothing was created. Point --db (or DAGLINE_DB_URL) at "
                              "your database, or run `dagline db upgrade` to create a new one there")


def open_database(url: str | None = None, *, check_schema: bool = True) -> Database:
    """Open and check a database for a command: reachable, and (by default) on the current schema.
    Checking the schema, it never creates a SQLite file: a missing one is refused before anything is
    opened (it could only hold no schema); without the check (`dagline db upgrade`) it is created."""
    db = Database(url or default_url())
    if check_schema:
        require_file(db)
    try:
        db.check_reachable()
    except SQLAlchemyError as exc:
        reason = first_line(getattr(exc, "orig", exc))
        raise DatabaseUnreachable(f"cannot reach the database at {redact(db.url)}: {reason}") from exc
    if check_schema:
        require_current_schema(db)
    return db
