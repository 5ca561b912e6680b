"""Which database errors are transient: worth a retry, never a reason for a replica to stop.

Two kinds, told apart because they are retried differently (see `dagline.scheduler.replica.resilience`):
- conflicts: a serialization failure (40001) or a deadlock (40P01). PostgreSQL rolled the transaction
  back; running it again at once usually succeeds.
- outages: the connection was reset or terminated, the server is shutting down or starting up
  (57P01, 57P02, 57P03, class 08), the database cannot be reached (`DatabaseUnreachable` from
  `Database.begin`), SQLite is locked past its busy timeout. Retried after a backoff.
Anything else (a constraint violation, a bug) is not transient and is raised as it is.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError

from dagline.errors import DatabaseUnreachable

log = logging.getLogger(__name__)

T = TypeVar("T")

CONFLICT_CODES = frozenset({"40001", "40P01"})
OUTAGE_CODES = frozenset({"57P01", "57P02", "57P03", "53300"})  # and all of class 08 (connection exceptions)
CONFLICT_ATTEMPTS = 4
_OUTAGE_MESSAGES = (
    "server closed the connection", "terminating connection", "connection already closed",
    "could not connect", "connection refused", "the database system is", "ssl connection has been closed",
    "connection timed out", "timeout expired", "no connection to the server", "database is locked",
    "could not receive data", "could not send data", "connection reset",
)


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of the first database error in `exc`'s chain, if the driver gave one."""
    for link in _chain(exc):
        orig = link.orig if isinstance(link, DBAPIError) else link
        code = getattr(orig, "pgcode", None)
        if code:
            return code
    return None


def is_conflict(exc: BaseException) -> bool:
    """A serialization failure or a deadlock: the transaction was rolled back and may simply run again."""
    return sqlstate(exc) in CONFLICT_CODES


def is_transient(exc: BaseException) -> bool:
    """True for conflicts and outages (see the module docstring); False for everything else."""
    code = sqlstate(exc)
    if code in CONFLICT_CODES or code in OUTAGE_CODES or (code or "").startswith("08"):
        return True
    for link in _chain(exc):
        if isinstance(link, DatabaseUnreachable) or (isinstance(link, DBAPIError) and link.connection_invalidated):
            return True
        if isinstance(link, DBAPIError) or type(link).__module__.startswith("psycopg2"):
            message = str(link).lower()
            if any(needle in message for needle in _OUTAGE_MESSAGES):
                return True
    return False


def is_read_only(exc: BaseException) -> bool:
    """The database refused a write because it is read-only: a SQLite file (or its folder) without write
    permission, or a PostgreSQL standby / read-only transaction (SQLSTATE 25006)."""
    if sqlstate(exc) == "25006":
        return True
    return any("readonly database" in str(link).lower() or "read-only database" in str(link).lower()
               for link in _chain(exc))


def first_line(exc: BaseException | None) -> str:
    """The first line of an error's message (the driver's, for a database error), for one log line."""
    text = str(getattr(exc, "orig", None) or exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def run_again_on_conflict(fn: Callable[[], T], *, what: str, attempts: int = CONFLICT_ATTEMPTS,
                          pause_s: float = 0.01, on_conflict: Callable[[], None] | None = None) -> T:
    """`fn()`, run again (up to `attempts` in all) while it fails with a conflict. Only for a `fn` whose
    writes are one transaction: PostgreSQL rolled all of it back. Between attempts, a random pause of up
    to `pause_s` x attempt lets the other transaction finish."""
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt == attempts or not is_conflict(exc):
                raise
            if on_conflict is not None:
                on_conflict()
            log.info("%s: %s; running it again (attempt %d of %d)", what, first_line(exc), attempt + 1, attempts)
            time.sleep(random.uniform(0.0, pause_s * attempt))
    raise AssertionError("unreachable")
