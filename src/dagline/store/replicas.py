"""What replicas read about each other's task instances: the tries a replica owns or its executor
tracks (`replica.adoption.reconcile_own_tries`), which replicas are alive, and the orphaned task instances
of dead or stopped replicas by host and executor (`dagline.scheduler.replica.adoption`). Reads only:
claiming orphans is `dagline.db.claims`'s, a replica's own row `dagline.db.replicas`'s."""

from __future__ import annotations

from sqlalchemy import func, or_, select
from sqlalchemy.engine import Connection

from dagline.db.models import dag_run_t, replica_t, ti_t
from dagline.domain.states import ReplicaState, TIState


def own_and_tracked_tries(conn: Connection, replica_id: int, tracked: set[int]) -> list:
    """Replica `replica_id`'s active task instances, and the current rows of the `tracked` ones (those
    its executor runs), in id order, with their run's version."""
    condition = (ti_t.c.queued_by_replica_id == replica_id) & ti_t.c.state.in_(TIState.ACTIVE)
    if tracked:
        condition = or_(condition, ti_t.c.id.in_(sorted(tracked)))
    return conn.execute(
        select(ti_t.c.id, ti_t.c.dag_run_id, ti_t.c.dag_id, ti_t.c.task_id, ti_t.c.try_number, ti_t.c.state,
               ti_t.c.max_tries, ti_t.c.queued_by_replica_id, dag_run_t.c.dag_version_id)
        .join(dag_run_t, dag_run_t.c.id == ti_t.c.dag_run_id).where(condition).order_by(ti_t.c.id)
    ).all()


def live_replicas(conn: Connection) -> set[tuple[str, str]]:
    """(hostname, executor) of every running replica."""
    return {(r.hostname, r.executor) for r in conn.execute(
        select(replica_t.c.hostname, replica_t.c.executor).where(replica_t.c.state == ReplicaState.RUNNING))}


def orphans_by_replica_kind(conn: Connection) -> list:
    """(hostname, executor, count) of the active task instances queued by dead or stopped replicas,
    ordered by host and executor."""
    replica = replica_t
    return conn.execute(
        select(replica.c.hostname, replica.c.executor, func.count())
        .select_from(ti_t.join(replica, replica.c.id == ti_t.c.queued_by_replica_id))
        .where(ti_t.c.state.in_(TIState.ACTIVE), replica.c.state.in_((ReplicaState.DEAD, ReplicaState.STOPPED)))
        .group_by(replica.c.hostname, replica.c.executor).order_by(replica.c.hostname, replica.c.executor)
    ).all()
