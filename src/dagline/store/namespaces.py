"""The namespace check of the CLI's `--namespace NS` on a show or an action (ADR 0050, ADR 92): the run
or backfill named must be of a DAG of that namespace, or the command refuses it as not found (exit 1),
naming the namespace, before anything is written. DAGs are named within their namespace (their key
carries it), so a DAG needs no check here."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.engine import Connection

from dagline.db.models import callback_outbox_t, dag_t
from dagline.domain import names
from dagline.errors import NotFound


def require_dag_in_namespace(conn: Connection, dag_id: str, namespace: str) -> None:
    """Refuse (NotFound) unless the stored DAG `dag_id` (a key) is `namespace`'s."""
    stored = conn.execute(select(dag_t.c.dag_id).where(dag_t.c.dag_id == dag_id)).first()
    if stored is None or names.namespace_of(dag_id) != namespace:
        raise NotFound(f"unknown DAG {names.name_of(dag_id)!r} in namespace {namespace!r} (see `dagline dags list "
                       f"--namespace {namespace}`)")


def require_in_namespace(conn: Connection, namespace: str, *, dag_id: str | None = None,
                         run_ref: str | None = None, backfill_id: int | None = None) -> None:
    """Refuse (NotFound) unless every object named (a DAG by key, a run by id or run id, a backfill) is of
    a DAG of `namespace`. A run id string is looked up among `namespace`'s runs only."""
    from dagline.store.backfills import backfill_row
    from dagline.store.runs import find_run

    if dag_id is not None:
        require_dag_in_namespace(conn, dag_id, namespace)
    if run_ref is not None:
        find_run(conn, run_ref, namespaces=[namespace])
    if backfill_id is not None:
        row = backfill_row(conn, backfill_id)
        if row is None or names.namespace_of(row.dag_id) != namespace:
            raise NotFound(f"unknown backfill {backfill_id} in namespace {namespace!r} (see `dagline backfill list "
                           f"--namespace {namespace}`)")


def namespace_dag_ids(conn: Connection, namespace: str) -> list[str]:
    """The keys of the DAGs of `namespace`."""
    return list(conn.execute(select(dag_t.c.dag_id).where(dag_t.c.namespace == namespace)).scalars())


def require_deliveries_in_namespace(conn: Connection, delivery_ids: list[str], namespace: str) -> None:
    """Refuse (NotFound) a callback delivery of a DAG of another namespace, naming the first one."""
    box = callback_outbox_t.c
    for delivery_id, dag_id in conn.execute(select(box.delivery_id, box.dag_id)
                                            .where(box.delivery_id.in_(delivery_ids)).order_by(box.id)):
        if names.namespace_of(dag_id) != namespace:
            raise NotFound(f"unknown callback delivery {delivery_id!r} in namespace {namespace!r} (see "
                           f"`dagline callbacks list --namespace {namespace}`)")
