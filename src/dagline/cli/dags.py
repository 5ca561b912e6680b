"""`dagline db` and `dagline dags`: the schema, applying and inspecting DAGs, pausing, triggering."""

from __future__ import annotations

import os

import click

from dagline.cli.base import (
    Context,
    Integer,
    conf_options,
    confirm,
    dag_timezone,
    emit_json,
    in_namespace,
    json_option,
    limit_option,
    main,
    make_clock,
    namespace_option,
    now_option,
    one_namespace,
    read_conf,
    read_instant,
    show_rows,
    spark_policy,
)
from dagline.db import engine as dbengine
from dagline.errors import InvalidInput
from dagline.limits import MAX_NEXT_RUNS_COUNT
from dagline.times import isoformat


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


@main.group()
def dags():
    """Apply, inspect, pause and trigger DAGs."""


@dags.command("apply")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--namespace", default=None, metavar="NS", callback=one_namespace,
              help="The namespace the DAGs belong to (default: each document's metadata.namespace, else "
                   "default); a document naming another is refused.")
@now_option
@click.pass_obj
def dags_apply(obj: Context, paths, namespace, now):
    """Load DAG spec files or folders; a new version only when a spec changed.

    A task's local mainApplicationFile must resolve (symlinks included) inside its DAG file's folder or
    a folder of DAGLINE_JOBS_FOLDER; a URI must be s3a://, gs://, abfss://, hdfs:// or https://.

    All or nothing: every file is validated before anything is written, so one invalid file (named,
    with its field) applies nothing, exit 2. (Airflow's DAG processor loads the files it can; dagline
    gets that isolation at scheduling time instead: a DAG it cannot schedule is an import error.)"""
    from dagline.scheduler.deliveries import CallbackSettings
    from dagline.spec import load_dag_paths
    from dagline.spec.app_files import check_application_files, jobs_folders
    from dagline.spec.checks import refused_webhook_urls
    from dagline.store.dags import apply_dags, local_folder

    loaded = load_dag_paths(list(paths), warn=lambda message: click.echo(f"warning: {message}", err=True),
                            spark_policy=spark_policy(), namespace=namespace)
    jobs = jobs_folders()
    for item in loaded:  # a job file outside its home refuses the whole batch, like any invalid spec
        check_application_files(item.dag, dag_folder=local_folder(item.source_path), jobs=jobs,
                                source=item.source_path)
    egress = CallbackSettings.from_env().egress
    unreadable = _unreadable_env_references(loaded)
    for dag_id, warnings in _unexported_keys(loaded).items():
        unreadable.setdefault(dag_id, []).extend(warnings)
    results = apply_dags(obj.db(), loaded, now=make_clock(now).now())
    for item in loaded:  # applied all the same: the allow-list may change, and urlFrom values are judged at delivery
        for path, why in refused_webhook_urls(item.dag.spec, egress):
            click.echo(f"{item.dag.dag_id}: warning: {path}: webhook will be refused: {why}", err=True)
    paused_spec = {item.dag.dag_id: item.dag.spec.paused for item in loaded}  # a new DAG starts as its spec says
    for r in results:
        if r.action == "unchanged":
            click.echo(f"{r.dag_id}: unchanged (version {r.version})")
        elif r.action == "created" and paused_spec.get(r.dag_id):
            click.echo(f"{r.dag_id}: created paused (version {r.version}); `dagline dags unpause {r.dag_id}` to start")
        elif r.action == "created":
            click.echo(f"{r.dag_id}: created (version {r.version})")
        else:
            click.echo(f"{r.dag_id}: {r.action} (version {r.previous_version} -> {r.version})")
        if r.cleared_import_error:
            click.echo(f"{r.dag_id}: import error cleared; the scheduler tries it again")
        for warning in r.warnings + unreadable.get(r.dag_id, []):
            click.echo(f"{r.dag_id}: warning: {warning}", err=True)


def _unexported_keys(loaded) -> dict[str, list[str]]:
    """dag_id -> a warning per signal rule on another namespace's key that the platform's export rules
    (`DAGLINE_SIGNAL_EXPORTS`) do not let out to the DAG's namespace: applied, but it never acts until they do."""
    from dagline.domain.signal_exports import unexported_warning
    from dagline.scheduler.settings import exports_from_env

    exports = exports_from_env()
    out: dict[str, list[str]] = {}
    for item in loaded:
        dag = item.dag
        rules = [t.signal for t in dag.spec.triggers] + [r.signal for task in dag.tasks.values() for r in task.on]
        found = [unexported_warning(dag.namespace, signal, exports) for signal in rules]
        out[dag.dag_id] = [warning for warning in found if warning]
    return out


