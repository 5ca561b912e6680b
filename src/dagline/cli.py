"""The `dagline` command (contract: shared/CLI.md). Thin: parse, call the core, print.

Exit status: 0 ok, 1 a failed operation, 2 bad usage or invalid input. Errors go to stderr as one
paragraph naming the cause; every command validates before it writes, and writes in one transaction.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import signal
import sys

import click
from sqlalchemy import select

from dagline.clock import FixedClock, SystemClock
from dagline.db import engine as dbengine
from dagline.db.models import backfill_t, dag_t, dag_version_t, ti_t
from dagline.errors import DaglineError, InvalidInput, OperationFailed
from dagline.times import isoformat, parse_instant


# -- plumbing --------------------------------------------------------------------------------------

class Context:
    def __init__(self, db_url: str | None):
        self.db_url = db_url
        self._db = None

    def db(self, *, check_schema: bool = True):
        if self._db is None:
            self._db = dbengine.open_database(self.db_url, check_schema=check_schema)
        return self._db


def _clock(now: str | None):
    if now is None:
        return SystemClock()
    try:
        return FixedClock(parse_instant(now, "UTC"))
    except ValueError as exc:
        raise InvalidInput(str(exc), field="--now") from None


def _instant(value: str | None, field: str, timezone: str = "UTC") -> dt.datetime | None:
    if value is None:
        return None
    try:
        return parse_instant(value, timezone)
    except ValueError as exc:
        raise InvalidInput(str(exc), field=field) from None


def _is_plain_date(value: str) -> bool:
    try:
        dt.date.fromisoformat(value.strip())
        return len(value.strip()) == 10
    except ValueError:
        return False


def _dag_timezone(db, dag_id: str) -> str:
    with db.begin() as conn:
        tz = conn.execute(select(dag_t.c.timezone).where(dag_t.c.dag_id == dag_id)).scalar()
    return tz or "UTC"


def _log_folder(value: str | None) -> str:
    return os.path.abspath(value or os.environ.get("DAGLINE_LOG_FOLDER") or "logs")


def _emit_json(rows) -> None:
    click.echo(json.dumps(rows, indent=2))


def _table(rows: list[dict], columns: list[str]) -> None:
    if not rows:
        click.echo("(none)")
        return
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    click.echo("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip())
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


class DaglineGroup(click.Group):
    """Maps dagline's errors to their exit codes with a one-paragraph message."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DaglineError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)


now_option = click.option("--now", "now", default=None, metavar="ISO-8601",
                          help="Act as if it were this instant (default: the wall clock).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group(cls=DaglineGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", "db_url", default=None, metavar="URL",
              help="Database URL (default: $DAGLINE_DB_URL, else sqlite:///dagline.db).")
@click.option("-v", "--verbose", is_flag=True, help="Log what the scheduler does.")
@click.version_option(package_name="dagline")
@click.pass_context
def main(ctx, db_url, verbose):
    """dagline: schedules DAGs of PySpark jobs, retries them, and backfills the past on one timeline."""
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    ctx.obj = Context(db_url)


# -- db --------------------------------------------------------------------------------------------

@main.group()
def db():
    """The database schema."""


@db.command("upgrade")
@click.pass_obj
def db_upgrade(obj: Context):
    """Create or migrate the schema (idempotent)."""
    database = obj.db(check_schema=False)
    before, after = dbengine.upgrade(database)
    where = dbengine.redact(database.url)
    click.echo(f"schema at {after} (was {before or 'empty'}) on {where}" if before != after
               else f"schema already at {after} on {where}")


# -- dags ------------------------------------------------------------------------------------------

@main.group()
def dags():
    """Apply, inspect, pause and trigger DAGs."""


@dags.command("apply")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@now_option
@click.pass_obj
def dags_apply(obj: Context, paths, now):
    """Load DAG spec files or folders; a new version only when a spec changed."""
    from dagline.dagstore import apply_dags
    from dagline.spec import load_dag_paths

    loaded = load_dag_paths(list(paths))  # validates everything before anything is written
    results = apply_dags(obj.db(), loaded, now=_clock(now).now())
    for r in results:
        if r.action == "unchanged":
            click.echo(f"{r.dag_id}: unchanged (version {r.version})")
        elif r.action == "created":
            click.echo(f"{r.dag_id}: created (version {r.version})")
        else:
            click.echo(f"{r.dag_id}: {r.action} (version {r.previous_version} -> {r.version})")
        for warning in r.warnings:
            click.echo(f"{r.dag_id}: warning: {warning}", err=True)


