"""What a deleted DAG, Backfill or Pool object undoes in the database, run after the object is gone.

dagline puts no finalizer on its objects (docs/adr/0083): deleting one never waits for an operator, so
uninstalling the operator (or deleting a namespace) leaves nothing stuck in Terminating. The database
catches up afterwards, from either of two places:
- the `DELETED` watch event (`handlers.remember`), while a replica runs;
- the listing (`k8s.listing`), for what no replica saw: a DAG or Pool whose object is gone is undone at
  the next replica's start and at every listing after (a Backfill is not: nothing stored names its object).

| kind | undone |
|---|---|
| DAG | its namespace's DAG deactivated (`dags.delete_dag_object`): no new runs, queued ones cancelled |
| Backfill | cancelled: its runs that have not started fail, running ones finish |
| Pool | its namespace's pool of its name removed |
| DagRun | nothing: the run keeps going |

Every step is idempotent (a second replica, or the listing after the event, writes nothing).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dagline.clock import Clock
from dagline.db.engine import Database
from dagline.k8s import backfills, dags, pools
from dagline.k8s.cache import ObjectCache

log = logging.getLogger(__name__)


def object_gone(db: Database, cache: ObjectCache, plural: str, body: Mapping[str, Any], *, clock: Clock,
                who: str) -> None:
    """Undo in the database what the deleted object `body` (its last state) had done there."""
    meta = body.get("metadata") or {}
    where = f"{meta.get('namespace')}/{meta.get('name')}"
    if plural == "dags":
        cancelled = dags.delete_dag_object(db, body, now=clock.now(), who=who)
        if cancelled is not None:
            log.info("DAG object %s deleted: DAG deactivated, %s queued runs cancelled; running runs finish",
                     where, cancelled)
    elif plural == "backfills":
        cancelled = backfills.cancel_backfill_object(db, body, now=clock.now(), who=who)
        if cancelled:
            log.info("Backfill object %s deleted: %s runs that had not started were failed", where, cancelled)
    elif plural == "pools":
        if pools.release_pool_object(db, body, now=clock.now(), who=who):
            log.info("Pool object %s deleted: its pool removed; what runs in it finishes", where)
