"""`dagline runs`, `dagline tasks` and `dagline pools`: looking at runs, clearing and reading tasks, pools."""

from __future__ import annotations

import json
import sys
import time

import click

from dagline.cli.base import (
    Context,
    Integer,
    confirm,
    dag_key,
    dag_timezone_of,
    dag_timezones,
    emit_json,
    in_namespace,
    json_option,
    limit_option,
    log_folder_option,
    main,
    make_clock,
    namespace_option,
    now_option,
    one_namespace,
    print_table,
    show_rows,
)
from dagline.cli.display import for_people
from dagline.domain import names
from dagline.domain.states import RunState, TIState
from dagline.errors import InvalidInput, NotFound, OperationFailed
from dagline.executors import resolve_log_folder
from dagline.wording import counted


@main.group()
def runs():
    """DAG runs."""


@runs.command("list")
@click.argument("dag_id", required=False)
@click.option("--dag", "dag_option", default=None, metavar="DAG_ID", help="Only this DAG's runs (as DAG_ID).")
@click.option("--state", default=None, type=click.Choice([s.value for s in RunState]))
@namespace_option
@limit_option
@json_option
@click.pass_obj
def runs_list(obj: Context, dag_id, dag_option, state, namespace, limit, as_json):
    """Runs in logical-date order (per DAG); `--limit N`: the latest N. The table shows the logical date
    in the DAG's zone, the run's duration, and `manual (test)` for `dags test` runs (JSON: `is_test`)."""
    from dagline.store.dags import require_dag
    from dagline.store.read_models import list_runs

    if dag_id is not None and dag_option is not None and dag_id != dag_option:
        raise InvalidInput(f"names DAG {dag_option!r}, but DAG_ID names {dag_id!r}", field="--dag")
    dag_id = dag_id or dag_option
    if dag_id is not None:
        dag_id = dag_key(dag_id, namespace)
    with obj.db().begin() as conn:
        if dag_id is not None:
            require_dag(conn, dag_id, active=False)
        rows = list_runs(conn, dag_id, state, limit=limit, namespace=namespace)
        zones = dag_timezones(conn, [r["dag_id"] for r in rows])
    if not as_json:
        rows = [{**r, "run_type": r["run_type"] + (" (test)" if r["is_test"] else ""),
                 "deadline": _deadline_text(r, zones.get(r["dag_id"], "UTC"))} for r in rows]
    show_rows(rows, ["id", "dag_id", "run_id", "run_type", "state", "logical_date", "duration", "previous_run_id",
                     "dag_version", "backfill_id", "deadline"], as_json, timezones=zones)


def _deadline_text(row: dict, timezone: str) -> str | None:
    """The deadline in the DAG's time zone, prefixed MISSED once it was missed (the human listings)."""
    from dagline.cli.display import local_time

    if row["deadline"] is None:
        return None
    due = local_time(row["deadline"], timezone)
    return f"MISSED {due}" if row["deadline_missed_at"] else due


@runs.command("show")
@click.argument("run_ref", metavar="RUN_ID")
@json_option
@now_option
@in_namespace
@click.pass_obj
def runs_show(obj: Context, run_ref, as_json, now):
    """One run: its fields and conf, its task instances with durations and why each one that is not
    running or finished waits, its neighbours on the timeline."""
    from dagline.store.read_models import run_detail
    from dagline.store.runs import find_run
    from dagline.store.waiting import task_reasons

    with obj.db().begin() as conn:
        run = find_run(conn, run_ref)
        data = run_detail(conn, run)
        reasons = task_reasons(conn, run, now=make_clock(now).now())  # the scheduler's own words
        zone = dag_timezone_of(conn, data["dag_id"])
    data["tasks"] = [{**task, "reason": reasons.get(task["task_id"])} for task in data["tasks"]]
    data["namespace"] = names.namespace_of(data["dag_id"])  # its key says whose; last, so the order stays
    if as_json:
        emit_json(data)
        return
    [run] = for_people([data], zone)
    kind = run["run_type"] + (" (test)" if run["is_test"] else "")
    click.echo(f"run {run['run_id']} (id {run['id']}) of {run['dag_id']}, {kind}: {run['state']}")
    for label, field in (("logical date", "logical_date"), ("data interval", None), ("run after", "run_after"),
                         ("started", "start_date"), ("ended", "end_date"), ("duration", "duration")):
        value = f"{run['data_interval_start']} to {run['data_interval_end']}" if field is None else run[field]
        click.echo(f"{label + ':':<15}{'' if value is None else value}")
    click.echo(f"{'version:':<15}{run['dag_version']}" + (f"   backfill: {run['backfill_id']}"
                                                         if run["backfill_id"] else ""))
    click.echo(f"{'conf:':<15}{json.dumps(run['conf']) if run['conf'] else '{}'}")
    for label in ("previous", "next"):
        n = run[label]
        where = "(not on the timeline: a test run)" if run["is_test"] else "(none)"
        click.echo(f"{label + ':':<15}" + (f"{n['run_id']} (id {n['id']}), {n['state']}" if n else where))
    click.echo()
    print_table(for_people(run["tasks"], zone), ["task_id", "state", "try_number", "max_tries", "start_date",
                                                 "end_date", "duration", "reason", "message"])


