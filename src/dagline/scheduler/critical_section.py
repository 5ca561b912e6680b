"""Loop step 4, the critical section: queue scheduled task instances within every limit.

When no task instance at all is `scheduled` it stops at that look, without locking anything. Else,
holding the pool rows (`NOWAIT`: if another replica holds them it is doing this very step; then
`PoolsBusy` leaves the transaction, which rolls back, and the loop queues nothing this round), it reads
the `scheduled` TIs by priority then logical date and what is queued or running (the facts of
`dagline.store.facts.gather_queueing`), and lets `dagline.domain.admission.admit` decide (a pure
function: each TI only if its pool has `poolSlots` free, its DAG is under `maxActiveTasks`, its task is
under `maxActiveTisPerDag`, and the executor has a free slot). Admitted TIs become `queued` with their
try number incremented; the loop launches them after this transaction commits. Queueing wakes no peer
(see `db.notify`), save when this replica's executor ran out of slots with task instances left: then its
peers are woken to queue the rest.

With `if_free` it runs inside a transaction that must go on whatever happens here (a signal
reaction queues the tries it made runnable in its own transaction: one commit, not two): the pool
rows are taken with `claims.lock_pools_if_free`, and if a peer holds any it returns None, queueing
nothing and leaving the transaction intact; the caller then tries again after its commit, as usual.
Such a caller has just scheduled task instances, so the first look is left out.

With `leave` (a replica leaving new work to a peer at work, see `replica.left_to_peer`), the task
instances it says so of are left scheduled for that peer to queue.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from sqlalchemy.engine import Connection

from dagline import metrics
from dagline.db.claims import lock_pools_if_free, lock_pools_nowait, lock_schedulable_tis
from dagline.db.notify import announce
from dagline.db.observe import at_commit
from dagline.db.transitions import NEXT_TRY, change_tis
from dagline.domain.admission import admit
from dagline.domain.states import TIState
from dagline.scheduler.isolation import describe, is_dags_fault, record_import_error
from dagline.store.dags import DagCache
from dagline.store.facts import any_scheduled, gather_queueing

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class QueuedTI:
    ti_id: int
    dag_run_id: int
    dag_id: str
    task_id: str
    try_number: int
    dag_version_id: int


_warned_pools: set[str] = set()


def queue_task_instances(
    conn: Connection, *, now: dt.datetime, dags: DagCache, who: str, replica_id: int | None,
    executor_slots: int, limit: int, backfill_id: int | None = None, test_run_id: int | None = None,
    if_free: bool = False, leave: Callable[[Any], bool] | None = None,
) -> list[QueuedTI] | None:
    if executor_slots <= 0:
        return []
    if if_free:
        pools = lock_pools_if_free(conn)
        if pools is None:
            return None  # a peer is here; this transaction goes on
    else:
        if not any_scheduled(conn):
            return []  # nothing anywhere to queue: a look, not the pool lock (which peers would then find busy)
        pools = lock_pools_nowait(conn)  # PoolsBusy: another replica is here; the caller rolls back
    candidates = lock_schedulable_tis(conn, limit, backfill_id, test_run_id)
    if leave is not None:
        candidates = [c for c in candidates if not leave(c)]
    if not candidates:
        return []

    def fault(dag_id: str, exc: Exception) -> None:  # that DAG queues nothing (see `isolation`)
        if not is_dags_fault(exc):
            raise exc
        record_import_error(conn, dag_id, describe(exc, "queueing task instances"), at=now, who=who)

    facts = gather_queueing(conn, candidates, pools=pools, dags=dags, executor_slots=executor_slots,
                            on_fault=fault)  # the facts `dagline tasks list` explains waits with
    decision = admit(facts.candidates, facts.load, facts.limits)
    for pool in sorted(decision.missing_pools - _warned_pools):
        _warned_pools.add(pool)
        log.warning("pool %r does not exist: its tasks wait until `dagline pools set %s N`", pool, pool)
    admitted = decision.admitted
    if not admitted:
        return []
    if len(admitted) >= executor_slots and len(admitted) < len(candidates):
        announce(conn, who, urgent=True)  # this executor is full now: a peer with free slots takes the rest
    version_of = {c.id: c.dag_version_id for c in candidates}
    changed = change_tis(
        conn, [c.ti_id for c in admitted], expected=TIState.SCHEDULED, to=TIState.QUEUED, at=now, who=who,
        values={"try_number": NEXT_TRY, "queued_at": now, "queued_by_replica_id": replica_id,
                "stop_requested_at": None},
    )
    ready_at = {c.id: c.scheduled_at for c in candidates}
    delays = [(now - ready_at[r.id]).total_seconds() for r in changed if ready_at[r.id] is not None]
    at_commit(conn, lambda: [metrics.TI_QUEUE_DELAY.observe(max(delay, 0.0)) for delay in delays])
    return [QueuedTI(r.id, r.dag_run_id, r.dag_id, r.task_id, r.try_number, version_of[r.id]) for r in changed]
