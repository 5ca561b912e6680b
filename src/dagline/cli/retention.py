"""`dagline db clean`: delete finished history in batches (`dagline.store.retention` says what stays)."""

from __future__ import annotations

from pathlib import Path

import click

from dagline.cli.base import Context, confirm, dag_key, emit_json, json_option, make_clock, now_option, one_namespace
from dagline.cli.dags import db
from dagline.errors import InvalidInput


@db.command("clean")
@click.option("--older-than", "older_than", required=True, metavar="DURATION",
              help="ISO-8601 duration, e.g. P90D: finished runs that ended longer ago than this are deleted.")
@click.option("--dag", "dag_id", default=None, metavar="DAG_ID", help="Only this DAG's runs.")
@click.option("--namespace", default=None, metavar="NS", callback=one_namespace,
              help="With --dag: the namespace of that DAG (default: default). "
                   "Needs --dag (retention cleans one DAG or all).")
@click.option("--keep-last", default=1, show_default=True, type=click.IntRange(min=1),
              help="Keep each DAG's latest N runs on its timeline, however old.")
@click.option("--archive", type=click.Path(file_okay=False, path_type=Path), default=None, metavar="DIR",
              help="Append every deleted row to DIR/<table>.jsonl first.")
@click.option("--dry-run", is_flag=True, help="Print what would be deleted; delete nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask first.")
@json_option
@now_option
@click.pass_obj
def db_clean(obj: Context, older_than, dag_id, namespace, keep_last, archive, dry_run, yes, as_json, now):
    """Delete finished runs older than DURATION with their task instances, events, callbacks, signal
    actions, and handled signals, in small batches (each its own short transaction). Never a run that
    is queued or running, each DAG's latest run(s), the `previous` of a run not finished, runs of a
    running backfill, nor a run with a callback to deliver. The oldest run kept has no `previous`."""
    from dagline.store.dags import require_dag
    from dagline.store.retention import clean_history
    from dagline.times import parse_duration

    try:
        age = parse_duration(older_than)
    except ValueError as exc:
        raise InvalidInput(str(exc), field="--older-than") from None
    at = make_clock(now).now()
    cutoff = at - age
    if namespace is not None and dag_id is None:
        raise InvalidInput("--namespace needs --dag: history is cleaned for one DAG or for all; name the "
                           "namespace's DAG to clean (see `dagline dags list --namespace NS`)", field="--namespace")
    database = obj.db()
    if dag_id is not None:
        dag_id = dag_key(dag_id, namespace, field="--dag")
        with database.begin() as conn:
            require_dag(conn, dag_id, active=False)
    if not dry_run and not yes:
        found = clean_history(database, before=cutoff, now=at, dag_id=dag_id, keep_last=keep_last, dry_run=True)
        if found.runs or found.signals:
            confirm(f"delete {found.describe()} that ended before {cutoff.isoformat()}?", yes=yes,
                    refusal="not cleaning")
    cleaned = clean_history(database, before=cutoff, now=at, dag_id=dag_id, keep_last=keep_last,
                            archive=archive, dry_run=dry_run)
    if as_json:
        emit_json({"before": cutoff.isoformat(), "dry_run": dry_run, **cleaned.as_dict()})
        return
    verb = "would delete" if dry_run else "deleted"
    click.echo(f"{verb} {cleaned.describe()} that ended before {cutoff.isoformat()}")
