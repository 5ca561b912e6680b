"""`dagline dags test`, `dagline tasks test`, `dagline tasks render`: trying a DAG before it is scheduled.

- `dags test` makes one test run (a `manual` run flagged `is_test`, off the timeline, see `timeline`)
  and drives it to its end in this process with the scheduler loop's own steps
  (`scheduler.one_run`), printing each task's state changes and log lines with the task id in front,
  then the run's grid. Exit 0 if the run succeeded, 1 if not.
- `tasks test` runs one task now through the executor, in a temporary log folder, writing nothing to
  the database; the log goes to stdout and the exit status is the job's.
- `tasks render` prints a task's rendered Spark arguments and conf, with the template context.

`tasks test` and `tasks render` use the context a real try would get: where the DAG has a run at
that logical date (for a bare date, on that day), its run id, data interval and conf (and its task
instance's try number); else a test run with the data interval the schedule gives that date, which
they say on stderr.
"""

from __future__ import annotations

import datetime as dt
import sys
import tempfile
import time

import click

from dagline.cli.base import (
    Context,
    conf_options,
    dag_timezone,
    emit_json,
    in_namespace,
    json_option,
    log_folder_option,
    make_clock,
    now_option,
    parallelism_option,
    read_conf,
    read_instant,
)
from dagline.cli.dags import dags
from dagline.cli.display import duration, local_time
from dagline.cli.state import tasks
from dagline.clock import FixedClock
from dagline.domain.states import RunState, TIState
from dagline.errors import InvalidInput, OperationFailed
from dagline.executors import registry
from dagline.wording import counted

test_executor_option = click.option("--executor", type=click.Choice(registry.names(foreground=True)),
                                    default=registry.DEFAULT, show_default=True, help="How the tasks run.")


@dags.command("test", retry_conflicts=False)
@click.argument("dag_id")
@click.argument("logical_date", required=False)
@conf_options
@test_executor_option
@parallelism_option
@log_folder_option
@click.option("--color/--no-color", default=None, help="Colour the grid (default: on a terminal).")
@click.option("--spark-log", is_flag=True, default=False,
              help="Also print Spark's own INFO/WARN log lines (by default only in each try's log file).")
