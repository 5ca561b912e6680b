"""The errors dagline reports to people: each names its cause, and the CLI maps them to exit codes.

`InvalidInput` (exit 2) is bad usage or an invalid spec and names the offending field;
`OperationFailed` (exit 1) is a well-formed request that cannot be carried out.
Neither is raised after anything was written: callers validate first, then write in one transaction.
"""

from __future__ import annotations

import datetime as dt


class DaglineError(Exception):
    """Base class of the errors meant for a person to read."""

    exit_code = 1


class OperationFailed(DaglineError):
    """A valid request that cannot be done now (unknown id, unreachable database, locked SQLite...)."""

    exit_code = 1


class DatabaseUnreachable(OperationFailed):
    """The database cannot be reached now (down, restarting, refusing connections): an outage to wait out."""


class InvalidInput(DaglineError):
    """Bad usage or invalid input; `field` names what was wrong (e.g. ``spec.tasks[1].upstream``)."""

    exit_code = 2

    def __init__(self, message: str, *, field: str | None = None, source: str | None = None):
        self.field = field
        self.source = source
        self.reason = message
        parts = []
        if source:
            parts.append(source)
        if field:
            parts.append(field)
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class ScheduleLoopError(DaglineError):
    """A timetable's search for a fire took more steps than any real schedule needs (`timetable.MAX_STEPS`),
    or its walk stopped advancing: a defect in dagline's schedule arithmetic for this schedule, zone and
    instant. It is raised instead of spinning forever, so the scheduler records it as that DAG's import
    error and goes on with the others. `doing` ends with the instant's role ("the last fire before")."""

    exit_code = 1

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
