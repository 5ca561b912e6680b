"""One bad DAG never stops the others: what goes wrong while the loop handles ONE DAG is that DAG's
import error, not the replica's crash.

A DAG's stored version may be unreadable by this dagline (a spec stored before a bound existed), its
timetable may raise (`ScheduleLoopError` when a search passes its step bound: a defect in the schedule
arithmetic for that DAG alone), a value may not fit a column: each phase handles such a DAG inside
`isolated(...)` (a savepoint: its half-done writes roll back, the phase's other work stays) or catches
the error where it only reads. `record_import_error` then stores why on the DAG's row
(`dag.import_error`, shown by `dagline dags list` / `dags show`) with an event, and takes the DAG off
the create-runs schedule (`next_dagrun_create_after` = NULL), so the loop does not stumble on it
every round; applying a version clears it (`dagstore.apply_dags`). It keeps the first error until
then, so a broken DAG met every loop causes no writes, events or wake-ups.

Database trouble (a conflict, a lost connection) is never a DAG's fault: it propagates, and the loop's
usual retry and backoff deal with it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Iterator

from sqlalchemy.engine import Connection

from dagline.db.faults import is_conflict, is_transient
from dagline.db.transitions import record_events
from dagline.errors import DaglineError
from dagline.store.dags import store_import_error

log = logging.getLogger(__name__)

MAX_MESSAGE = 2000


class DagFailed(DaglineError):
    """Handling one DAG failed; `isolated` recorded why (exit 1, 500: its cause may be anything)."""


def is_dags_fault(exc: BaseException) -> bool:
    """Whether an error raised while handling one DAG is that DAG's (not the database's or the process's)."""
    return isinstance(exc, Exception) and not is_conflict(exc) and not is_transient(exc)


def describe(exc: BaseException, doing: str) -> str:
    """`creating runs: ValueError: ...`, at most MAX_MESSAGE characters."""
    text = str(exc).strip()
    text = text if isinstance(exc, DaglineError) else f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    message = f"{doing}: {text}"
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 3] + "..."


def record_import_error(conn: Connection, dag_id: str, message: str, *, at: dt.datetime, who: str) -> bool:
    """Store why a DAG cannot be scheduled; returns whether anything changed. Only its first error is kept
    until an apply clears it: a DAG failing in several phases would otherwise rewrite it every loop."""
    changed = store_import_error(conn, dag_id, message, at=at)
    if changed:
        log.error("DAG %s cannot be scheduled: %s (the other DAGs go on; fix it and apply it again)", dag_id, message)
        record_events(conn, [{"at": at, "who": who, "entity": "dag", "dag_id": dag_id, "to_state": "import_error",
                              "detail": message}])
    return bool(changed)


@contextlib.contextmanager
def isolated(conn: Connection, dag_id: str, doing: str, *, at: dt.datetime, who: str) -> Iterator[None]:
    """Run the block for one DAG in a savepoint; if the DAG's handling fails, roll the block back, record
    the import error and raise `DagFailed` (the caller skips that DAG). Database trouble propagates."""
    try:
        with conn.begin_nested():
            yield
    except Exception as exc:
        if not is_dags_fault(exc):
            raise
        record_import_error(conn, dag_id, describe(exc, doing), at=at, who=who)
        raise DagFailed(dag_id) from exc
