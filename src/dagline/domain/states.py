"""The states a task instance and a DAG run move through, as the strings the database stores.

Plain constants with no behaviour: the vocabulary every layer shares (the dependency rules in
`dagline.domain.deps`, the database transitions, the scheduler, the CLI and the Kubernetes mirror).
"""

from __future__ import annotations


class TIState:
    """States of a task instance (stored as these strings)."""

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

    FINISHED = frozenset({SUCCESS, FAILED, UPSTREAM_FAILED, SKIPPED, REMOVED})
    ACTIVE = frozenset({QUEUED, RUNNING})  # hold pool slots


class RunState:
    """States of a DAG run (stored as these strings)."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCESS = "success"
    FAILED = "failed"
    OVERRIDDEN = "overridden"

    FINISHED = frozenset({SUCCESS, FAILED})
    ACTIVE = frozenset({QUEUED, RUNNING})