def _unreadable_env_references(loaded) -> dict[str, list[str]]:
    """dag_id -> a warning per callback `{env: NAME}` outside the secret prefix: stored, but its delivery
    fails until the variable is renamed (ADR 0040). `DAGLINE_*` never gets here: the spec refuses it."""
    from dagline.domain.callbacks import env_references
    from dagline.executors.secret_sources import PREFIX_VARIABLE, LocalSecrets

    prefix = LocalSecrets.from_env().prefix
    out: dict[str, list[str]] = {}
    for item in loaded:
        spec = item.dag.spec
        found = [*env_references(spec.callbacks, "spec.callbacks"),
                 *env_references(spec.defaults.callbacks, "spec.defaults.callbacks")]
        for index, task in enumerate(spec.tasks):
            found += env_references(task.callbacks or [], f"spec.tasks[{index}].callbacks")
        out[item.dag.dag_id] = [
            f"{where}: {name} does not start with the secret prefix {prefix} ({PREFIX_VARIABLE}): a DAG may not "
            f"read it, so this callback fails at delivery until it names {prefix}{name}"
            for where, name in found if not name.startswith(prefix)]
    return out


@dags.command("list")
@namespace_option
@limit_option
@json_option
@click.pass_obj
def dags_list(obj: Context, namespace, limit, as_json):
    """The DAGs, their namespace, their schedule and where they stand (times in each DAG's zone; JSON in UTC)."""
    from dagline.store.read_models import list_dags

    with obj.db().begin() as conn:
        rows = list_dags(conn, namespace=namespace)
    columns = ["dag_id", "namespace", "paused", "schedule", "timezone", "version", "next_run_after", "last_run_state"]
    if not as_json and any(r["import_error"] for r in rows):  # why the scheduler cannot handle a DAG
        columns.append("import_error")
        rows = [{**r, "import_error": _first_line(r["import_error"])} for r in rows]
    show_rows(rows, columns, as_json, limit=limit, timezones={r["dag_id"]: r["timezone"] for r in rows})


def _first_line(text: str | None, limit: int = 100) -> str | None:
    if text is None:
        return None
    line = text.splitlines()[0] if text.strip() else text
    return line if len(line) <= limit else line[:limit - 3] + "..."


@dags.command("show")
@click.argument("dag_id")
@json_option
@in_namespace
@click.pass_obj
def dags_show(obj: Context, dag_id, as_json):
    """The stored spec and versions of a DAG."""
    from dagline.store.dags import require_dag, versions_of

    with obj.db().begin() as conn:
        row = require_dag(conn, dag_id, active=False)
        versions = versions_of(conn, dag_id)
    current = next(v for v in versions if v.id == row.current_version_id)
    data = {
        "dag_id": dag_id, "namespace": row.namespace, "active": row.is_active, "paused": row.is_paused,
        "version": current.version,
        "source_path": row.source_path, "next_dagrun": isoformat(row.next_dagrun),
        "next_run_after": isoformat(row.next_dagrun_create_after or row.next_dagrun_data_interval_end),
        "versions": [{"version": v.version, "created_at": isoformat(v.created_at), "current": v.id == current.id}
                     for v in versions],
        "spec": current.spec,
        "import_error": row.import_error, "import_error_at": isoformat(row.import_error_at),
    }
    if as_json:
        emit_json(data)
        return
    import yaml

    click.echo(f"dag_id: {dag_id}\nactive: {_yaml_bool(row.is_active)}\n{_paused_line(row.is_paused, current.spec)}"
               f"\nnamespace: {row.namespace}\nsource: {row.source_path}")
    from dagline.cli.display import local_time

    zone = row.timezone
    click.echo(f"next run: {local_time(data['next_dagrun'], zone)} "
               f"(created after {local_time(data['next_run_after'], zone)})")
    if row.import_error:
        click.echo(f"import error (since {data['import_error_at']}): the scheduler cannot schedule this DAG; "
                   f"fix it and apply it again:\n  " + row.import_error.replace("\n", "\n  "))
    click.echo("versions:")
    for v in data["versions"]:
        click.echo(f"  {v['version']}  {local_time(v['created_at'], zone)}{'  (current)' if v['current'] else ''}")
    click.echo("spec:")
    click.echo("  " + yaml.safe_dump(current.spec, sort_keys=False).replace("\n", "\n  ").rstrip())


def _yaml_bool(value: bool) -> str:
    return "true" if value else "false"


def _paused_line(paused: bool, spec: dict) -> str:
    """The DAG's pause state, spelled as in its spec; where `dags pause`/`unpause` made it differ from the
    spec's field, which one is in force (the stored state, until an applied version changes the field)."""
    line = f"paused: {_yaml_bool(paused)}"
    in_spec = spec.get("paused", True)
    if in_spec == paused:
        return line
    return (f"{line} (in force, set by `dagline dags {'pause' if paused else 'unpause'}`; the spec's "
            f"paused: {_yaml_bool(in_spec)} applies again when an applied version changes that field)")


@dags.command("next-runs")
@click.argument("dag_ref")
@click.option("--after", default=None, metavar="ISO", help="Start from the first interval starting at or after this.")
@click.option("--count", "--limit", "count", default=5, show_default=True,
              type=Integer(min=1, max=MAX_NEXT_RUNS_COUNT),
              help=f"How many intervals (at most {MAX_NEXT_RUNS_COUNT:,}).")