@now_option
@in_namespace
@click.pass_obj
def dags_test(obj: Context, dag_id, logical_date, conf, conf_file, executor, parallelism, log_folder, color,
              spark_log, now):
    """Run the DAG once, now, in the foreground: a test run, each task's log streamed, a grid at the end.

    No scheduler is needed, and a paused DAG can be tested. The run is stored as a manual run flagged
    as a test: it is not on the timeline (scheduled runs neither follow it nor skip its logical date)
    and scheduler replicas leave it alone. LOGICAL_DATE defaults to now. Exit 0 if the run
    succeeded, 1 if not.

    Each task's own output is printed with its task id in front; Spark's INFO and WARN log lines
    (hundreds per SparkSession) stay in the try's log file (`dagline tasks logs`), and a line says
    how many were left out. Spark's ERROR lines are printed. --spark-log prints every line."""
    from dagline.executors.base import TaskKey
    from dagline.executors.spark_chatter import SparkChatter
    from dagline.executors.try_logs import LogLines, StoredTry
    from dagline.scheduler.one_run import drive_test_run
    from dagline.scheduler.settings import SchedulerSettings
    from dagline.store.runs import create_test_run, end_test_run

    database = obj.db()
    timezone = dag_timezone(database, dag_id)
    clock = make_clock(now, timezone)  # without an offset: in the DAG's zone
    conf_value = read_conf(conf, conf_file)
    when = read_instant(logical_date, "LOGICAL_DATE", timezone)
    settings = SchedulerSettings.from_env()
    kind = registry.kind(executor)
    executor_settings = kind.settings(parallelism=parallelism, log_folder=log_folder, clock=clock)
    runner = kind.build(executor_settings)
    run = create_test_run(database, dag_id, now=clock.now(), logical_date=when, conf=conf_value)
    click.echo(f"test run {run.run_id} (id {run.id}) of {dag_id}: logical date "
               f"{local_time(run.logical_date, timezone)}, {executor} executor")

    seen: dict[str, tuple[str, int]] = {}
    tails: dict[tuple[str, int], LogLines] = {}
    chatter: dict[tuple[str, int], SparkChatter] = {}

    def on_progress(_state, tis) -> None:
        changed = [ti for ti in tis if seen.get(ti.task_id) != (ti.state, ti.try_number)]
        for ti in changed:
            seen[ti.task_id] = (ti.state, ti.try_number)
            if ti.state in TIState.ACTIVE:  # a try starts: say so before its log
                click.echo(f"[{ti.task_id}] {_state_line(ti)}")
        current = {ti.task_id: ti for ti in tis}
        for ti in tis:
            if kind.code().runs_jobs and ti.try_number >= 1 and (ti.task_id, ti.try_number) not in tails:
                stored = StoredTry(TaskKey(dag_id, run.run_id, ti.task_id, ti.try_number), None,
                                   executor_settings.log_folder)
                tails[(ti.task_id, ti.try_number)] = LogLines(kind.open_log(stored).follow())
                chatter[(ti.task_id, ti.try_number)] = SparkChatter()
        for (task_id, try_number), tail in tails.items():
            ti = current[task_id]
            over = ti.try_number != try_number or ti.state not in TIState.ACTIVE
            spark = chatter[(task_id, try_number)]
            for line in tail.lines(final=over):
                if not spark.hides(line) or spark_log:
                    click.echo(f"[{task_id}] {line}")
            if over and spark.hidden and not spark_log:
                click.echo(f"[{task_id}] ({counted(spark.hidden, 'Spark log line')} of try {try_number} not shown: "
                           f"`dagline tasks logs {run.run_id} {task_id} --try {try_number}`, or --spark-log)")
                spark.hidden = 0
        for ti in changed:
            if ti.state not in (TIState.NONE, TIState.SCHEDULED, *TIState.ACTIVE):  # a try ended: after its log
                click.echo(f"[{ti.task_id}] {_state_line(ti)}")

    try:
        outcome = drive_test_run(database, runner, run.id, clock=clock, settings=settings,
                                 wait_for_time=not isinstance(clock, FixedClock), on_progress=on_progress)
    except KeyboardInterrupt:
        end_test_run(database, run.id, now=clock.now(), reason="dags test interrupted")
        raise OperationFailed(f"interrupted: test run {run.run_id} failed, its jobs were stopped") from None
    if outcome.state == RunState.RUNNING:
        end_test_run(database, run.id, now=clock.now(), reason="dags test: nothing can move the run any more")
        _print_grid(database, dag_id, run.id, color)
        raise OperationFailed(f"test run {run.run_id} cannot go on: {'; '.join(outcome.blocked)}; "
                              "it was marked failed")
    _print_grid(database, dag_id, run.id, color)
    if outcome.state != RunState.SUCCESS:
        raise OperationFailed(f"test run {run.run_id} failed: {_failures(database, run.id)}")
    click.echo(f"test run {run.run_id}: success")


def _failures(database, run_pk: int) -> str:
    from dagline.store.read_models import list_tasks

    with database.begin() as conn:
        failed = [t for t in list_tasks(conn, run_pk) if t["state"] == TIState.FAILED]
    return "; ".join(f"{t['task_id']} ({t['message'] or TIState.FAILED})" for t in failed) or "see above"


def _state_line(ti) -> str:
    if ti.state == TIState.QUEUED:
        return f"queued (try {ti.try_number} of {ti.max_tries})"
    if ti.state in (TIState.SUCCESS, TIState.FAILED) and ti.start_date and ti.end_date:
        if ti.start_date == ti.end_date:
            return f"{ti.state} (duration not measured: the clock is frozen by --now)"
        return f"{ti.state} after {duration((ti.end_date - ti.start_date).total_seconds())}"
    if ti.state == TIState.UP_FOR_RETRY and ti.next_retry_at is not None:
        return f"up_for_retry (try {ti.try_number} failed; next try at {ti.next_retry_at.isoformat()})"
    return ti.state


def _print_grid(database, dag_id: str, run_pk: int, color) -> None:
    from dagline.cli.grid import render_grid
    from dagline.store.dags import DagCache
    from dagline.store.read_models import run_dict, run_with_version, task_states

    with database.begin() as conn:
        row = run_with_version(conn, run_pk)
        dag = DagCache().get(conn, row.dag_version_id)
        states = task_states(conn, [run_pk])
    use_color = sys.stdout.isatty() if color is None else color
    click.echo()
    click.echo(render_grid(dag_id, dag.timezone, [run_dict(row)], states, list(dag.tasks), color=use_color))


