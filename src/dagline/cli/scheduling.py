"""`dagline scheduler` and `dagline backfill`: running replicas, and backfilling the past."""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys

import click

from dagline.cli.base import (
    Context,
    Integer,
    dag_key,
    dag_timezone,
    dag_timezones,
    emit_json,
    executor_option,
    in_namespace,
    json_option,
    limit_option,
    log_folder_option,
    main,
    make_cli_executor,
    make_clock,
    make_spanning_clock,
    namespace_option,
    now_option,
    parallelism_option,
    print_table,
    read_conf,
    show_rows,
)
from dagline.domain import names
from dagline.domain.states import BackfillState, Reprocess
from dagline.errors import NotFound, OperationFailed
from dagline.limits import MAX_ROW_ID
from dagline.times import isoformat


@main.command("scheduler", retry_conflicts=False)
@executor_option
@parallelism_option
@click.option("--until-idle", is_flag=True, help="Return once nothing is runnable or running.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one JSON object per line, and a line per decision (run created, task queued, ...).")
@click.option("--metrics-port", type=Integer(0, 65535), default=None,
              help="Serve Prometheus metrics on this port at /metrics (0: any free port; default: none).")
@log_folder_option
@now_option
@click.pass_obj
def scheduler_cmd(obj: Context, executor, parallelism, until_idle, log_format, metrics_port, log_folder, now):
    """Run one scheduler replica.

    SIGTERM or Ctrl-C stops it gracefully: it finishes the step it is in, queues nothing more, records
    itself stopped and leaves its running jobs running, for another replica (or the next start) to
    adopt. A second Ctrl-C stops it at once. Still busy in a step DAGLINE_SCHEDULER_STOP_GRACE_S
    (25 s) after the first, it exits at once (code 143), its jobs left for a peer to adopt."""
    logging.getLogger("dagline.scheduler").setLevel(logging.INFO)  # say what it does, even without -v
    logging.getLogger("dagline.domain.callbacks").setLevel(logging.INFO)  # `log` callbacks are this log's lines
    from dagline import logformat
    from dagline.scheduler.deliveries import CallbackSettings
    from dagline.scheduler.loop import Scheduler
    from dagline.scheduler.settings import SchedulerSettings
    from dagline.scheduler.stop_deadline import StopDeadline

    clock = make_spanning_clock(now)  # before anything is set up: a refused --now leaves nothing changed
    logformat.configure(log_format)
    settings = SchedulerSettings.from_env()
    database = obj.db()
    sched = Scheduler(database, make_cli_executor(executor, parallelism, log_folder, clock), clock=clock,
                      settings=settings, callback_settings=CallbackSettings.from_env(),
                      api_url=os.environ.get("DAGLINE_API_URL"))  # handed on to every try
    server = None
    if metrics_port is not None:
        from dagline import metrics
        from dagline.store.read_models import database_collector

        metrics.watch_database(database_collector(database))
        try:
            server = metrics.serve(metrics_port)
        except OSError as exc:
            raise OperationFailed(f"--metrics-port {metrics_port}: cannot serve metrics there: "
                                  f"{exc.strerror or exc}") from exc
        click.echo(f"metrics on http://0.0.0.0:{server.server_port}/metrics", err=True)

    deadline = StopDeadline(settings.stop_grace_s, "the scheduler replica")

    def graceful(signum, _frame):
        if signum == signal.SIGINT and sched.stop_requested:
            raise KeyboardInterrupt  # a second Ctrl-C: stop now (jobs keep running all the same)
        sched.request_stop()
        deadline.start()  # a step that keeps it busy past the grace period ends the process

    previous = {sig: signal.signal(sig, graceful) for sig in (signal.SIGTERM, signal.SIGINT)}
    gc.freeze()  # start-up objects (modules, SQLAlchemy) leave the collector's scans: full collections stay cheap
    try:
        sched.run(until_idle=until_idle)
    except KeyboardInterrupt:
        click.echo("interrupted: stopped", err=True)
    finally:
        deadline.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if server is not None:
            server.shutdown()
    if until_idle and sched.replica_id is not None:
        _report_failed_runs(obj.db(), sched.who)
        if clock.frozen and not sched.stop_requested:
            _report_frozen_retries(obj.db(), clock.now())


def _report_failed_runs(database, who: str) -> None:
    """`--until-idle`: exit 1, saying why, when a run this replica finished ended failed."""
    from dagline.store.read_models import run_failures, runs_failed_by

    with database.begin() as conn:
        failed = runs_failed_by(conn, who)
        if failed:
            reasons = run_failures(conn, run_pks=failed)
    if failed:
        raise OperationFailed(f"{len(failed)} run(s) failed:\n  " + "\n  ".join(reasons)
                              + "\n(see `dagline tasks list RUN_ID` and `dagline tasks logs`)")


