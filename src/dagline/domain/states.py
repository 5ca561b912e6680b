"""The states and kinds the database stores, as enums: task instances, runs, backfills, replicas,
callback outbox rows and signal actions.

Each is an `enum.StrEnum`: a member is equal to (and hashes like) the string stored in the database, so
rows read back as plain strings compare with members, and members are written, formatted and
serialised as their strings. This is the vocabulary every layer shares (the dependency rules in
`dagline.domain.deps`, the database transitions and CHECK constraints, the scheduler, the CLI and the
Kubernetes mirror); `tests/unit/test_state_strings.py` keeps bare copies of it out of `src/`.
"""

from __future__ import annotations

import enum


class TIState(enum.StrEnum):
    """States of a task instance."""

    NONE = "none"
    SCHEDULED = "scheduled"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    UP_FOR_RETRY = "up_for_retry"
    UPSTREAM_FAILED = "upstream_failed"
    SKIPPED = "skipped"
    REMOVED = "removed"

    FINISHED = enum.nonmember(frozenset({SUCCESS, FAILED, UPSTREAM_FAILED, SKIPPED, REMOVED}))
    ACTIVE = enum.nonmember(frozenset({QUEUED, RUNNING}))  # hold pool slots


class RunState(enum.StrEnum):
    """States of a DAG run."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    OVERRIDDEN = "overridden"  # replaced on its timeline by a backfill's run

    FINISHED = enum.nonmember(frozenset({SUCCESS, FAILED}))
    ACTIVE = enum.nonmember(frozenset({QUEUED, RUNNING}))


class RunType(enum.StrEnum):
    """Why a DAG run exists."""

    SCHEDULED = "scheduled"
    MANUAL = "manual"
    BACKFILL = "backfill"
    SIGNAL = "signal"


class BackfillState(enum.StrEnum):
    """States of a backfill."""

    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


class Reprocess(enum.StrEnum):
    """Which logical dates that already have a run a backfill runs again."""

    NONE = "none"
    FAILED = "failed"
    COMPLETED = "completed"


class ReplicaState(enum.StrEnum):
    """States of a scheduler replica."""

    RUNNING = "running"
    STOPPED = "stopped"  # a graceful stop
    DEAD = "dead"  # marked by a peer that saw its heartbeat go stale


class OutboxState(enum.StrEnum):
    """States of a callback outbox row."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class SignalAction(enum.StrEnum):
    """What a signal makes happen: a DAG-level trigger, or a task rule's action."""

    TRIGGER = "trigger"
    START = "start"
    RESTART = "restart"
    STOP = "stop"


class SignalActionStatus(enum.StrEnum):
    """Where a signal action stands (a `start` or `restart` may wait for its task to be free)."""

    PENDING = "pending"
    DONE = "done"
    SUPERSEDED = "superseded"
    DROPPED = "dropped"