# -- one task --------------------------------------------------------------------------------------


def _try_context(obj: Context, dag_id: str, task_id: str, logical_date: str, conf, conf_file):
    """What a real try of this task at this logical date would see: (dag, task, run facts, source dir).

    The run is the DAG's run at LOGICAL_DATE; for a bare date (`2026-03-02`), its first run whose logical
    date falls on that day (in the DAG's time zone), as `ds` names it. Without one, a test run at that
    date with the data interval the schedule gives it (for a bare date, its first scheduled run that
    day), said on stderr."""
    from dagline.scheduler.launches import signal_for_templates
    from dagline.store.dags import DagCache, require_dag, version_source_dir
    from dagline.store.pages import starting_signal
    from dagline.store.timeline import first_live_run_between, live_run_at, make_run_id, timetable_for
    from dagline.store.tries import try_number_of
    from dagline.times import parse_instant

    database = obj.db()
    conf_value = read_conf(conf, conf_file)
    with database.begin() as conn:
        require_dag(conn, dag_id)
        version_id, dag = DagCache().current(conn, dag_id)
        if task_id not in dag.tasks:
            raise InvalidInput(f"DAG {dag_id!r} has no task {task_id!r} (it has: {', '.join(dag.tasks)})",
                               field="TASK_ID")
        when = read_instant(logical_date, "LOGICAL_DATE", dag.timezone)
        day = _bare_date(logical_date)
        day_end = parse_instant(day + dt.timedelta(days=1), dag.timezone) if day is not None else None
        source_dir = version_source_dir(conn, version_id)
        run = live_run_at(conn, dag_id, when)
        if run is None and day is not None:
            run = first_live_run_between(conn, dag_id, when, day_end)
        if run is not None:
            try_number = try_number_of(conn, run.id, task_id) or 1
            signal = starting_signal(conn, run.id, task_id)
            facts = {"run_id": run.run_id, "logical_date": run.logical_date,
                     "signal": signal_for_templates(signal) if signal is not None else None,
                     "data_interval": (run.data_interval_start, run.data_interval_end), "try_number": try_number,
                     "conf": conf_value if conf_value is not None else (run.conf or {})}
            return dag, dag.tasks[task_id], facts, source_dir
        table = timetable_for(dag)
        scheduled = table.runs_between(when, day_end - dt.timedelta(microseconds=1)) if day is not None else []
        if scheduled:
            when, interval = scheduled[0].logical_date, scheduled[0].data_interval
        else:
            interval = table.manual_interval(when)
        facts = {"signal": None, "run_id": make_run_id("test", when), "logical_date": when,
                 "data_interval": (interval.start, interval.end), "try_number": 1, "conf": conf_value or {}}
    click.echo(f"note: {dag_id} has no run at {logical_date}; rendering a test run at logical date "
               f"{local_time(when, dag.timezone)} with the data interval the schedule gives it: "
               f"{local_time(interval.start, dag.timezone)} to {local_time(interval.end, dag.timezone)}", err=True)
    return dag, dag.tasks[task_id], facts, source_dir


def _bare_date(text: str) -> dt.date | None:
    """The date LOGICAL_DATE names when it is a date without a time (`2026-03-02`), else None."""
    try:
        return dt.date.fromisoformat(text.strip()) if len(text.strip()) == 10 else None
    except ValueError:
        return None


def _render(dag, task, facts):
    from dagline.scheduler.launches import render_job

    try:
        return render_job(task, dag, **facts)
    except ValueError as exc:
        raise OperationFailed(f"task {task.task_id!r}: template error: {exc}") from None


