"""Loop step 4, the critical section: queue scheduled task instances within every limit.

Holding the pool rows (`NOWAIT`: if another replica holds them it is doing this very step; then
`PoolsBusy` leaves the transaction, which rolls back, and the loop queues nothing this round), it
reads the `scheduled` TIs by priority then logical date and what is queued or running, and lets
`dagline.admission.admit` decide (a pure function: each TI only if its pool has `poolSlots` free,
its DAG is under `maxActiveTasks`, its task is under `maxActiveTisPerDag`, and the executor has a
free slot). Admitted TIs become `queued` with their try number incremented; the loop launches them
after this transaction commits.
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import logging

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from dagline import metrics
from dagline.admission import Candidate, Limits, Load, admit
from dagline.dagstore import DagCache
from dagline.db.claims import lock_pools_nowait, lock_schedulable_tis
from dagline.db.models import ti_t
from dagline.db.observe import at_commit
from dagline.db.transitions import change_tis
from dagline.states import TIState

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
    conn: Connection, *, now: dt.datetime, dags: DagCache, who: str, job_id: int | None,
    executor_slots: int, limit: int, backfill_id: int | None = None, test_run_id: int | None = None,
) -> list[QueuedTI]:
    if executor_slots <= 0:
        return []
    pools = lock_pools_nowait(conn)  # PoolsBusy: another replica is here; the caller rolls back
    candidates = lock_schedulable_tis(conn, limit, backfill_id, test_run_id)
    if not candidates:
        return []
    pool_used: collections.Counter = collections.Counter()
    dag_active: collections.Counter = collections.Counter()
    task_active: collections.Counter = collections.Counter()
    for pool, dag_id, task_id, count, slots in conn.execute(  # what queued and running TIs hold, in one read
        select(ti_t.c.pool, ti_t.c.dag_id, ti_t.c.task_id, func.count(), func.sum(ti_t.c.pool_slots))
        .where(ti_t.c.state.in_(TIState.ACTIVE)).group_by(ti_t.c.pool, ti_t.c.dag_id, ti_t.c.task_id)
    ):
        pool_used[pool] += slots or 0
        dag_active[dag_id] += count
        task_active[(dag_id, task_id)] += count
    current = {c.dag_id: c.current_version_id or c.dag_version_id for c in candidates}  # maxActiveTasks: current spec
    versions = dags.get_many(conn, {c.dag_version_id for c in candidates} | set(current.values()))
    max_active_tasks = {dag_id: versions[version].spec.max_active_tasks for dag_id, version in current.items()}

    decision = admit(
        [Candidate(c.id, c.dag_id, c.task_id, c.pool, c.pool_slots,
                   versions[c.dag_version_id].tasks[c.task_id].max_active_tis_per_dag) for c in candidates],
        Load(pool_used=pool_used, dag_active=dag_active, task_active=task_active),
        Limits(pool_slots=pools, max_active_tasks=max_active_tasks, executor_slots=executor_slots),
    )
    for pool in sorted(decision.missing_pools - _warned_pools):
        _warned_pools.add(pool)
        log.warning("pool %r does not exist: its tasks wait until `dagline pools set %s N`", pool, pool)
    admitted = decision.admitted
    if not admitted:
        return []
    version_of = {c.id: c.dag_version_id for c in candidates}
    changed = change_tis(
        conn, [c.ti_id for c in admitted], expected=TIState.SCHEDULED, to=TIState.QUEUED, at=now, who=who,
        values={"try_number": ti_t.c.try_number + 1, "queued_at": now, "queued_by_job_id": job_id},
    )
    ready_at = {c.id: c.scheduled_at for c in candidates}
    delays = [(now - ready_at[r.id]).total_seconds() for r in changed if ready_at[r.id] is not None]
    at_commit(conn, lambda: [metrics.TI_QUEUE_DELAY.observe(max(delay, 0.0)) for delay in delays])
    return [QueuedTI(r.id, r.dag_run_id, r.dag_id, r.task_id, r.try_number, version_of[r.id]) for r in changed]
