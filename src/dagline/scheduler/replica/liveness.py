"""This replica's liveness: its registration, its heartbeats, and the guard on its launches.

Heartbeats are written on the database's clock (`db.replicas`), never the replica's `--now`. A
replica whose heartbeat finds its row no longer `running` was declared dead by a peer, which has
adopted (or is adopting) its task instances: it raises `ReplicaFenced` and stops at once.

The launch guard (`check_before_launch`) closes the remaining gap: a replica that stalled (a long
pause, a partition from the database) might queue a try, be declared dead while stalled, and then
launch the try a peer has already launched again. Peers declare a replica dead only after
`replica_timeout_s` without a heartbeat, so a replica whose last heartbeat (by its own monotonic
clock) is younger than half that may launch; an older one heartbeats first, and launches only if it
is still alive.
"""

from __future__ import annotations

import datetime as dt
import logging
import time

from dagline.db import replicas
from dagline.db.notify import announce
from dagline.errors import OperationFailed
from dagline.scheduler.replica.resilience import Transactions

log = logging.getLogger(__name__)


class ReplicaFenced(OperationFailed):
    """Peers declared this replica dead (its heartbeat was stale): its work is theirs now."""


class Liveness:
    def __init__(self, tx: Transactions, *, executor: str, heartbeat_interval_s: float, timeout_s: float):
        self.tx = tx
        self.executor = executor
        self.heartbeat_interval_s = heartbeat_interval_s
        self.timeout_s = timeout_s
        self.replica_id: int | None = None
        self.last_beat: replicas.Beat | None = None
        self._last_ok = float("-inf")  # monotonic time of the last heartbeat that committed

    def register(self) -> int:
        self.replica_id, at = self.tx.run(lambda conn: replicas.register(conn, executor=self.executor),
                                      what="register the replica")
        self.last_beat = replicas.Beat(alive=True, at=at, alive_since=at)
        self._last_ok = time.monotonic()
        return self.replica_id

    def heartbeat_due(self) -> bool:
        return time.monotonic() - self._last_ok >= self.heartbeat_interval_s

    def beat(self) -> replicas.Beat:
        """Heartbeat now; raises `ReplicaFenced` if peers declared this replica dead."""
        started = time.monotonic()
        beat = self.tx.run(lambda conn: replicas.heartbeat(conn, self.replica_id, gap_s=self.timeout_s / 2),
                           what="heartbeat")
        if not beat.alive:
            raise ReplicaFenced(
                f"scheduler {self.replica_id} was declared dead by its peers (no heartbeat for "
                f"{self.timeout_s:g}s): stopping at once; they adopt its task instances")
        self.last_beat = beat
        self._last_ok = started  # conservative: the heartbeat happened no earlier than this
        return beat

    def may_judge_peers(self, now: dt.datetime) -> bool:
        """True once this replica has been alive without a break for a whole timeout (database clock):
        after an outage, every live peer has then had time to heartbeat again."""
        since = self.last_beat.alive_since if self.last_beat is not None else None
        return since is not None and (now - since).total_seconds() >= self.timeout_s

    def check_before_launch(self) -> None:
        """Make sure no peer can have declared this replica dead before the launch that follows."""
        if time.monotonic() - self._last_ok > self.timeout_s / 2:
            log.info("last heartbeat is old: heartbeating before launching")
            self.beat()

    def deregister(self, who: str) -> bool:
        """Record the graceful stop, and wake the peers: what this replica leaves is theirs now."""
        def leave(conn):
            left = replicas.deregister(conn, self.replica_id)
            announce(conn, who, urgent=True)
            return left

        return self.tx.run(leave, what="deregister")