@tasks.command("render")
@click.argument("dag_id")
@click.argument("task_id")
@click.argument("logical_date")
@conf_options
@json_option
@in_namespace
@click.pass_obj
def tasks_render(obj: Context, dag_id, task_id, logical_date, conf, conf_file, as_json):
    """Print a task's rendered Spark arguments and conf, as a try at LOGICAL_DATE would get them."""
    from dagline.domain.templating import build_context

    dag, task, facts, _ = _try_context(obj, dag_id, task_id, logical_date, conf, conf_file)
    job = _render(dag, task, facts)
    context = build_context(
        dag_id=dag.name, dag_namespace=dag.namespace, task_id=task.task_id, run_id=facts["run_id"],
        logical_date=facts["logical_date"],
        data_interval_start=facts["data_interval"][0], data_interval_end=facts["data_interval"][1],
        try_number=facts["try_number"], params={**dag.spec.params, **facts["conf"]}, conf=facts["conf"],
        timezone=dag.timezone, signal=facts["signal"])
    context = {k: (v.isoformat() if isinstance(v, dt.datetime) else v) for k, v in context.items()}
    data = {"dag_id": dag.dag_id, "task_id": task.task_id, "run_id": facts["run_id"],
            "try_number": facts["try_number"], "main_application_file": job.main_application_file,
            "arguments": list(job.arguments), "conf": dict(job.conf), "context": context}
    if as_json:
        emit_json(data)
        return
    click.echo(f"dag_id: {data['dag_id']}\ntask_id: {data['task_id']}\nrun_id: {data['run_id']}\n"
               f"try_number: {data['try_number']}\nmainApplicationFile: {job.main_application_file}")
    click.echo("arguments:" + ("" if job.arguments else " []"))
    for argument in job.arguments:
        click.echo(f"  {argument}")
    click.echo("conf:" + ("" if job.conf else " {}"))
    for key, value in job.conf:
        click.echo(f"  {key}: {value}")
    click.echo("context:")
    for key, value in context.items():
        click.echo(f"  {key}: {value}")


@tasks.command("test", retry_conflicts=False)
@click.argument("dag_id")
@click.argument("task_id")
@click.argument("logical_date")
@conf_options
@test_executor_option
@in_namespace
@click.pass_obj
def tasks_test(obj: Context, dag_id, task_id, logical_date, conf, conf_file, executor):
    """Run one task now, ignoring its upstream tasks, and store nothing: its log goes to stdout (from a
    temporary log folder), and the exit status is the job's (0 when it succeeded)."""
    from dagline.executors.base import TaskKey, TaskLaunch
    from dagline.executors.try_logs import LogLines, StoredTry
    from dagline.scheduler.launches import task_variables
    from dagline.times import duration_seconds

    dag, task, facts, source_dir = _try_context(obj, dag_id, task_id, logical_date, conf, conf_file)
    job = _render(dag, task, facts)
    key = TaskKey(dag.dag_id, facts["run_id"], task.task_id, facts["try_number"])
    timeout = duration_seconds(task.execution_timeout) if task.execution_timeout is not None else None
    launch = TaskLaunch(ti_id=0, key=key, job=job, working_dir=source_dir, timeout_s=timeout,
                        task_env=task_variables(task))
    kind = registry.kind(executor)
    with tempfile.TemporaryDirectory(prefix="dagline-tasks-test-") as folder:
        runner = kind.build(kind.settings(parallelism=1, log_folder=folder))
        runner.start()
        stored = StoredTry(key, None, folder)
        tail = LogLines(kind.open_log(stored).follow()) if kind.code().runs_jobs else None
        final = None
        try:
            runner.launch([launch])
            while final is None:
                for report in runner.sync():
                    if report.state in (TIState.SUCCESS, TIState.FAILED):
                        final = report
                if tail is not None:
                    for line in tail.lines(final=final is not None):
                        click.echo(line)
                if final is None:
                    time.sleep(0.1)
        except KeyboardInterrupt:
            runner.end()
            raise OperationFailed(f"interrupted: task {task_id!r} was stopped") from None
        runner.end()  # nothing runs any more; this stops what the executor started for it (a Connect server)
        if not kind.code().runs_jobs:  # no log, no exit status: say what it reported
            click.echo(f"{kind.name} executor: {final.state}" + (f" ({final.message})" if final.message else ""))
            sys.exit(0 if final.state == TIState.SUCCESS else 1)
        code = kind.code().exit_status(stored)
    if final.state == TIState.SUCCESS:
        sys.exit(0)
    click.echo(f"error: task {task_id!r} failed: {final.message}", err=True)
    sys.exit(code if isinstance(code, int) and 0 < code < 256 else 1)

