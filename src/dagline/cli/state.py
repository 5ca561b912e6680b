"""`dagline runs`, `dagline tasks` and `dagline pools`: looking at runs, clearing and reading tasks, pools."""

from __future__ import annotations

import os
import sys
from zoneinfo import ZoneInfo

import click
from sqlalchemy import select

from dagline.cli.base import (
    Context,
    json_option,
    log_folder_option,
    main,
    make_clock,
    now_option,
    show_rows,
)
from dagline.db.models import ti_t
from dagline.errors import InvalidInput, OperationFailed
from dagline.executors import resolve_log_folder


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
        zones = _timezones(conn, {r["dag_id"] for r in rows})
    if not as_json:
        rows = [{**r, "deadline": _deadline_text(r, zones.get(r["dag_id"], "UTC"))} for r in rows]
    show_rows(rows, ["id", "dag_id", "run_id", "run_type", "state", "previous_run_id", "dag_version",
                    "backfill_id", "deadline"], as_json)


def _timezones(conn, dag_ids) -> dict[str, str]:
    from dagline.db.models import dag_t

    return dict(conn.execute(select(dag_t.c.dag_id, dag_t.c.timezone).where(dag_t.c.dag_id.in_(dag_ids))).all())


def _deadline_text(row: dict, timezone: str) -> str | None:
    """The deadline in the DAG's time zone, and whether it was missed (for the human listings)."""
    from dagline.times import parse_instant

    if row["deadline"] is None:
        return None
    due = parse_instant(row["deadline"]).astimezone(ZoneInfo(timezone)).isoformat(" ", "minutes")
    return f"MISSED {due}" if row["deadline_missed_at"] else due


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
        run = find_run(conn, run_ref)
        rows = list_tasks(conn, run.id)
        zone = _timezones(conn, {run.dag_id}).get(run.dag_id, "UTC")
    if not as_json:
        rows = [{**r, "deadline": _deadline_text(r, zone)} for r in rows]
    show_rows(rows, ["task_id", "state", "try_number", "max_tries", "pool", "start_date", "end_date",
                    "deadline", "message"], as_json)


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
                                failed_only=failed_only, now=make_clock(now).now())
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
    """Print a task's log: the local executor's files (rotated ones first), or for spark-k8s tries the
    driver pod's log through the Kubernetes API."""
    from dagline.db.models import scheduler_job_t
    from dagline.executors.base import TaskKey
    from dagline.executors.try_files import log_files, log_path
    from dagline.runs import find_run

    with obj.db().begin() as conn:
        run = find_run(conn, run_ref)
        ti = conn.execute(select(ti_t).where(ti_t.c.dag_run_id == run.id, ti_t.c.task_id == task_id)).first()
        executor = None if ti is None or ti.queued_by_job_id is None else conn.execute(
            select(scheduler_job_t.c.executor).where(scheduler_job_t.c.id == ti.queued_by_job_id)).scalar()
    if ti is None:
        raise InvalidInput(f"run {run.run_id!r} has no task {task_id!r}", field="TASK_ID")
    number = try_number or ti.try_number
    if number == 0:
        raise OperationFailed(f"task {task_id!r} of run {run.run_id!r} has not run yet (state {ti.state})")
    if number > ti.try_number:
        raise InvalidInput(f"task {task_id!r} has had {ti.try_number} tries", field="--try")
    key = TaskKey(run.dag_id, run.run_id, task_id, number)
    if executor == "spark-k8s":
        from dagline.k8s.pod_logs import driver_log

        namespace = (ti.external_id or "").partition("/")[0] or os.environ.get("DAGLINE_SPARK_NAMESPACE") or "default"
        for chunk in driver_log(key, namespace):
            sys.stdout.buffer.write(chunk)
        sys.stdout.flush()
        return
    path = log_path(resolve_log_folder(log_folder), key)
    files = log_files(path)  # rotated copies first (oldest first), then the current file
    if not files:
        raise OperationFailed(f"no log at {path} (logs live where the scheduler that ran the task wrote them; "
                              "see --log-folder)")
    for name in files:
        with open(name, "rb") as fh:
            while chunk := fh.read(1 << 16):
                sys.stdout.buffer.write(chunk)
    sys.stdout.flush()


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

    action = set_pool(obj.db(), name, slots, now=make_clock(now).now(), description=description)
    click.echo(f"pool {name}: {action} ({slots} slots)")


@pools.command("list")
@json_option
@click.pass_obj
def pools_list(obj: Context, as_json):
    """Pools, their slots and the slots in use."""
    from dagline.pools import list_pools

    with obj.db().begin() as conn:
        rows = list_pools(conn)
    show_rows(rows, ["name", "slots", "used_slots", "description"], as_json)


