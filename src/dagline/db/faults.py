"""Which database errors are transient: worth a retry, never a reason for a replica to stop.

Two kinds, told apart because they are retried differently (see `dagline.scheduler.resilience`):
- conflicts: a serialization failure (40001) or a deadlock (40P01). PostgreSQL rolled the transaction
  back; running it again at once usually succeeds.
- outages: the connection was reset or terminated, the server is shutting down or starting up
  (57P01, 57P02, 57P03, class 08), the database cannot be reached (`OperationFailed` from
  `Database.begin`), SQLite is locked past its busy timeout. Retried after a backoff.
Anything else (a constraint violation, a bug) is not transient and is raised as it is.
"""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError

from dagline.errors import OperationFailed

CONFLICT_CODES = frozenset({"40001", "40P01"})
OUTAGE_CODES = frozenset({"57P01", "57P02", "57P03", "53300", "08000", "08001", "08003", "08004", "08006"})
_OUTAGE_MESSAGES = (
    "server closed the connection", "terminating connection", "connection already closed",
    "could not connect", "connection refused", "the database system is", "ssl connection has been closed",
    "connection timed out", "timeout expired", "no connection to the server", "database is locked",
    "cannot reach the database", "could not receive data", "could not send data", "connection reset",
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
        if isinstance(link, DBAPIError) and link.connection_invalidated:
            return True
        if isinstance(link, (DBAPIError, OperationFailed)) or type(link).__module__.startswith("psycopg2"):
            message = str(link).lower()
            if any(needle in message for needle in _OUTAGE_MESSAGES):
                return True
    return False