def _report_frozen_retries(database, now) -> None:
    """`--until-idle --now`: exit 1, saying what waits and until when, when a try waits for a retry time
    the frozen clock never reaches (the runs are left running: nothing more happens by waiting)."""
    from dagline.store.read_models import pending_retries

    with database.begin() as conn:
        waiting = [r for r in pending_retries(conn, limit=50)
                   if r.next_retry_at is not None and r.next_retry_at > now][:5]
    if waiting:
        raise OperationFailed("work is left that the frozen clock never reaches:\n  " + "\n  ".join(
            f"run {r.run_id}: task {r.task_id} waits for its retry at {r.next_retry_at.isoformat()}; "
            f"the clock is frozen at --now {now.isoformat()}" for r in waiting)
            + "\n(run again with a later --now, or without --now)")


@main.group()
def backfill():
    """Reprocess ranges of the past as runs on the timeline."""


def _backfill_options(f):
    for option in reversed([
        click.argument("dag_id"),
        click.option("--start", required=True, metavar="ISO", help="First logical date (included)."),
        click.option("--end", required=True, metavar="ISO", help="Last logical date (included)."),
        click.option("--reprocess", type=click.Choice([r.value for r in Reprocess]), default=Reprocess.NONE.value,
                     show_default=True, help="Which existing runs to replace."),
        click.option("--max-active-runs", type=Integer(), default=None, help="Runs of this backfill at once."),
        click.option("--run-backwards", is_flag=True, help="Newest logical dates first."),
        click.option("--dry-run", is_flag=True, help="Print the plan, write nothing."),
        click.option("--request-id", default=None, help="Idempotency key: the same id never creates twice."),
        click.option("--conf", default=None, metavar="JSON", help="Conf of every run created (overrides params)."),
        click.option("--conf-file", "conf_file", default=None, metavar="PATH",
                     help="A file holding the conf as a JSON object (instead of --conf)."),
        json_option,
        now_option,
    ]):
        f = option(f)
    return f


def _create_backfill(obj: Context, dag_id, start, end, reprocess, max_active_runs, run_backwards, dry_run,
                     request_id, conf, conf_file, now_value):
    from dagline.store.backfills import create_backfill, resolve_range

    database = obj.db()
    first, last = resolve_range(start, end, dag_timezone(database, dag_id))  # `--end 2026-03-07`: all that day
    return create_backfill(
        database, dag_id, start=first, end=last, now=now_value,
        reprocess=reprocess, max_active_runs=max_active_runs, run_backwards=run_backwards, dry_run=dry_run,
        request_id=request_id, conf=read_conf(conf, conf_file),
    )


def _print_plan(result, as_json: bool, timezone: str = "UTC") -> None:
    entries = [{"logical_date": isoformat(e.logical_date), "data_interval_start": isoformat(e.data_interval.start),
                "data_interval_end": isoformat(e.data_interval.end), "action": e.action,
                "existing_run_id": e.existing_run_id, "existing_state": e.existing_state}
               for e in result.plan.entries]
    if as_json:
        emit_json({"backfill_id": result.backfill_id, "created": result.created, "runs": entries})
        return
    from dagline.cli.display import for_people

    print_table(for_people(entries, timezone), ["logical_date", "action", "existing_run_id", "existing_state"])
    plan = result.plan
    summary = (f"{plan.count('create')} to create, {plan.count('replace')} to replace, "
               f"{plan.count('keep_existing')} kept, {plan.count('keep_active')} still active, "
               f"{plan.count('not_due')} not due yet")
    if result.backfill_id is None:
        click.echo(f"dry run: {summary}; nothing written")
    elif result.created:
        click.echo(f"backfill {result.backfill_id}: {summary}")
    else:
        click.echo(f"backfill {result.backfill_id} exists for this request id: nothing new created")


@backfill.command("create")
@_backfill_options
@in_namespace
@click.pass_obj
def backfill_create(obj: Context, dag_id, start, end, reprocess, max_active_runs, run_backwards, dry_run,
                    request_id, conf, conf_file, as_json, now):
    """Plan and insert backfill runs for every interval whose logical date lies in [start, end]."""
    result = _create_backfill(obj, dag_id, start, end, reprocess, max_active_runs, run_backwards, dry_run,
                              request_id, conf, conf_file, make_clock(now, dag_timezone(obj.db(), dag_id)).now())
    _print_plan(result, as_json, dag_timezone(obj.db(), dag_id))


