"""The namespace check of the CLI's `--namespace NS` on a show or an action (ADR 0050, issue 26): the DAG,
run or backfill named must belong to that namespace, or the command refuses it as not found (exit 1),
naming the namespace, before anything is written. A file's DAG (`dags apply`) belongs to no namespace."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.engine import Connection

from dagline.db.models import callback_outbox_t, dag_t
from dagline.errors import NotFound


def require_dag_in_namespace(conn: Connection, dag_id: str, namespace: str) -> None:
    """Refuse (NotFound) unless the stored DAG `dag_id` is owned by `namespace`."""
    owner = conn.execute(select(dag_t.c.namespace).where(dag_t.c.dag_id == dag_id)).first()
    if owner is None or owner.namespace != namespace:
        raise NotFound(f"unknown DAG {dag_id!r} in namespace {namespace!r} (see `dagline dags list "
                       f"--namespace {namespace}`)")


def require_in_namespace(conn: Connection, namespace: str, *, dag_id: str | None = None,
                         run_ref: str | None = None, backfill_id: int | None = None) -> None:
    """Refuse (NotFound) unless every object named (a DAG, a run by id or run id, a backfill) is of a DAG
    `namespace` owns."""
    from dagline.store.backfills import backfill_row
    from dagline.store.runs import find_run

    if dag_id is not None:
        require_dag_in_namespace(conn, dag_id, namespace)
    if run_ref is not None:
        run = find_run(conn, run_ref)
        try:
            require_dag_in_namespace(conn, run.dag_id, namespace)
        except NotFound:
            raise NotFound(f"unknown run {run_ref!r} in namespace {namespace!r} (see `dagline runs list "
                           f"--namespace {namespace}`)") from None
    if backfill_id is not None:
        row = backfill_row(conn, backfill_id)
        if row is not None:
            try:
                require_dag_in_namespace(conn, row.dag_id, namespace)
                return
            except NotFound:
                pass
        raise NotFound(f"unknown backfill {backfill_id} in namespace {namespace!r} (see `dagline backfill list "
                       f"--namespace {namespace}`)")


def namespace_dag_ids(conn: Connection, namespace: str) -> list[str]:
    """The ids of the DAGs `namespace` owns."""
    return list(conn.execute(select(dag_t.c.dag_id).where(dag_t.c.namespace == namespace)).scalars())


def require_deliveries_in_namespace(conn: Connection, delivery_ids: list[str], namespace: str) -> None:
    """Refuse (NotFound) a callback delivery of a DAG `namespace` does not own, naming the first one."""
    owned = set(namespace_dag_ids(conn, namespace))
    box = callback_outbox_t.c
    for delivery_id, dag_id in conn.execute(select(box.delivery_id, box.dag_id)
                                            .where(box.delivery_id.in_(delivery_ids)).order_by(box.id)):
        if dag_id not in owned:
            raise NotFound(f"unknown callback delivery {delivery_id!r} in namespace {namespace!r} (see "
                           f"`dagline callbacks list --namespace {namespace}`)")