@dags.command("list")
@json_option
@click.pass_obj
def dags_list(obj: Context, as_json):
    """The DAGs, their schedule and where they stand."""
    from dagline.queries import list_dags

    with obj.db().begin() as conn:
        rows = list_dags(conn)
    if as_json:
        _emit_json(rows)
    else:
        _table(rows, ["dag_id", "paused", "schedule", "timezone", "version", "next_run_after", "last_run_state"])


@dags.command("show")
@click.argument("dag_id")
@json_option
@click.pass_obj
def dags_show(obj: Context, dag_id, as_json):
    """The stored spec and versions of a DAG."""
    from dagline.dagstore import require_dag

    with obj.db().begin() as conn:
        row = require_dag(conn, dag_id, active=False)
        versions = conn.execute(
            select(dag_version_t).where(dag_version_t.c.dag_id == dag_id).order_by(dag_version_t.c.id)).all()
    current = next(v for v in versions if v.id == row.current_version_id)
    data = {
        "dag_id": dag_id, "active": row.is_active, "paused": row.is_paused, "version": current.version,
        "source_path": row.source_path, "next_dagrun": isoformat(row.next_dagrun),
        "next_run_after": isoformat(row.next_dagrun_create_after or row.next_dagrun_data_interval_end),
        "versions": [{"version": v.version, "created_at": isoformat(v.created_at), "current": v.id == current.id}
                     for v in versions],
        "spec": current.spec,
    }
    if as_json:
        _emit_json(data)
        return
    import yaml

    click.echo(f"dag_id: {dag_id}\nactive: {row.is_active}\npaused: {row.is_paused}\nsource: {row.source_path}")
    click.echo(f"next run: {data['next_dagrun']} (created after {data['next_run_after']})")
    click.echo("versions:")
    for v in data["versions"]:
        click.echo(f"  {v['version']}  {v['created_at']}{'  (current)' if v['current'] else ''}")
    click.echo("spec:")
    click.echo("  " + yaml.safe_dump(current.spec, sort_keys=False).replace("\n", "\n  ").rstrip())


@dags.command("next-runs")
@click.argument("dag_ref")
@click.option("--after", default=None, metavar="ISO", help="Start from the first interval starting at or after this.")
@click.option("--count", default=5, show_default=True, type=click.IntRange(min=1))
@json_option
@click.pass_obj
def dags_next_runs(obj: Context, dag_ref, after, count, as_json):
    """The intervals the scheduler would create next, in order."""
    from dagline.spec import load_dag_paths
    from dagline.timeline import latest_schedule_end, timetable_for

    if os.path.exists(dag_ref):
        loaded = load_dag_paths([dag_ref])
        if len(loaded) != 1:
            raise InvalidInput(f"{dag_ref} holds {len(loaded)} DAGs; give one file or a DAG id", field="DAG_ID_OR_FILE")
        dag, latest_end = loaded[0].dag, None
    else:
        from dagline.dagstore import DagCache, require_dag

        with obj.db().begin() as conn:
            require_dag(conn, dag_ref)
            _, dag = DagCache().current(conn, dag_ref)
            latest_end = latest_schedule_end(conn, dag_ref)
    table = timetable_for(dag)
    cursor = _instant(after, "--after", dag.timezone) if after else latest_end
    rows = []
    info = table.next_run(cursor, catchup=True)
    while info is not None and len(rows) < count:
        rows.append({"logical_date": isoformat(info.logical_date),
                     "data_interval_start": isoformat(info.data_interval.start),
                     "data_interval_end": isoformat(info.data_interval.end), "run_after": isoformat(info.run_after)})
        if not table.periodic:
            break
        info = table.next_run(info.data_interval.end, catchup=True)
    if as_json:
        _emit_json(rows)
    else:
        _table(rows, ["logical_date", "data_interval_start", "data_interval_end", "run_after"])