@backfill.command("run", retry_conflicts=False)
@_backfill_options
@executor_option
@parallelism_option
@log_folder_option
@in_namespace
@click.pass_obj
def backfill_run(obj: Context, dag_id, start, end, reprocess, max_active_runs, run_backwards, dry_run, request_id,
                 conf, conf_file, as_json, now, executor, parallelism, log_folder):
    """Create a backfill, then run a scheduler for its runs until they finish, with a progress bar."""
    from dagline.cli.progress import ProgressBar, retry_words
    from dagline.scheduler.loop import Scheduler
    from dagline.scheduler.replica.guard import SchedulerLock
    from dagline.store.backfills import backfill_row
    from dagline.store.read_models import backfill_dict, backfill_task_counts, pending_retries, run_failures

    clock = make_clock(now, dag_timezone(obj.db(), dag_id))
    if not dry_run:  # another scheduler on the SQLite file would stop this one: say so before writing anything
        SchedulerLock(obj.db()).check()
    result = _create_backfill(obj, dag_id, start, end, reprocess, max_active_runs, run_backwards, dry_run,
                              request_id, conf, conf_file, clock.now())
    _print_plan(result, as_json, dag_timezone(obj.db(), dag_id))
    if result.backfill_id is None:
        return
    database = obj.db()

    def status():
        with database.begin() as conn:
            row = backfill_row(conn, result.backfill_id)
            retries = pending_retries(conn, row.id, limit=1)
            note = retry_words(retries[0], clock.now()) if retries else None
            return backfill_dict(conn, row), backfill_task_counts(conn, row.id), note

    bar = ProgressBar(sys.stderr)
    sched = Scheduler(database, make_cli_executor(executor, parallelism, log_folder, clock), clock=clock,
                      backfill_id=result.backfill_id, api_url=os.environ.get("DAGLINE_API_URL"))
    signal.signal(signal.SIGTERM, lambda *_: sched.request_stop())
    state = {"last": None}

    def on_loop(_stats):
        state["last"], tasks, note = status()
        bar.update(state["last"], tasks, note)

    sched.run(until_idle=True,
              should_stop=lambda: state["last"] is not None and state["last"]["state"] != BackfillState.RUNNING,
              on_loop=on_loop)
    final, tasks, note = status()
    bar.finish(final, tasks)
    if final["failed"]:
        with database.begin() as conn:
            reasons = run_failures(conn, backfill_id=final["id"])
        raise OperationFailed(f"backfill {final['id']}: {final['failed']} of {final['total']} runs failed:\n  "
                              + "\n  ".join(reasons) + f"\n(see `dagline runs list {dag_id} --state failed` and "
                              "`dagline tasks logs`)")
    if final["state"] == BackfillState.RUNNING:
        why = (f"{note} but the clock is frozen by --now" if note and clock.frozen else
               "stopped before they finished" if sched.stop_requested else
               "a limit, a pool or dependsOnPast holds them; `dagline tasks list RUN_ID` says why")
        raise OperationFailed(f"backfill {final['id']} stopped with runs still waiting "
                              f"({final['queued']} queued, {final['running']} running): {why}")


@backfill.command("list")
@click.option("--dag", "dag_id", default=None, metavar="DAG_ID", help="Only this DAG's backfills.")
@namespace_option
@limit_option
@json_option
@click.pass_obj
def backfill_list(obj: Context, dag_id, namespace, limit, as_json):
    """Backfills and their progress, oldest first; `--limit N`: the latest N."""
    from dagline.store.read_models import list_backfills

    if dag_id is not None:
        dag_id = dag_key(dag_id, namespace, field="--dag")
    with obj.db().begin() as conn:
        rows = list_backfills(conn, dag_id, namespace=namespace)
        zones = dag_timezones(conn, [r["dag_id"] for r in rows])
    show_rows(rows, ["id", "dag_id", "from_date", "to_date", "reprocess", "state", "total", "queued", "running",
                     "succeeded", "failed", "skipped_existing", "overridden"], as_json, limit=limit, latest=True,
              timezones=zones)


@backfill.command("show")
@click.argument("backfill_id", type=Integer(min=0, max=MAX_ROW_ID))
@json_option
@in_namespace
@click.pass_obj
def backfill_show(obj: Context, backfill_id, as_json):
    """One backfill and its runs."""
    from dagline.store.backfills import backfill_row
    from dagline.store.read_models import backfill_dict, list_runs

    with obj.db().begin() as conn:
        row = backfill_row(conn, backfill_id)
        if row is None:
            raise NotFound(f"unknown backfill {backfill_id} (see `dagline backfill list`)")
        data = backfill_dict(conn, row)
        data["runs"] = list_runs(conn, backfill_id=backfill_id)
        data["namespace"] = names.namespace_of(data["dag_id"])  # last: order kept
    if as_json:
        emit_json(data)
        return
    for key, value in data.items():
        if key != "runs":
            click.echo(f"{key}: {value}")
    from dagline.cli.display import for_people

    print_table(for_people(data["runs"], dag_timezone(obj.db(), data["dag_id"])),
                ["id", "run_id", "state", "logical_date", "start_date", "end_date", "duration"])


@backfill.command("cancel")
@click.argument("backfill_id", type=Integer(min=0, max=MAX_ROW_ID))
@now_option
@in_namespace
@click.pass_obj
def backfill_cancel(obj: Context, backfill_id, now):
    """Cancel a backfill: runs not yet started are failed; running ones finish."""
    from dagline.store.backfills import cancel_backfill

    n = cancel_backfill(obj.db(), backfill_id, now=make_clock(now).now())
    click.echo(f"backfill {backfill_id}: cancelled ({n} runs not started were failed)")


