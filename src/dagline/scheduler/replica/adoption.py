"""Task instances whose replica is gone, and this replica's own tries: adopt, launch again, or settle.

A replica ends `stopped` (SIGTERM: its jobs keep running), or `dead`: a peer saw its heartbeat go
stale (`declare_stale_replicas_dead`, PostgreSQL), or, on SQLite, the next scheduler holds the file
lock that proves every earlier one is gone (`declare_others_dead`). The task instances it left
`queued` or `running` are orphans. On the housekeeping interval each live replica claims a batch of
them (`claims.claim_orphaned_tis`, SKIP LOCKED: one adopter per try; it becomes their
`queued_by_replica_id`) and hands them to its executor's `adopt`:
- a job still running is followed to its end, a finished one reports the outcome its wrapper wrote;
- a `queued` try that left no trace was never started: it is launched now, as the same try;
- a `running` try with no job behind it is a zombie: failed, or retried if it has tries left, with
  an event saying why.
A replica adopts only tries of replicas that used the same executor, and for a host-bound executor
(`local`: its jobs are processes of one machine, found through files and /proc) only those of
replicas on its own host. A replica on another host cannot tell whether such a job still runs, so it
never settles it: the tries wait for a replica on their host (a warning says so), and their
`executionTimeout` still holds (any replica enforces it; the job's wrapper stops the job itself).

`reconcile_own_tries` turns the same tools on the replica itself: the database and its executor
must agree on which tries it runs (see `tries`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Sequence

from sqlalchemy.engine import Connection

from dagline.db.claims import claim_orphaned_tis, claim_stale_replicas
from dagline.db.replicas import HOSTNAME, database_now, mark_all_others_dead
from dagline.db.transitions import fail_running_tries, record_events
from dagline.domain.states import ReplicaState, TIState
from dagline.executors.base import Executor, TaskKey, TaskLaunch
from dagline.scheduler.critical_section import QueuedTI
from dagline.scheduler.executor_events import fail_unlaunchable
from dagline.scheduler.launches import DEFAULT_API_URL, gather_launches, launch_records, render_launches
from dagline.scheduler.renderer import Renderer
from dagline.scheduler.replica.resilience import Transactions
from dagline.scheduler.tries import InFlight
from dagline.store.dags import DagCache
from dagline.store.launches import record_launches
from dagline.store.replicas import live_replicas, orphans_by_replica_kind, own_and_tracked_tries

log = logging.getLogger(__name__)


def declare_stale_replicas_dead(conn: Connection, *, replica_id: int, timeout_s: float, who: str,
                                now: dt.datetime | None = None) -> list:
    """Mark `dead` the replicas silent for `timeout_s` (database clock, `now` if the caller read it), each
    once, with an event."""
    now = now or database_now(conn)
    dead = claim_stale_replicas(conn, replica_id=replica_id, now=now, timeout_s=timeout_s)
    record_events(conn, [{
        "at": now, "who": who, "entity": "scheduler", "from_state": ReplicaState.RUNNING, "to_state": ReplicaState.DEAD,
        "detail": f"scheduler {r.id} (pid {r.pid} on {r.hostname}): no heartbeat since "
                  f"{r.latest_heartbeat.isoformat()}, {(now - r.latest_heartbeat).total_seconds():.0f}s "
                  f"(replica timeout {timeout_s:g}s)"} for r in dead])
    for r in dead:
        log.warning("scheduler %s (pid %s on %s) sent no heartbeat for %.0fs: declared dead; its task "
                    "instances will be adopted", r.id, r.pid, r.hostname, (now - r.latest_heartbeat).total_seconds())
    return dead


def declare_others_dead(conn: Connection, *, replica_id: int, who: str) -> list:
    """SQLite: this replica holds the scheduler file lock, so every other `running` one is gone."""
    dead = mark_all_others_dead(conn, replica_id)
    record_events(conn, [{
        "at": r.ended_at, "who": who, "entity": "scheduler",
        "from_state": ReplicaState.RUNNING, "to_state": ReplicaState.DEAD,
        "detail": f"scheduler {r.id} (pid {r.pid} on {r.hostname}): gone (a new scheduler holds the SQLite lock)"}
        for r in dead])
    return dead


@dataclasses.dataclass
class Settled:
    """What adoption decided: tries the executor now follows, tries to launch, zombies settled."""

    followed: list[TaskLaunch] = dataclasses.field(default_factory=list)
    to_launch: list[TaskLaunch] = dataclasses.field(default_factory=list)
    zombies: int = 0

    def __iadd__(self, other: Settled) -> Settled:
        self.followed += other.followed
        self.to_launch += other.to_launch
        self.zombies += other.zombies
        return self

    @property
    def count(self) -> int:
        return len(self.followed) + len(self.to_launch) + self.zombies


class Adopter:
    """Claims orphans and settles them for one replica (its id, executor, host, clock)."""

    def __init__(self, tx: Transactions, executor: Executor, *, dags: DagCache, replica_id: int, who: str,
                 batch: int, sqlite: bool, renderer: Renderer, api_url: str = DEFAULT_API_URL):
        self.tx = tx
        self.api_url = api_url
        self.renderer = renderer
        self.executor = executor
        self.dags = dags
        self.replica_id = replica_id
        self.who = who
        self.batch = batch
        self.sqlite = sqlite
        # On SQLite the one scheduler adopts everything; on PostgreSQL only what it can follow.
        self.only_executor = None if sqlite else executor.name
        self.only_host = None if sqlite or not executor.host_bound else HOSTNAME
        self._last_waiting: list = []

    def adopt_orphans(self, now: dt.datetime) -> Settled:
        """Claim and settle orphaned tries, batch by batch, until none is left that this replica can take."""
        result = Settled()
        while True:
            rows, pending = self.tx.run(lambda conn: self._claim(conn, now), what="claim orphaned task instances")
            if not rows:
                break
            launches = self._render(pending, now)
            result += self._settle(rows, launches, now, why="the scheduler that ran it ended")
            if len(rows) < self.batch:
                break
        if result.count:
            log.info("orphaned task instances: %s adopted, %s launched again, %s zombies failed or retried",
                     len(result.followed), len(result.to_launch), result.zombies)
        if not self.sqlite:
            self._warn_about_waiting_orphans()
        return result

    def reconcile_own_tries(self, in_flight: InFlight, now: dt.datetime) -> tuple[Settled, list[TaskKey]]:
        """Compare this replica's tries with the database. Returns what to do with the task instances the
        database says are this replica's but its executor does not run (settled like orphans), and the
        keys of tries to cancel because the database moved them on (timed out, cleared...)."""
        tries = in_flight.tries()
        rows = self.tx.run(lambda conn: _own_and_tracked(conn, self.replica_id, in_flight.ti_ids()),
                           what="reconcile own task instances")
        current = {(r.id, r.try_number) for r in rows if r.state in TIState.ACTIVE}
        cancel = [key for ti_try in tries if ti_try not in current
                  for key in [in_flight.to_cancel(ti_try)] if key is not None]
        for key in cancel:
            log.info("%s/%s/%s try %s is no longer running in the database: cancelling its job",
                     key.dag_id, key.run_id, key.task_id, key.try_number)
        unknown = [r for r in rows if r.queued_by_replica_id == self.replica_id and r.state in TIState.ACTIVE
                   and (r.id, r.try_number) not in in_flight]
        if not unknown:
            return Settled(), cancel
        log.warning("%d task instances of this scheduler were not followed by its executor (a launch or a "
                    "report was interrupted): adopting them", len(unknown))
        pending = self.tx.run(lambda conn: self._pending(conn, unknown, now), what="reconcile own task instances")
        launches = self._render(pending, now)
        return self._settle(unknown, launches, now, why="this scheduler lost track of it"), cancel

    # -- internals ------------------------------------------------------------------------------

    def _claim(self, conn: Connection, now: dt.datetime):
        rows = claim_orphaned_tis(conn, replica_id=self.replica_id, limit=self.batch, executor=self.only_executor,
                                  hostname=self.only_host)
        if not rows:
            return rows, []
        by_owner: dict[int | None, list] = {}
        for r in rows:
            by_owner.setdefault(r.previous_replica_id, []).append(r)
        record_events(conn, [{
            "at": now, "who": self.who, "entity": "scheduler",
            "detail": f"scheduler {self.replica_id} adopts {len(owned)} task instances of "
                      f"{'scheduler ' + str(owner) if owner is not None else 'no recorded scheduler'}: ids "
                      + ", ".join(str(r.id) for r in owned[:50]) + (" ..." if len(owned) > 50 else "")}
            for owner, owned in by_owner.items()])
        return rows, self._pending(conn, rows, now)

    def _pending(self, conn: Connection, rows: Sequence, now: dt.datetime):
        tis = [QueuedTI(r.id, r.dag_run_id, r.dag_id, r.task_id, r.try_number, r.dag_version_id) for r in rows]
        return gather_launches(conn, tis, dags=self.dags, now=now, api_url=self.api_url)

    def _render(self, pending, now: dt.datetime) -> list[TaskLaunch]:
        """Render outside any transaction; tries whose templates no longer render fail (in a transaction)."""
        rendered = render_launches(pending, self.renderer)
        if rendered.broken:
            def fail(conn):
                record_launches(conn, launch_records([], rendered.broken, at=now))
                return fail_unlaunchable(conn, rendered.broken, at=now, dags=self.dags, who=self.who)

            self.tx.run(fail, what="fail tries whose templates do not render")
        return rendered.launches

    def _settle(self, rows: Sequence, launches: list[TaskLaunch], now: dt.datetime, *, why: str) -> Settled:
        by_id = {r.id: r for r in rows}
        left = {launch.ti_id for launch in self.executor.adopt(launches)}
        followed = [launch for launch in launches if launch.ti_id not in left]
        to_launch = [launch for launch in launches
                     if launch.ti_id in left and by_id[launch.ti_id].state == TIState.QUEUED]
        zombies = [by_id[i] for i in sorted(left) if by_id[i].state == TIState.RUNNING]
        if zombies:
            self.tx.run(lambda conn: _settle_zombies(conn, zombies, now=now, who=self.who, why=why, dags=self.dags),
                        what="settle zombies")
        return Settled(followed, to_launch, len(zombies))

    def _warn_about_waiting_orphans(self) -> None:
        """Orphans no replica here can adopt (another host's local jobs, another executor's) wait: say so."""
        waiting = self.tx.run(lambda conn: _orphans_waiting_elsewhere(conn, self.executor.name, self.only_host),
                              what="count orphans")
        if waiting and waiting != self._last_waiting:
            for host, executor, count in waiting:
                log.warning("%d task instances of ended %s schedulers on %s wait for a live %s scheduler on that "
                            "host to adopt them (only it can tell whether their jobs still run); or clear them "
                            "with `dagline tasks clear`", count, executor, host, executor)
        self._last_waiting = waiting


def _settle_zombies(conn: Connection, zombies: Sequence, *, now: dt.datetime, who: str, why: str,
                    dags: DagCache) -> None:
    streaming = {z.id for z in zombies if dags.get(conn, z.dag_version_id).tasks[z.task_id].streaming}
    fail_running_tries(conn, zombies, at=now, who=who, detail=f"zombie: {why} and no job of this try was found",
                       streaming=streaming)


def _own_and_tracked(conn: Connection, replica_id: int, tracked: set[int]) -> list:
    """This replica's active task instances, and the current rows of the ones its executor runs."""
    return own_and_tracked_tries(conn, replica_id, tracked)


def _orphans_waiting_elsewhere(
    conn: Connection, executor: str, host_bound_to: str | None
) -> list[tuple[str, str, int]]:
    """(host, executor, count) of orphaned task instances that no live replica can adopt: none with their
    executor runs, or theirs is host-bound (as this replica's is) and none runs on their host."""
    live = live_replicas(conn)
    live_executors = {e for _, e in live}

    def adoptable(host: str, kind: str) -> bool:
        if kind == executor and host_bound_to is not None:
            return (host, kind) in live
        return kind in live_executors

    rows = orphans_by_replica_kind(conn)
    return [(r[0], r[1], r[2]) for r in rows if not adoptable(r[0], r[1])]
