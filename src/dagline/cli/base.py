"""Plumbing shared by the `dagline` commands: the root group, options, time parsing, output.

Exit status: 0 ok, 1 a failed operation, 2 bad usage or invalid input. Errors go to stderr as one
paragraph naming the cause; every command validates before it writes, and writes in one transaction.
So a command whose transaction PostgreSQL rolled back for a conflict with a scheduler (a deadlock or a
serialization failure: nothing of it was written) simply runs again, up to 4 times; a database that
is down or keeps conflicting is an error naming the cause, exit 1, with nothing written.
"""

from __future__ import annotations

import datetime as dt
import json
import logging

import click

from dagline.clock import FixedClock, SystemClock
from dagline.db import engine as dbengine
from dagline.db.faults import first_line, is_read_only, is_transient, run_again_on_conflict
from dagline.domain import names
from dagline.domain.input_values import MAX_INT64, MIN_INT64, read_integer, read_text
from dagline.domain.json_values import read_json_object
from dagline.errors import DaglineError, InvalidInput, OperationFailed
from dagline.executors import registry
from dagline.limits import MAX_JSON_BYTES, MAX_ROW_ID
from dagline.times import parse_instant


class Context:
    def __init__(self, db_url: str | None):
        self.db_url = db_url
        self._db = None

    def db(self, *, check_schema: bool = True):
        if self._db is None:
            self._db = dbengine.open_database(self.db_url, check_schema=check_schema)
        return self._db

    def close(self) -> None:
        """Close the database the command opened (its pooled connections and the SQLite writer lock), so a
        process that runs many commands (a test, a script calling `main`) keeps no file or socket open."""
        if self._db is not None:
            self._db.dispose()
            self._db = None


def spark_policy():
    """The Spark policy in force (`dagline.domain.spark_policy`): what `DAGLINE_SPARK_ALLOWED_CONF` allows."""
    import os

    from dagline.domain.spark_policy import ALLOWED_CONF_SETTING, SparkPolicy

    return SparkPolicy.parse(os.environ.get(ALLOWED_CONF_SETTING))


def make_clock(now: str | None, timezone: str = "UTC"):
    """The clock `--now` asks for: without an offset, `--now` is read in `timezone` (the DAG's)."""
    if now is None:
        return SystemClock()
    try:
        return FixedClock(parse_instant(now, timezone))
    except ValueError as exc:
        raise InvalidInput(str(exc), field="--now") from None


def make_spanning_clock(now: str | None):
    """The clock of a command that spans DAGs (`scheduler`, `operator`): no DAG's zone can read a `--now`
    without an offset, so one is refused rather than read as UTC."""
    if now is not None and not _has_offset(now):
        raise InvalidInput(f"{now!r} has no offset, and this command spans DAGs with their own time zones: "
                           "add one (e.g. 'Z' or '+02:00')", field="--now")
    return make_clock(now)


def _has_offset(text: str) -> bool:
    raw = text.strip()
    if raw.endswith("Z"):
        return True
    try:
        return dt.datetime.fromisoformat(raw).tzinfo is not None
    except ValueError:
        return True  # not a time at all: make_clock says so


def read_instant(value: str | None, field: str, timezone: str = "UTC") -> dt.datetime | None:
    if value is None:
        return None
    try:
        return parse_instant(value, timezone)
    except ValueError as exc:
        raise InvalidInput(str(exc), field=field) from None



def dag_timezone(db, dag_id: str) -> str:
    from dagline.store.dags import timezone_of

    with db.begin() as conn:
        tz = timezone_of(conn, dag_id)
    return tz or "UTC"


def run_timezone(db, run_ref: str) -> str:
    """The time zone of a run's DAG (reads a `--now` without an offset for `runs stop`, `tasks stop`)."""
    from dagline.store.runs import find_run

    with db.begin() as conn:
        return dag_timezone_of(conn, find_run(conn, run_ref).dag_id)


def emit_json(rows) -> None:
    click.echo(json.dumps(for_machines(rows), indent=2))


def for_machines(value):
    """JSON as the command contract has it: a DAG's stored key (`a-team/etl`) becomes its `dag_id` (the
    name), and the object gets a `namespace` (last, if it had none), in every object at any depth (ADR 92)."""
    if isinstance(value, list):
        return [for_machines(item) for item in value]
    if not isinstance(value, dict):
        return value
    out = {field: for_machines(item) for field, item in value.items()}
    key = value.get("dag_id")
    if isinstance(key, str):
        namespace, out["dag_id"] = names.split(key)
        if out.get("namespace") is None:
            out["namespace"] = namespace
    return out


def show_rows(rows: list[dict], columns: list[str], as_json: bool, *, limit: int | None = None,
              latest: bool = False, timezones=None) -> None:
    """A listing: every field as JSON (`--json`), or the chosen columns as a table. `limit` keeps the
    first N rows, or the last N (the most recent) when the rows are in time order (`latest`). The table
    shows times in each row's DAG time zone (`timezones`: dag_id -> zone, or one zone), JSON in UTC."""
    if limit is not None:
        rows = rows[-limit:] if latest else rows[:limit]
    if as_json:
        emit_json(rows)
        return
    if timezones is not None:
        from dagline.cli.display import for_people

        rows = for_people(rows, timezones)
    print_table(rows, columns)