@now_option
@json_option
@in_namespace
@click.pass_obj
def dags_next_runs(obj: Context, dag_ref, after, count, now, as_json):
    """The intervals the scheduler would create next, in order (with `catchup: false`, from the
    latest complete interval at --now); with --after, every interval from that instant on."""
    import itertools

    from dagline.spec import load_dag_paths
    from dagline.store.timeline import timetable_for, upcoming_scheduled_runs

    def rows_of(runs):
        return [{"logical_date": isoformat(info.logical_date),
                 "data_interval_start": isoformat(info.data_interval.start),
                 "data_interval_end": isoformat(info.data_interval.end), "run_after": isoformat(info.run_after)}
                for info in itertools.islice(_until_the_calendar_ends(runs), count)]

    if os.path.exists(dag_ref):
        loaded = load_dag_paths([dag_ref], spark_policy=spark_policy())
        if len(loaded) != 1:
            raise InvalidInput(f"{dag_ref} holds {len(loaded)} DAGs; give one file or a DAG id", field="DAG_ID_OR_FILE")
        dag = loaded[0].dag
        instant = make_clock(now, dag.timezone).now()  # without an offset: in the DAG's zone
        rows = None if after else rows_of(timetable_for(dag).upcoming(None, catchup=dag.spec.catchup, now=instant))
    else:
        from dagline.store.dags import DagCache, require_dag

        with obj.db().begin() as conn:
            require_dag(conn, dag_ref)
            _, dag = DagCache().current(conn, dag_ref)
            instant = make_clock(now, dag.timezone).now()
            rows = None if after else rows_of(upcoming_scheduled_runs(conn, dag_ref, dag, now=instant))
    if after:
        rows = rows_of(timetable_for(dag).upcoming(None, earliest=read_instant(after, "--after", dag.timezone)))
    show_rows(rows, ["logical_date", "data_interval_start", "data_interval_end", "run_after"], as_json,
              timezones=dag.timezone)


def _until_the_calendar_ends(runs):
    """The intervals of `runs` up to where `datetime` ends (year 9999): there are no more to show."""
    iterator = iter(runs)
    while True:
        try:
            yield next(iterator)
        except StopIteration:
            return
        except (OverflowError, ValueError):  # an interval past year 9999
            return


@dags.command("pause")
@click.argument("dag_id")
@now_option
@in_namespace
@click.pass_obj
def dags_pause(obj: Context, dag_id, now):
    """Stop creating and starting runs of a DAG (running tasks finish)."""
    _set_paused(obj, dag_id, True, now)


@dags.command("unpause")
@click.argument("dag_id")
@now_option
@in_namespace
@click.pass_obj
def dags_unpause(obj: Context, dag_id, now):
    """Resume a paused DAG."""
    _set_paused(obj, dag_id, False, now)


def _set_paused(obj: Context, dag_id: str, paused: bool, now: str | None) -> None:
    from dagline.store.dags import set_paused

    changed = set_paused(obj.db(), dag_id, paused, now=make_clock(now, dag_timezone(obj.db(), dag_id)).now())
    word = "paused" if paused else "unpaused"
    click.echo(f"{dag_id}: {word}" if changed else f"{dag_id}: already {word}")


@dags.command("trigger")
@click.argument("dag_id")
@click.option("--logical-date", default=None, metavar="ISO", help="Default: now.")
@conf_options
@now_option
@in_namespace
@click.pass_obj
def dags_trigger(obj: Context, dag_id, logical_date, conf, conf_file, now):
    """Create a manual run; prints its run id."""
    from dagline.store.runs import trigger_run

    database = obj.db()
    conf_value = read_conf(conf, conf_file)
    zone = dag_timezone(database, dag_id)  # times without an offset are read in the DAG's zone
    when = read_instant(logical_date, "--logical-date", zone)
    run = trigger_run(database, dag_id, now=make_clock(now, zone).now(), logical_date=when, conf=conf_value)
    click.echo(run.run_id)


@dags.command("delete")
@click.argument("dag_id")
@click.option("--yes", "-y", is_flag=True, help="Do not ask first.")
@now_option
@in_namespace
@click.pass_obj
def dags_delete(obj: Context, dag_id, yes, now):
    """Remove a DAG with its versions, runs, task instances and backfills (asks first).

    As in Airflow, running task instances do not stop it: the scheduler running them stops their
    jobs. The event log keeps the DAG's history. Without --yes, with no terminal and no answer on
    stdin, it refuses (exit 1) and removes nothing."""
    from dagline.store.deletion import delete_dag, footprint

    database = obj.db()
    with database.begin() as conn:
        found = footprint(conn, dag_id)
    running = f" ({found.active_task_instances} of them queued or running: their jobs will be stopped)" \
        if found.active_task_instances else ""
    confirm(f"delete DAG {dag_id!r} with {found.describe()}{running}?", yes=yes,
            refusal=f"not deleting DAG {dag_id!r}")
    removed = delete_dag(database, dag_id, now=make_clock(now).now())
    click.echo(f"{dag_id}: deleted with {removed.describe()}")

