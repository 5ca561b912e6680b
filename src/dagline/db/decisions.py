"""The decision log: one structured line per decision worth knowing, written once it is committed.

`transitions.record_events` hands every event row to `note(conn, rows)`; the rows that are decisions
(a run created, started or finished; a task instance queued, ended, retried, timed out or found a
zombie; task instances adopted; a replica declared dead; a deadline missed) are kept on the connection
and logged by the `dagline.decisions` logger when the transaction commits, and dropped if it rolls
back (`observe.at_commit`), so the log never tells of a decision the database does not hold. The logger is off (WARNING)
unless `--log-format json` turned it on (`dagline.logformat`): then nothing is even collected.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.engine import Connection

from dagline.db.observe import at_commit
from dagline.domain.states import ReplicaState, RunState, TIState
from dagline.times import isoformat

log = logging.getLogger("dagline.decisions")
log.setLevel(logging.WARNING)  # on with --log-format json


def kind_of(row: Mapping[str, Any]) -> str | None:
    """Which decision an event row is (None: not one worth a line)."""
    entity, before, after = row.get("entity"), row.get("from_state"), row.get("to_state")
    detail = row.get("detail") or ""
    if entity == "dag_run":
        if before is None:
            return "run_created"
        return {RunState.RUNNING: "run_started", RunState.SUCCESS: "run_finished",
                RunState.FAILED: "run_finished"}.get(after)
    if entity == "task_instance":
        if after == TIState.QUEUED:
            return "ti_queued"
        if detail.startswith("timed out"):
            return "timeout"
        if detail.startswith("zombie"):
            return "zombie"
        if after in (TIState.SUCCESS, TIState.FAILED, TIState.UP_FOR_RETRY, TIState.UPSTREAM_FAILED):
            return "ti_finished"
        return None
    if entity == "scheduler":
        if " adopts " in detail:
            return "adoption"
        if after == ReplicaState.DEAD:
            return "replica_dead"
        return None
    if entity == "deadline":
        return "deadline_missed"
    return None


def note(conn: Connection, rows: Sequence[Mapping[str, Any]]) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    kept = [(kind, dict(row)) for row in rows if (kind := kind_of(row)) is not None]
    if kept:
        at_commit(conn, lambda: _log(kept))


def _log(kept) -> None:
    for kind, row in kept:
        fields = {"decision": kind, "dag_id": row.get("dag_id"), "dag_run_id": row.get("dag_run_id"),
                  "task_id": row.get("task_id"), "try_number": row.get("try_number"),
                  "from_state": row.get("from_state"), "to_state": row.get("to_state"), "who": row.get("who"),
                  "at": isoformat(row.get("at")), "detail": row.get("detail")}
        fields = {k: v for k, v in fields.items() if v is not None}
        what = kind.replace("_", " ")
        subject = " ".join(str(part) for part in (row.get("dag_id"), row.get("dag_run_id"), row.get("task_id"))
                           if part is not None)
        log.info("%s: %s%s", what, subject, f" ({row['detail']})" if row.get("detail") else "",
                 extra={"decision": kind, "fields": fields})

