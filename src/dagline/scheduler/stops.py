"""Which of this replica's tries were asked to stop (`task_instance.stop_requested_at`, set by a
stop or restart signal, `dagline tasks stop` or `dagline runs stop`). The loop cancels each once
through its executor: a cooperative stop (SIGTERM to the job's process group, the task's
`stopGracePeriod`, then SIGKILL; on Kubernetes, deleting the SparkApplication). How the stopped try
ends is decided when its report arrives (`executor_events`)."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy.engine import Connection

from dagline.store.tries import tries_asked_to_stop


def tries_to_stop(conn: Connection, mine: Mapping[tuple[int, int], object]) -> list[tuple[int, int]]:
    """(ti id, try number) of the tries in `mine` that are still on that try, queued or running, and
    asked to stop. One indexed look-up by primary key per call."""
    found = []
    pairs = list(mine)
    for start in range(0, len(pairs), 500):
        chunk = pairs[start:start + 500]
        found += [(r.id, r.try_number) for r in tries_asked_to_stop(conn, chunk)]
    return found