def print_table(rows: list[dict], columns: list[str]) -> None:
    if not rows:
        click.echo("(none)")
        return
    cells = [[("" if r.get(c) is None else str(r.get(c))) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    click.echo("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())



class Integer(click.IntRange):
    """An integer option or argument, read by `input_values.read_integer`: ASCII digits only (`²`, `٣`,
    `1_000` and ` 7` are refused, though `int()` takes some), within [min, max], by default what a
    signed 64-bit column holds. A bad value is click's usage error naming the option: exit 2."""

    def __init__(self, min: int | None = None, max: int | None = None):  # noqa: A002 - click's own names
        super().__init__(min=min, max=max)  # None: the reference shows no bound; read_integer keeps int64's
        self.minimum = MIN_INT64 if min is None else min
        self.maximum = MAX_INT64 if max is None else max

    def convert(self, value, param, ctx):
        if isinstance(value, str):
            try:
                value = read_integer(value, param.name if param else "value", minimum=self.minimum,
                                     maximum=self.maximum)
            except InvalidInput as exc:
                self.fail(exc.reason, param, ctx)
        return super().convert(value, param, ctx)


def check_texts(ctx: click.Context) -> None:
    """Every text a command was given (arguments and options, paths aside) through `input_values.read_text`:
    no NUL, no lone surrogate (bytes of the command line that are not UTF-8 arrive as one). InvalidInput
    naming the option or argument: exit 2, before the command runs."""
    for param in ctx.command.params:
        if isinstance(param.type, click.Path):
            continue
        value = ctx.params.get(param.name)
        for item in value if isinstance(value, (tuple, list)) else (value,):
            if isinstance(item, str):
                read_text(item, _param_field(param), max_length=None)  # each command bounds its own sizes


def _param_field(param: click.Parameter) -> str:
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    return (param.name or "argument").upper()


class DaglineCommand(click.Command):
    """A command run again when its transaction was rolled back for a conflict (see the module docstring).
    Long-running commands (`scheduler`, `backfill run`, `operator`) pass `retry_conflicts=False`: their
    loops retry each step's transaction themselves. Its texts are checked first (`check_texts`)."""

    def __init__(self, *args, retry_conflicts: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        self.retry_conflicts = retry_conflicts

    def invoke(self, ctx):
        check_texts(ctx)
        if not self.retry_conflicts:
            return super().invoke(ctx)
        return run_again_on_conflict(lambda: super(DaglineCommand, self).invoke(ctx), what=ctx.command_path,
                                     pause_s=0.05)


class DaglineSubGroup(click.Group):
    """A command group below `dagline` (dags, runs, ...): its commands are `DaglineCommand`s."""

    command_class = DaglineCommand
    group_class = type  # groups below it are of this class too


class DaglineGroup(click.Group):
    """Maps dagline's errors to their exit codes with a one-paragraph message. Commands in
    `lazy_commands` are imported only when run (or listed by --help), so `dagline operator`'s kopf
    and kubernetes imports cost the other commands nothing."""

    lazy_commands = {"operator": ("dagline.cli.operator", "operator_cmd")}
    command_class = DaglineCommand
    group_class = DaglineSubGroup

    def list_commands(self, ctx):
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx, cmd_name):
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            import importlib

            module, attribute = self.lazy_commands[cmd_name]
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except DaglineError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except Exception as exc:
            if is_read_only(exc):  # a write outside Database.begin (the migrations)
                click.echo(f"error: the database is read-only ({first_line(exc)}): nothing was written", err=True)
                ctx.exit(1)
            if not is_transient(exc):
                raise
            click.echo(f"error: the database failed ({first_line(exc)}); the command's transaction was rolled back "
                       "and nothing of it was written: run it again", err=True)
            ctx.exit(1)


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
    ctx.call_on_close(ctx.obj.close)



executor_option = click.option("--executor", type=click.Choice(registry.names()), default=registry.DEFAULT,
                               show_default=True)
parallelism_option = click.option("--parallelism", type=Integer(min=1), default=2, show_default=True,
                                  help="Tries the executor runs at once.")
log_folder_option = click.option("--log-folder", default=None, metavar="DIR",
                                 help="Task logs (default: $DAGLINE_LOG_FOLDER, else ./logs).")


def make_cli_executor(name, parallelism, log_folder, clock):
    return registry.make_executor(name, parallelism=parallelism, clock=clock, log_folder=log_folder)


def conf_options(f):
    """`--conf JSON` and its twin `--conf-file PATH` (a file holding the JSON object)."""
    f = click.option("--conf-file", "conf_file", default=None, metavar="PATH",
                     help="A file holding the conf as a JSON object (instead of --conf).")(f)
    return click.option("--conf", default=None, metavar="JSON", help="A JSON object (overrides params).")(f)


def read_conf(conf: str | None, conf_file: str | None) -> dict | None:
    """The conf given by `--conf` or `--conf-file`: a JSON object within the bounds of
    `dagline.domain.json_values`, or None when neither is given."""
    if conf is not None and conf_file is not None:
        raise InvalidInput("give --conf or --conf-file, not both", field="--conf-file")
    if conf_file is not None:
        from dagline.spec.loading import read_spec_file  # a regular file of at most 1 MiB, never a FIFO

        try:
            text = read_spec_file(conf_file)
        except InvalidInput as exc:
            raise InvalidInput(exc.reason, field="--conf-file", source=conf_file) from None
        field, value = "--conf-file", text
    elif conf is not None:
        field, value = "--conf", conf
    else:
        return None
    return read_json_object(value, field, max_bytes=MAX_JSON_BYTES)


limit_option = click.option("--limit", type=Integer(min=1, max=MAX_ROW_ID), default=None, metavar="N",
                            help="Show at most N rows (the most recent N where rows are in time order).")


def one_namespace(_ctx, param, value):
    if value is None:
        return None
    return names.check_namespace(value, field=f"--{param.name}")


namespace_option = click.option(
    "--namespace", default=None, metavar="NS", callback=one_namespace,
    help="Only what this namespace owns (default: every namespace).")


def dag_key(value: str, namespace: str | None, *, field: str = "DAG_ID") -> str:
    """The stored key of the DAG a person named: NAME in `namespace` (else `default`), or NAMESPACE/NAME."""
    found, name = names.parse_reference(value, namespace, field=field)
    return names.qualify(found, name)


NAMED_OBJECTS = {"run_ref": "run_ref", "backfill_id": "backfill_id"}
"""The parameters by which a command names a run or a backfill -> what `require_in_namespace` checks."""
NAMED_DAGS = ("dag_id", "dag_ref")
"""The parameters by which a command names a DAG: NAME in `--namespace` (else `default`), or NAMESPACE/NAME."""


def in_namespace(f):
    """`--namespace NS` on a show or an action naming a DAG, a run or a backfill. A DAG is named within
    its namespace: `NAME` is `NS`'s (`default`'s without the option), `NS/NAME` names the namespace itself;
    the command gets the DAG's stored key. A run or backfill of another namespace is refused as not found,
    naming the namespace, before the command does anything; without the option, runs and backfills of
    every namespace. Put it above `pass_obj`."""
    import functools
    import os

    @functools.wraps(f)
    def checked(*args, namespace=None, **kwargs):
        for param in NAMED_DAGS:
            value = kwargs.get(param)
            if value is not None and not (param == "dag_ref" and os.path.exists(value)):
                kwargs[param] = dag_key(value, namespace, field="DAG_ID_OR_FILE" if param == "dag_ref" else "DAG_ID")
        named = {NAMED_OBJECTS[k]: v for k, v in kwargs.items() if k in NAMED_OBJECTS and v is not None}
        if namespace is not None and named:
            from dagline.store.namespaces import require_in_namespace
            from dagline.store.runs import find_run

            with click.get_current_context().find_object(Context).db().begin() as conn:
                require_in_namespace(conn, namespace, **named)
                if "run_ref" in named:  # a run id string other namespaces share too: this namespace's run
                    kwargs["run_ref"] = str(find_run(conn, named["run_ref"], namespaces=[namespace]).id)
        return f(*args, **kwargs)

    return click.option(
        "--namespace", default=None, metavar="NS", callback=one_namespace,
        help="The namespace of the DAG named (default: default; NS/NAME names it too); a run or backfill of "
             "another namespace is refused as not found.")(checked)


def confirm(question: str, *, yes: bool, refusal: str) -> None:
    """Ask `question` on the terminal (or read the answer from stdin) unless `--yes` was given. No
    answer at all (no terminal, stdin empty or closed) refuses with `refusal`; any answer but yes
    stops. Either way nothing has been written: exit 1."""
    if yes:
        return
    try:
        answer = click.prompt(f"{question} [y/N]", default="", show_default=False, err=True)
    except click.Abort:
        raise OperationFailed(f"{refusal}: there is no terminal to ask and no answer on stdin; "
                              "pass --yes to go ahead without asking") from None
    if answer.strip().lower() not in ("y", "yes"):
        raise OperationFailed("not confirmed: nothing was changed")


def dag_timezones(conn, dag_ids) -> dict[str, str]:
    """dag_id -> the DAG's time zone, for showing times to people."""
    from dagline.store.dags import timezones_of

    dag_ids = sorted({d for d in dag_ids if d})
    if not dag_ids:
        return {}
    return timezones_of(conn, dag_ids)


def dag_timezone_of(conn, dag_id: str) -> str:
    """A DAG's time zone (UTC for a DAG no longer stored)."""
    return dag_timezones(conn, [dag_id]).get(dag_id, "UTC")