@runs.command("grid")
@click.argument("dag_id")
@click.option("--limit", default=30, show_default=True, type=Integer(min=1))
@click.option("--color/--no-color", default=None, help="Default: colour on a terminal.")
@in_namespace
@click.pass_obj
def runs_grid(obj: Context, dag_id, limit, color):
    """A terminal grid: runs as columns, tasks as rows, coloured by state."""
    from dagline.cli.grid import render_grid
    from dagline.store.dags import DagCache, require_dag
    from dagline.store.read_models import list_runs, task_states

    with obj.db().begin() as conn:
        require_dag(conn, dag_id, active=False)
        _, dag = DagCache().current(conn, dag_id)
        run_rows = list_runs(conn, dag_id, limit=limit, live=True)
        tis = task_states(conn, [r["id"] for r in run_rows])
    use_color = sys.stdout.isatty() if color is None else color
    click.echo(render_grid(dag_id, dag.timezone, run_rows, tis, list(dag.tasks), color=use_color))


@main.group()
def tasks():
    """Task instances of a run."""


@tasks.command("list")
@click.argument("run_ref", metavar="RUN_ID")
@limit_option
@json_option
@now_option
@in_namespace
@click.pass_obj
def tasks_list(obj: Context, run_ref, limit, as_json, now):
    """The task instances of a run, and why each one that is not running or finished waits (times in
    the DAG's zone; JSON in UTC)."""
    from dagline.store.read_models import list_tasks
    from dagline.store.runs import find_run
    from dagline.store.waiting import task_reasons

    with obj.db().begin() as conn:
        run = find_run(conn, run_ref)
        rows = list_tasks(conn, run.id)
        zone = dag_timezone_of(conn, run.dag_id)
        reasons = task_reasons(conn, run, now=make_clock(now).now())  # the scheduler's own words
    owner = names.namespace_of(run.dag_id)  # the run's key says whose
    rows = [{**row, "reason": reasons.get(row["task_id"]), "namespace": owner} for row in rows]
    if not as_json:
        rows = [{**r, "deadline": _deadline_text(r, zone)} for r in rows]
    show_rows(rows, ["task_id", "state", "try_number", "max_tries", "pool", "start_date", "end_date", "duration",
                     "reason", "deadline", "message"], as_json, limit=limit, timezones=zone)


@tasks.command("clear")
@click.argument("run_ref", metavar="RUN_ID")
@click.argument("task_ids", nargs=-1)
@click.option("--downstream", is_flag=True, help="Also clear everything downstream of the tasks.")
@click.option("--failed-only", is_flag=True, help="Only failed and upstream_failed task instances.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask before clearing more than one task instance.")
@now_option
@in_namespace
@click.pass_obj
def tasks_clear(obj: Context, run_ref, task_ids, downstream, failed_only, yes, now):
    """Reset task instances so they run again; the run returns to running.

    Asks before clearing more than one task instance (as Airflow does); without --yes, with no
    terminal and no answer on stdin, it refuses (exit 1) and changes nothing."""
    from dagline.store.runs import clear_tasks

    database = obj.db()
    at = make_clock(now).now()
    planned, _ = clear_tasks(database, run_ref, list(task_ids) or None, downstream=downstream,
                             failed_only=failed_only, now=at, dry_run=True)
    if len(planned) > 1:
        confirm(f"clear {len(planned)} task instances of run {run_ref} ({', '.join(planned)})?", yes=yes,
                refusal=f"not clearing {len(planned)} task instances")
    cleared, busy = clear_tasks(database, run_ref, planned or list(task_ids) or None, failed_only=failed_only,
                                now=at)
    click.echo(f"cleared {len(cleared)} task instance(s): {', '.join(cleared) or '-'}")
    if busy:
        click.echo(f"left alone (queued or running): {', '.join(busy)}", err=True)


@tasks.command("logs")
@click.argument("run_ref", metavar="RUN_ID")
@click.argument("task_id")
@click.option("--try", "try_number", type=Integer(min=1), default=None, help="Default: the latest try.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the try ends.")
@click.option("--poll-interval", type=click.FloatRange(min=0.01), default=1.0, show_default=True, metavar="SECONDS",
              help="With --follow: how often to look for new lines and at the try's state.")
