"""`dagline callbacks`: what the outbox holds (pending, delivered, failed), redelivering and pruning."""

from __future__ import annotations

import click

from dagline.cli.base import Context, Integer, json_option, main, make_clock, now_option, one_namespace, show_rows
from dagline.domain.states import OutboxState
from dagline.errors import InvalidInput
from dagline.times import isoformat, parse_duration


@main.group()
def callbacks():
    """Callback deliveries (webhooks, log lines, Kubernetes Events) in the outbox."""


@callbacks.command("list")
@click.option("--state", default=None, type=click.Choice([s.value for s in OutboxState]))
@click.option("--run", "run_ref", default=None, metavar="RUN_ID", help="Only this run's callbacks.")
@click.option("--limit", default=None, type=Integer(min=1), help="The newest N.")
@click.option("--namespace", default=None, metavar="NS", callback=one_namespace,
              help="Only the callbacks of this Kubernetes namespace's DAGs (a run of another is not found).")
@json_option
@click.pass_obj
def callbacks_list(obj: Context, state, run_ref, limit, namespace, as_json):
    """Callbacks, oldest first: `delivery_id, channel, event, dag_id, run_id, task_id, try_number, state,
    attempts, next_attempt_at, last_error, created_at, delivered_at`."""
    from dagline.db.outbox import list_deliveries
    from dagline.store.namespaces import namespace_dag_ids, require_in_namespace
    from dagline.store.runs import find_run

    with obj.db().begin() as conn:
        if namespace is not None and run_ref is not None:
            require_in_namespace(conn, namespace, run_ref=run_ref)
        run_pk = find_run(conn, run_ref).id if run_ref is not None else None
        dag_ids = namespace_dag_ids(conn, namespace) if namespace is not None else None
        rows = list_deliveries(conn, dag_run_id=run_pk, state=state, limit=limit, dag_ids=dag_ids)
    show_rows([{
        "delivery_id": r.delivery_id, "channel": r.channel, "event": r.event, "dag_id": r.dag_id,
        "run_id": r.payload.get("run_id"), "task_id": r.task_id, "try_number": r.payload.get("try_number"),
        "state": r.state, "attempts": r.attempts, "next_attempt_at": isoformat(r.next_attempt_at),
        "last_error": r.last_error, "created_at": isoformat(r.created_at), "delivered_at": isoformat(r.delivered_at),
    } for r in rows], ["delivery_id", "channel", "event", "dag_id", "task_id", "state", "attempts", "last_error"],
        as_json)


@callbacks.command("redeliver")
@click.argument("delivery_ids", nargs=-1, required=True)
@click.option("--namespace", default=None, metavar="NS", callback=one_namespace,
              help="Refuse (as not found, nothing redelivered) a callback of a DAG this Kubernetes "
                   "namespace does not own.")
@now_option
@click.pass_obj
def callbacks_redeliver(obj: Context, delivery_ids, namespace, now):
    """Send failed (or delivered) callbacks again, with the same delivery ids (e.g. once a webhook is fixed)."""
    from dagline.db.outbox import redeliver
    from dagline.store.namespaces import require_deliveries_in_namespace

    with obj.db().begin() as conn:
        if namespace is not None:
            require_deliveries_in_namespace(conn, list(delivery_ids), namespace)
        changed = redeliver(conn, list(delivery_ids), now=make_clock(now).now())
    missing = sorted(set(delivery_ids) - set(changed))
    click.echo(f"due again: {len(changed)}")
    if missing:
        click.echo(f"not failed or delivered (pending, or unknown): {', '.join(missing)}", err=True)


@callbacks.command("prune")
@click.option("--older-than", required=True, metavar="DURATION", help="ISO-8601 duration, e.g. P30D.")
@now_option
@click.pass_obj
def callbacks_prune(obj: Context, older_than, now):
    """Delete delivered and failed callbacks created more than DURATION ago (pending ones are kept)."""
    from dagline.db.outbox import prune

    try:
        age = parse_duration(older_than).as_timedelta()
    except ValueError as exc:
        raise InvalidInput(str(exc), field="--older-than") from None
    with obj.db().begin() as conn:
        count = prune(conn, before=make_clock(now).now() - age)
    click.echo(f"pruned {count} callback(s)")