@dags.command("pause")
@click.argument("dag_id")
@now_option
@click.pass_obj
def dags_pause(obj: Context, dag_id, now):
    """Stop creating and starting runs of a DAG (running tasks finish)."""
    from dagline.dagstore import set_paused

    changed = set_paused(obj.db(), dag_id, True, now=_clock(now).now())
    click.echo(f"{dag_id}: paused" if changed else f"{dag_id}: already paused")


@dags.command("unpause")
@click.argument("dag_id")
@now_option
@click.pass_obj
def dags_unpause(obj: Context, dag_id, now):
    """Resume a paused DAG."""
    from dagline.dagstore import set_paused

    changed = set_paused(obj.db(), dag_id, False, now=_clock(now).now())
    click.echo(f"{dag_id}: unpaused" if changed else f"{dag_id}: already active")


@dags.command("trigger")
@click.argument("dag_id")
@click.option("--logical-date", default=None, metavar="ISO", help="Default: now.")
@click.option("--conf", default=None, metavar="JSON", help="The run's conf, a JSON object.")
@now_option
@click.pass_obj
def dags_trigger(obj: Context, dag_id, logical_date, conf, now):
    """Create a manual run; prints its run id."""
    from dagline.runs import trigger_run

    database = obj.db()
    conf_value = _json_object(conf, "--conf")
    when = _instant(logical_date, "--logical-date", _dag_timezone(database, dag_id))
    run = trigger_run(database, dag_id, now=_clock(now).now(), logical_date=when, conf=conf_value)
    click.echo(run.run_id)


# -- scheduler -------------------------------------------------------------------------------------

executor_option = click.option("--executor", type=click.Choice(["local", "noop", "spark-k8s"]), default="local",
                               show_default=True)
parallelism_option = click.option("--parallelism", type=click.IntRange(min=1), default=2, show_default=True,
                                  help="Tries the executor runs at once.")
log_folder_option = click.option("--log-folder", default=None, metavar="DIR",
                                 help="Task logs (default: $DAGLINE_LOG_FOLDER, else ./logs).")


def _make_executor(name, parallelism, log_folder, clock):
    from dagline.executors import make_executor

    if name == "spark-k8s":
        raise InvalidInput("the spark-k8s executor runs inside the Kubernetes operator, which is not part of this "
                           "build yet; use local or noop", field="--executor")
    return make_executor(name, parallelism=parallelism, log_folder=_log_folder(log_folder), clock=clock)


@main.command("scheduler")
@executor_option
@parallelism_option
@click.option("--until-idle", is_flag=True, help="Return once nothing is runnable or running.")
@log_folder_option
@now_option
@click.pass_obj
def scheduler_cmd(obj: Context, executor, parallelism, until_idle, log_folder, now):
    """Run one scheduler replica."""
    from dagline.scheduler.loop import Scheduler
    from dagline.scheduler.settings import SchedulerSettings

    clock = _clock(now)
    sched = Scheduler(obj.db(), _make_executor(executor, parallelism, log_folder, clock), clock=clock,
                      settings=SchedulerSettings.from_env())
    signal.signal(signal.SIGTERM, lambda *_: sched.request_stop())
    try:
        sched.run(until_idle=until_idle)
    except KeyboardInterrupt:
        click.echo("interrupted: stopped", err=True)


# -- backfill --------------------------------------------------------------------------------------

@main.group()
def backfill():
    """Reprocess ranges of the past as runs on the timeline."""


def _backfill_options(f):
    for option in reversed([
        click.argument("dag_id"),
        click.option("--start", required=True, metavar="ISO", help="First logical date (included)."),
        click.option("--end", required=True, metavar="ISO", help="Last logical date (included)."),
        click.option("--reprocess", type=click.Choice(["none", "failed", "completed"]), default="none",
                     show_default=True, help="Which existing runs to replace."),
        click.option("--max-active-runs", type=int, default=None, help="Runs of this backfill at once."),
        click.option("--run-backwards", is_flag=True, help="Newest logical dates first."),
        click.option("--dry-run", is_flag=True, help="Print the plan, write nothing."),
        click.option("--request-id", default=None, help="Idempotency key: the same id never creates twice."),
        click.option("--conf", default=None, metavar="JSON", help="Conf of every run created (overrides params)."),
        json_option,
        now_option,
    ]):
        f = option(f)
    return f


