"""The errors dagline raises on purpose: each names its cause and says how every face answers it.

Every one derives from `DaglineError`, which carries two answers: `exit_code` for the CLI (1 a
failed operation, 2 bad usage or invalid input) and `http_status` for the API and the web UI (4xx
the caller's fault: 401 who are you, 403 not allowed, 404 no such thing, 409 a conflict, 413 too
large, 422 an invalid field; 5xx dagline's side: 502 something it called refused, 503 unavailable
now, try again). The CLI's, the API's and the web UI's handlers map errors by these two attributes,
never by a list of classes; `reason` is the message without its field, `field` the input at fault.

The families: `InvalidInput` (exit 2, 422) is bad usage or an invalid spec and names the offending
field; `OperationFailed` (exit 1, 409) is a well-formed request that cannot be carried out, with
`NotFound` (404) and `DatabaseUnreachable` (503) under it; `Unavailable` (exit 1, 503) is something
dagline needs that cannot answer now; `AccessRefused` (exit 1, 403; 401 without a valid token) is a
caller who may not do this. None is raised after anything was written: callers validate first, then
write in one transaction. Errors of `dagline.sdk` (users' jobs import it alone) are not here.
"""

from __future__ import annotations

import datetime as dt


class DaglineError(Exception):
    """Base class of the errors meant for a person to read. A subclass sets `exit_code` and `http_status`
    (or inherits them from its family); an error nobody classified is dagline's own failure: 1, 500."""

    exit_code = 1
    http_status = 500
    field: str | None = None
    """The input at fault (`--conf`, `[3].key`), where there is one."""

    @property
    def reason(self) -> str:
        """The message without the field's name in front: what an answer shows next to `field`."""
        return str(self)


class OperationFailed(DaglineError):
    """A valid request that cannot be done now (unknown id, unreachable database, locked SQLite...)."""

    exit_code = 1
    http_status = 409


class NotFound(OperationFailed):
    """No such thing: an unknown DAG, run, backfill, pool, signal or token."""

    http_status = 404


class DatabaseUnreachable(OperationFailed):
    """The database cannot be reached now (down, restarting, refusing connections): an outage to wait out."""

    http_status = 503


class Unavailable(DaglineError):
    """Something dagline needs cannot answer now (another replica holds a lock, the Kubernetes API is
    down, the replica is stopping): nothing was done, try again."""

    exit_code = 1
    http_status = 503


class AccessRefused(DaglineError):
    """The caller may not do this: a valid token without the scope, a form without its CSRF field."""

    exit_code = 1
    http_status = 403


class InvalidInput(DaglineError):
    """Bad usage or invalid input; `field` names what was wrong (e.g. ``spec.tasks[1].upstream``)."""

    exit_code = 2
    http_status = 422

    def __init__(self, message: str, *, field: str | None = None, source: str | None = None):
        self.field = field
        self.source = source
        self._reason = message
        parts = []
        if source:
            parts.append(source)
        if field:
            parts.append(field)
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)

    @property
    def reason(self) -> str:
        return self._reason


class ScheduleLoopError(OperationFailed):
    """A timetable's search for a fire took more steps than any real schedule needs (`timetable.MAX_STEPS`),
    or its walk stopped advancing: a defect in dagline's schedule arithmetic for this schedule, zone and
    instant. It is raised instead of spinning forever, so the scheduler records it as that DAG's import
    error and goes on with the others. `doing` ends with the instant's role ("the last fire before")."""

    def __init__(self, *, schedule: str | None, timezone: str, instant: dt.datetime, doing: str, problem: str,
                 dag_id: str | None = None):
        self.schedule = schedule
        self.timezone = timezone
        self.instant = instant
        self.dag_id = dag_id
        whose = f"DAG {dag_id}: " if dag_id else ""
        super().__init__(
            f"{whose}schedule {schedule!r} in {timezone}: {doing} {instant.isoformat()} {problem}; this is a "
            f"defect in dagline's timetable (please report it with this message)")
