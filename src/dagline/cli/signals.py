"""`dagline signals` (send, list, show, prune) and the stop commands `dagline tasks stop` and
`dagline runs stop`. Contract: shared/CLI.md; the model: README "Signals"."""

from __future__ import annotations

import getpass
import json

import click

from dagline.cli.base import (
    Context,
    Integer,
    emit_json,
    in_namespace,
    json_option,
    main,
    make_clock,
    now_option,
    one_namespace,
    print_table,
    run_timezone,
)
from dagline.cli.state import runs, tasks
from dagline.domain.names import qualify
from dagline.errors import InvalidInput, NotFound
from dagline.wording import counted


def person() -> str:
    """The source of a signal sent from this command line."""
    try:
        return f"user:{getpass.getuser()}"
    except Exception:  # noqa: BLE001 - no user name in this environment
        return "user:unknown"


@main.group()
def signals():
    """Signals: named events with a JSON value that start, stop and restart work at once."""


signal_namespace_option = click.option(
    "--namespace", default=None, metavar="NS", callback=one_namespace,
    help="Only the signals sent in this namespace; another namespace's is not found. Default: every namespace.")


def _within(namespace: str | None) -> list[str] | None:
    return None if namespace is None else [namespace]


@signals.command("send")
@click.argument("key")
@click.option("--value", "value_text", default=None, metavar="JSON", help="The value, as JSON (default: null).")
@click.option("--id", "sender_id", default=None, metavar="ID",
              help="Your id for this signal: sending the same key and id again is the same signal.")
@click.option("--namespace", default=None, metavar="NS", callback=one_namespace,
              help="Send in this namespace (default: default): its DAGs react, and other namespaces' only where "
                   "DAGLINE_SIGNAL_EXPORTS exports the key to them. Ids are per namespace.")
@now_option
@json_option
@click.pass_obj
def signals_send(obj: Context, key, value_text, sender_id, namespace, now, as_json):
    """Store a signal in namespace NS; prints its seq. Warns when no DAG's rule would act on KEY."""
    from dagline.domain.names import DEFAULT_NAMESPACE
    from dagline.domain.signal_keys import parse_value
    from dagline.scheduler.settings import exports_from_env
    from dagline.store.signals import listeners, send_signal

    value = parse_value(value_text, field="--value") if value_text is not None else None
    namespace = namespace or DEFAULT_NAMESPACE
    exports = exports_from_env()  # as the scheduler reads it: an error names the variable
    at = make_clock(now).now()
    with obj.db().begin() as conn:
        seq, created = send_signal(conn, key, value, sender_id=sender_id, source=person(), now=at,
                                   namespace=namespace)  # a conflict: 1
        listening = listeners(conn, key, namespace=namespace, exports=exports)
    if as_json:
        emit_json({"seq": seq, "created": created, "key": key, "listeners": listening, "namespace": namespace})
    else:
        click.echo(seq)
    if not created:
        click.echo(f"signal {key!r} with id {sender_id!r} was already sent (seq {seq}): nothing new", err=True)
    if not listening:
        click.echo(f"warning: no DAG listens to {key!r}: the signal is stored, nothing acts on it", err=True)


@signals.command("list")
@click.option("--key", default=None, help="Only signals of this key.")
@click.option("--since", type=Integer(min=0), default=None, metavar="SEQ", help="Only signals after this seq.")
@click.option("--limit", type=Integer(min=1), default=100, show_default=True, help="The newest N.")
@signal_namespace_option
@json_option
@click.pass_obj
def signals_list(obj: Context, key, since, limit, namespace, as_json):
    """Signals in seq order, each with what it caused."""
    from dagline.store.signals import list_signals

    with obj.db().begin() as conn:
        rows = list_signals(conn, key=key, since=since, limit=limit, namespaces=_within(namespace))
    if as_json:
        emit_json(rows)
        return
    from dagline.cli.display import for_people

    shown = for_people([{**r, "value": _short(r["value"]), "actions": _summary(r)} for r in rows], "UTC")
    print_table(shown, ["seq", "namespace", "key", "value", "id", "source", "sent_at", "actions"])