def _json_object(value: str | None, field: str) -> dict | None:
    if value is None:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"not valid JSON: {exc}", field=field) from None


def _create_backfill(obj: Context, dag_id, start, end, reprocess, max_active_runs, run_backwards, dry_run,
                     request_id, conf, now_value):
    from dagline.backfill import create_backfill

    database = obj.db()
    tz = _dag_timezone(database, dag_id)
    end_instant = _instant(end, "--end", tz)
    if _is_plain_date(end):  # `--end 2026-03-07` includes the whole of that day
        end_instant = _instant((dt.date.fromisoformat(end.strip()) + dt.timedelta(days=1)).isoformat(), "--end", tz)
        end_instant -= dt.timedelta(microseconds=1)
    return create_backfill(
        database, dag_id, start=_instant(start, "--start", tz), end=end_instant, now=now_value,
        reprocess=reprocess, max_active_runs=max_active_runs, run_backwards=run_backwards, dry_run=dry_run,
        request_id=request_id, conf=_json_object(conf, "--conf"),
    )


def _print_plan(result, as_json: bool) -> None:
    entries = [{"logical_date": isoformat(e.logical_date), "data_interval_start": isoformat(e.data_interval.start),
                "data_interval_end": isoformat(e.data_interval.end), "action": e.action,
                "existing_run_id": e.existing_run_id, "existing_state": e.existing_state}
               for e in result.plan.entries]
    if as_json:
        _emit_json({"backfill_id": result.backfill_id, "created": result.created, "runs": entries})
        return
    _table(entries, ["logical_date", "action", "existing_run_id", "existing_state"])
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
@click.pass_obj
def backfill_create(obj: Context, dag_id, start, end, reprocess, max_active_runs, run_backwards, dry_run,
                    request_id, conf, as_json, now):
    """Plan and insert backfill runs for every interval whose logical date lies in [start, end]."""
    result = _create_backfill(obj, dag_id, start, end, reprocess, max_active_runs, run_backwards, dry_run,
                              request_id, conf, _clock(now).now())
    _print_plan(result, as_json)


@backfill.command("run")
@_backfill_options
@executor_option
@parallelism_option
@log_folder_option
@click.pass_obj
def backfill_run(obj: Context, dag_id, start, end, reprocess, max_active_runs, run_backwards, dry_run, request_id,
                 conf, as_json, now, executor, parallelism, log_folder):
    """Create a backfill, then run a scheduler for its runs until they finish, with a progress bar."""
    from dagline.progress import ProgressBar
    from dagline.queries import backfill_dict, backfill_task_counts
    from dagline.scheduler.loop import Scheduler

    clock = _clock(now)
    result = _create_backfill(obj, dag_id, start, end, reprocess, max_active_runs, run_backwards, dry_run,
                              request_id, conf, clock.now())
    _print_plan(result, as_json)
    if result.backfill_id is None:
        return
    database = obj.db()

    def status():
        with database.begin() as conn:
            row = conn.execute(select(backfill_t).where(backfill_t.c.id == result.backfill_id)).one()
            return backfill_dict(conn, row), backfill_task_counts(conn, row.id)

    bar = ProgressBar(sys.stderr)
    sched = Scheduler(database, _make_executor(executor, parallelism, log_folder, clock), clock=clock,
                      backfill_id=result.backfill_id)
    signal.signal(signal.SIGTERM, lambda *_: sched.request_stop())
    state = {"last": None}

    def on_loop(_stats):
        state["last"], tasks = status()
        bar.update(state["last"], tasks)

    sched.run(until_idle=True, should_stop=lambda: state["last"] is not None and state["last"]["state"] != "running",
              on_loop=on_loop)
    final, tasks = status()
    bar.finish(final, tasks)
    if final["failed"]:
        raise OperationFailed(f"backfill {final['id']}: {final['failed']} of {final['total']} runs failed "
                              f"(see `dagline runs list {dag_id} --state failed` and `dagline tasks logs`)")
    if final["state"] == "running":
        raise OperationFailed(f"backfill {final['id']} stopped with runs still waiting "
                              f"({final['queued']} queued, {final['running']} running): a limit, a pool or "
                              "dependsOnPast holds them; `dagline runs grid` shows where")