@log_folder_option
@in_namespace
@click.pass_obj
def tasks_logs(obj: Context, run_ref, task_id, try_number, follow, poll_interval, log_folder):
    """Print a task's log; with --follow, keep printing as it grows until the try ends. Local tries: the
    log files the wrapper rotated (oldest first), then the current one; spark-k8s tries: the driver
    pod's log through the Kubernetes API."""
    from dagline.executors import registry
    from dagline.executors.base import TaskKey
    from dagline.executors.try_logs import NoLog, StoredTry
    from dagline.store.runs import find_run
    from dagline.store.tries import task_try

    database = obj.db()

    def look():
        with database.begin() as conn:
            run = find_run(conn, run_ref)
            ti = task_try(conn, run.id, task_id)
        if ti is None:
            raise InvalidInput(f"run {run.run_id!r} has no task {task_id!r}", field="TASK_ID")
        return run, ti

    run, ti = look()
    if try_number is not None and try_number > max(ti.try_number, 0) and not follow:
        raise InvalidInput(f"task {task_id!r} has had {ti.try_number} tries", field="--try")
    while follow and ti.try_number < (try_number or 1) and ti.state not in TIState.FINISHED:
        time.sleep(poll_interval)  # --follow of a try that has not started yet: wait for it
        run, ti = look()
    number = try_number or ti.try_number
    if number == 0:
        raise OperationFailed(f"task {task_id!r} of run {run.run_id!r} has not run yet (state {ti.state})")
    if number > ti.try_number:
        raise InvalidInput(f"task {task_id!r} has had {ti.try_number} tries", field="--try")
    key = TaskKey(run.dag_id, run.run_id, task_id, number)
    log = registry.open_log(ti.executor, StoredTry(key, ti.external_id, resolve_log_folder(log_folder)))

    def running() -> bool:
        return follow and ti.try_number == number and ti.state in TIState.ACTIVE

    if not running():  # the log as it is now
        for chunk in log.read():
            sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
        if follow:
            _say_try_ended(number, task_id, ti)
        return
    follower, printed, said = log.follow(), False, None
    while True:  # until the try ends, what was added since the last look; a log not readable yet is waited for
        ended = not running()
        try:
            for chunk in follower.read():
                sys.stdout.buffer.write(chunk)
                printed = True
        except NoLog as exc:
            if ended and not printed:
                raise
            if ended:  # printed what there was; the log went with the try's end (retention)
                click.echo(f"{log.what} is no longer readable: {exc}", err=True)
            elif str(exc) != said:
                said = str(exc)
                click.echo(f"waiting for {log.what}: {exc}", err=True)
        sys.stdout.flush()
        if ended:
            break
        time.sleep(poll_interval)
        run, ti = look()
    _say_try_ended(number, task_id, ti)


def _say_try_ended(number: int, task_id: str, ti) -> None:
    """`--follow`'s last line, on stderr: how the followed try ended (or that a newer try runs now)."""
    state = ti.state if ti.try_number == number else f"{ti.state} (now on try {ti.try_number})"
    click.echo(f"try {number} of {task_id} ended: {state}", err=True)


@main.group()
def pools():
    """Pools of slots that limit how many tasks run at once."""


@pools.command("set")
@click.argument("name")
@click.argument("slots", type=Integer())
@click.option("--description", default=None)
@click.option("--namespace", default=None, metavar="NS", callback=one_namespace,
              help="The namespace's own pool NAME (only its DAGs use it); without it, a platform pool shared by all.")
@now_option
@click.pass_obj
def pools_set(obj: Context, name, slots, description, namespace, now):
    """Create or resize a pool: a platform pool, shared by every namespace, or with `--namespace` that
    namespace's own pool of that name (a namespace's tasks take a platform pool of their pool's name
    first, else their namespace's)."""
    from dagline.store.pools import set_pool

    owner = {} if namespace is None else {"namespace": namespace}
    action = set_pool(obj.db(), name, slots, now=make_clock(now).now(), description=description, **owner)
    click.echo(f"pool {name}: {action} ({counted(slots, 'slot')})" + (f", namespace {namespace}" if namespace else ""))


@pools.command("list")
@click.option("--namespace", default=None, metavar="NS", callback=one_namespace,
              help="Only the pools this Kubernetes namespace's DAGs may use: its own and the platform's "
                   "(no namespace).")
@limit_option
@json_option
@click.pass_obj
def pools_list(obj: Context, namespace, limit, as_json):
    """Pools, their slots and the slots in use."""
    from dagline.store.pools import list_pools

    with obj.db().begin() as conn:
        rows = list_pools(conn)
    if namespace is not None:
        rows = [r for r in rows if r["namespace"] in (None, namespace)]
    show_rows(rows, ["name", "namespace", "slots", "used_slots", "description"], as_json, limit=limit)


@pools.command("delete")
@click.argument("name")
@click.option("--namespace", default=None, metavar="NS", callback=one_namespace,
              help="Delete this namespace's own pool NAME (without it: the platform's pool NAME).")
@now_option
@click.pass_obj
def pools_delete(obj: Context, name, namespace, now):
    """Delete a pool. Refused for `default`, and while a task of an active DAG names it or task
    instances are queued or running in it (the message names them)."""
    from dagline.store.pools import list_pools, remove_pool

    if namespace is not None:
        with obj.db().begin() as conn:
            owned = {r["name"] for r in list_pools(conn) if r["namespace"] == namespace}
        if name not in owned:
            raise NotFound(f"unknown pool {name!r} in namespace {namespace!r} (see `dagline pools list "
                           f"--namespace {namespace}`)")
    if not remove_pool(obj.db(), name, now=make_clock(now).now(), refuse_in_use=True, namespace=namespace):
        raise NotFound(f"unknown pool {name!r} (see `dagline pools list`)")
    click.echo(f"pool {name}: deleted")