@signals.command("show")
@click.argument("seq", type=Integer(min=0))
@signal_namespace_option
@json_option
@click.pass_obj
def signals_show(obj: Context, seq, namespace, as_json):
    """One signal and every action it caused (or why nothing)."""
    from dagline.store.signals import show_signal

    with obj.db().begin() as conn:
        try:
            row = show_signal(conn, seq, namespaces=_within(namespace))
        except NotFound:
            if namespace is None:
                raise
            raise NotFound(f"no signal with seq {seq} sent in namespace {namespace!r}") from None
    if as_json:
        emit_json(row)
        return
    from dagline.cli.display import for_people, local_time

    for name in ("seq", "key", "namespace", "id", "source", "sent_at", "handled_at"):
        value = local_time(row[name], "UTC") if name.endswith("_at") else row[name]
        click.echo(f"{name}: {'' if value is None else value}")
    click.echo(f"value: {json.dumps(row['value'])}")
    if row["actions"]:
        click.echo("actions:")
        print_table(for_people(row["actions"], "UTC"), ["rule", "namespace", "dag_id", "run_id", "task_id", "action",
                                                        "status", "try_number", "decided_at", "detail"])
    else:
        click.echo(f"actions: none ({row['why_nothing']})")


@signals.command("prune")
@click.option("--older-than", "older_than", required=True, metavar="DURATION",
              help="ISO-8601 duration, e.g. P30D: signals sent longer ago than this are deleted.")
@now_option
@click.pass_obj
def signals_prune(obj: Context, older_than, now):
    """Delete old signals and their action rows (unhandled and pending ones are kept)."""
    from dagline.store.signals import prune
    from dagline.times import parse_duration

    try:
        duration = parse_duration(older_than)
    except ValueError as exc:
        raise InvalidInput(str(exc), field="--older-than") from None
    at = make_clock(now).now()
    with obj.db().begin() as conn:
        deleted = prune(conn, older_than=at - duration)
    click.echo(f"deleted {deleted} signal(s) sent before {(at - duration).isoformat()}")


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _summary(row) -> str:
    if not row["actions"]:
        return f"({row['why_nothing']})"
    return ", ".join(f"{a['action']} {qualify(a['namespace'], a['dag_id'])}/{a['run_id']}"
                     + (f"/{a['task_id']}" if a["task_id"] else "")
                     + (f" try {a['try_number']}" if a["try_number"] else "") + f" [{a['status']}]"
                     for a in row["actions"])


@tasks.command("stop")
@click.argument("run_ref", metavar="RUN_ID")
@click.argument("task_id")
@now_option
@in_namespace
@click.pass_obj
def tasks_stop(obj: Context, run_ref, task_id, now):
    """Stop a task's running try (a streaming try ends success, a batch try failed, no retry)."""
    from dagline.store.runs import stop_task

    clock = make_clock(now, run_timezone(obj.db(), run_ref) if now else "UTC")  # in the DAG's zone
    click.echo(stop_task(obj.db(), run_ref, task_id, now=clock.now()))


@runs.command("stop")
@click.argument("run_ref", metavar="RUN_ID")
@now_option
@in_namespace
@click.pass_obj
def runs_stop(obj: Context, run_ref, now):
    """Stop a run: its running tries are asked to stop, the tasks that have not started are skipped, and the
    run ends failed once its tries have stopped (`backfill --reprocess failed` takes it again). To end a
    streaming run cleanly, stop its streaming tasks with `tasks stop` instead."""
    from dagline.store.runs import stop_run

    clock = make_clock(now, run_timezone(obj.db(), run_ref) if now else "UTC")  # in the DAG's zone
    stopping, skipped = stop_run(obj.db(), run_ref, now=clock.now())
    click.echo(f"stopping {counted(len(stopping), 'try', 'tries')}: {', '.join(stopping) or '-'}; "
               f"skipped {len(skipped)}: {', '.join(skipped) or '-'}")