@backfill.command("list")
@click.option("--dag", "dag_id", default=None)
@json_option
@click.pass_obj
def backfill_list(obj: Context, dag_id, as_json):
    """Backfills and their progress."""
    from dagline.queries import list_backfills

    with obj.db().begin() as conn:
        rows = list_backfills(conn, dag_id)
    if as_json:
        _emit_json(rows)
    else:
        _table(rows, ["id", "dag_id", "from_date", "to_date", "reprocess", "state", "total", "queued", "running",
                      "succeeded", "failed", "skipped_existing", "overridden"])


@backfill.command("show")
@click.argument("backfill_id", type=int)
@json_option
@click.pass_obj
def backfill_show(obj: Context, backfill_id, as_json):
    """One backfill and its runs."""
    from dagline.queries import backfill_dict, list_runs

    with obj.db().begin() as conn:
        row = conn.execute(select(backfill_t).where(backfill_t.c.id == backfill_id)).first()
        if row is None:
            raise OperationFailed(f"unknown backfill {backfill_id} (see `dagline backfill list`)")
        data = backfill_dict(conn, row)
        data["runs"] = list_runs(conn, backfill_id=backfill_id)
    if as_json:
        _emit_json(data)
        return
    for key, value in data.items():
        if key != "runs":
            click.echo(f"{key}: {value}")
    _table(data["runs"], ["id", "run_id", "state", "start_date", "end_date"])


@backfill.command("cancel")
@click.argument("backfill_id", type=int)
@now_option
@click.pass_obj
def backfill_cancel(obj: Context, backfill_id, now):
    """Cancel a backfill: runs not yet started are failed; running ones finish."""
    from dagline.backfill import cancel_backfill

    n = cancel_backfill(obj.db(), backfill_id, now=_clock(now).now())
    click.echo(f"backfill {backfill_id}: cancelled ({n} runs not started were failed)")


# -- runs and tasks --------------------------------------------------------------------------------

@main.group()
def runs():
    """DAG runs."""


@runs.command("list")
@click.argument("dag_id", required=False)
@click.option("--state", default=None, type=click.Choice(["queued", "running", "success", "failed", "overridden"]))
@json_option
@click.pass_obj
def runs_list(obj: Context, dag_id, state, as_json):
    """Runs in logical-date order."""
    from dagline.dagstore import require_dag
    from dagline.queries import list_runs

    with obj.db().begin() as conn:
        if dag_id is not None:
            require_dag(conn, dag_id, active=False)
        rows = list_runs(conn, dag_id, state)
    if as_json:
        _emit_json(rows)
    else:
        _table(rows, ["id", "dag_id", "run_id", "run_type", "state", "previous_run_id", "dag_version", "backfill_id"])


@runs.command("grid")
@click.argument("dag_id")
@click.option("--limit", default=30, show_default=True, type=click.IntRange(min=1))
@click.option("--color/--no-color", default=None, help="Default: colour on a terminal.")
@click.pass_obj
def runs_grid(obj: Context, dag_id, limit, color):
    """A terminal grid: runs as columns, tasks as rows, coloured by state."""
    from dagline.dagstore import DagCache, require_dag
    from dagline.grid import render_grid
    from dagline.queries import list_runs

    with obj.db().begin() as conn:
        require_dag(conn, dag_id, active=False)
        _, dag = DagCache().current(conn, dag_id)
        run_rows = [r for r in list_runs(conn, dag_id) if r["state"] != "overridden"][-limit:]
        tis: dict[int, dict[str, str]] = {}
        for row in conn.execute(select(ti_t.c.dag_run_id, ti_t.c.task_id, ti_t.c.state)
                                .where(ti_t.c.dag_run_id.in_([r["id"] for r in run_rows]))):
            tis.setdefault(row.dag_run_id, {})[row.task_id] = row.state
    use_color = sys.stdout.isatty() if color is None else color
    click.echo(render_grid(dag_id, dag.timezone, run_rows, tis, list(dag.tasks), color=use_color))


@main.group()
def tasks():
    """Task instances of a run."""


@tasks.command("list")
@click.argument("run_ref", metavar="RUN_ID")
@json_option
@click.pass_obj
def tasks_list(obj: Context, run_ref, as_json):
    """The task instances of a run."""
    from dagline.queries import list_tasks
    from dagline.runs import find_run

    with obj.db().begin() as conn:
        rows = list_tasks(conn, find_run(conn, run_ref).id)
    if as_json:
        _emit_json(rows)
    else:
        _table(rows, ["task_id", "state", "try_number", "max_tries", "pool", "start_date", "end_date", "external_id"])


@tasks.command("clear")
@click.argument("run_ref", metavar="RUN_ID")
@click.argument("task_ids", nargs=-1)
@click.option("--downstream", is_flag=True, help="Also clear everything downstream of the tasks.")
@click.option("--failed-only", is_flag=True, help="Only failed and upstream_failed task instances.")
@now_option
@click.pass_obj
def tasks_clear(obj: Context, run_ref, task_ids, downstream, failed_only, now):
    """Reset task instances so they run again; the run returns to running."""
    from dagline.runs import clear_tasks

    cleared, busy = clear_tasks(obj.db(), run_ref, list(task_ids) or None, downstream=downstream,
                                failed_only=failed_only, now=_clock(now).now())
    click.echo(f"cleared {len(cleared)} task instance(s): {', '.join(cleared) or '-'}")
    if busy:
        click.echo(f"left alone (queued or running): {', '.join(busy)}", err=True)


@tasks.command("logs")
@click.argument("run_ref", metavar="RUN_ID")
@click.argument("task_id")
@click.option("--try", "try_number", type=click.IntRange(min=1), default=None, help="Default: the latest try.")
@log_folder_option
@click.pass_obj
def tasks_logs(obj: Context, run_ref, task_id, try_number, log_folder):
    """Print a task's log."""
    from dagline.executors.base import TaskKey
    from dagline.executors.local import log_path
    from dagline.runs import find_run

    with obj.db().begin() as conn:
        run = find_run(conn, run_ref)
        ti = conn.execute(select(ti_t).where(ti_t.c.dag_run_id == run.id, ti_t.c.task_id == task_id)).first()
    if ti is None:
        raise InvalidInput(f"run {run.run_id!r} has no task {task_id!r}", field="TASK_ID")
    number = try_number or ti.try_number
    if number == 0:
        raise OperationFailed(f"task {task_id!r} of run {run.run_id!r} has not run yet (state {ti.state})")
    if number > ti.try_number:
        raise InvalidInput(f"task {task_id!r} has had {ti.try_number} tries", field="--try")
    path = log_path(_log_folder(log_folder), TaskKey(run.dag_id, run.run_id, task_id, number))
    if not os.path.exists(path):
        raise OperationFailed(f"no log at {path} (logs live where the scheduler that ran the task wrote them; "
                              "see --log-folder)")
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 16):
            sys.stdout.buffer.write(chunk)
    sys.stdout.flush()


# -- pools -----------------------------------------------------------------------------------------

@main.group()
def pools():
    """Pools of slots that limit how many tasks run at once."""


@pools.command("set")
@click.argument("name")
@click.argument("slots", type=int)
@click.option("--description", default=None)
@now_option
@click.pass_obj
def pools_set(obj: Context, name, slots, description, now):
    """Create or resize a pool."""
    from dagline.pools import set_pool

    action = set_pool(obj.db(), name, slots, now=_clock(now).now(), description=description)
    click.echo(f"pool {name}: {action} ({slots} slots)")


@pools.command("list")
@json_option
@click.pass_obj
def pools_list(obj: Context, as_json):
    """Pools, their slots and the slots in use."""
    from dagline.pools import list_pools

    with obj.db().begin() as conn:
        rows = list_pools(conn)
    if as_json:
        _emit_json(rows)
    else:
        _table(rows, ["name", "slots", "used_slots", "description"])


if __name__ == "__main__":  # pragma: no cover
    main()
