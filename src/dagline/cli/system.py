"""`dagline db check` and `dagline config`: is the database usable, and which settings are in force.

`db check` is for probes and support: one line for the connection, one for the schema, exit 0 when
both are fine, else 1. `config` lists every setting with its value and where it came from (a flag,
an environment variable, or the default), without connecting to the database; passwords in the
database URL are masked. Settings are read exactly as the commands read them
(`SchedulerSettings.from_env`, `OperatorSettings.from_env`, ...), so a bad value is the same error,
naming the variable.
"""

from __future__ import annotations

import dataclasses
import os

import click

from dagline.cli.base import Context, emit_json, json_option, main, print_table
from dagline.cli.dags import db
from dagline.db import engine as dbengine
from dagline.errors import DaglineError


@db.command("check")
@json_option
@click.pass_obj
def db_check(obj: Context, as_json):
    """Can dagline connect, and is the schema current? One line each; exit 0 if both, else 1."""
    database = dbengine.Database(obj.db_url or dbengine.default_url())  # a bad URL: exit 2, naming --db
    where = dbengine.redact(database.url)
    result = {"url": where, "connection": {"ok": False, "error": None},
              "schema": {"ok": False, "current": None, "head": dbengine.head_revision(database), "error": None}}
    try:
        dbengine.require_file(database)  # a check never creates the file it looks for
        database.check_reachable()
        result["connection"]["ok"] = True
    except Exception as exc:  # noqa: BLE001 - any failure to connect is the answer, not a crash
        result["connection"]["error"] = dbengine.first_line(getattr(exc, "orig", None) or exc)
    schema = result["schema"]
    if result["connection"]["ok"]:
        try:
            schema["current"] = dbengine.current_revision(database)
            dbengine.require_current_schema(database)
            schema["ok"] = True
        except DaglineError as exc:
            schema["error"] = str(exc)
    database.dispose()
    if as_json:
        emit_json(result)
    else:
        connection = result["connection"]
        click.echo(f"connection: ok ({where})" if connection["ok"] else f"connection: failed: {connection['error']}")
        if schema["ok"]:
            click.echo(f"schema: current (revision {schema['current']})")
        elif not connection["ok"]:
            click.echo("schema: unknown (no connection)")
        else:
            click.echo(f"schema: not current: {schema['error']}")
    if not (result["connection"]["ok"] and schema["ok"]):
        raise SystemExit(1)


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    value: object
    source: str
    used_by: str
    variable: str | None = None  # the environment variable it is read from


def _source(variable: str | None, *, flag: str | None = None, flag_given: bool = False) -> str:
    if flag_given:
        return f"flag {flag}"
    if variable and os.environ.get(variable, "").strip():
        return f"environment variable {variable}"
    return "default" + (f" (flag {flag} overrides it)" if flag else "")


def settings_in_force(obj: Context) -> list[Setting]:
    from dagline.api.settings import ApiSettings
    from dagline.cli.base import spark_policy
    from dagline.domain.spark_policy import ALLOWED_CONF_SETTING
    from dagline.executors import registry, resolve_log_folder
    from dagline.executors.try_files import log_limits
    from dagline.k8s.settings import OperatorSettings
    from dagline.scheduler.deliveries import CallbackSettings
    from dagline.scheduler.settings import SchedulerSettings

    url = obj.db_url or dbengine.default_url()
    out = [
        Setting("db_url", dbengine.redact(dbengine.normalize_url(url)),
                _source("DAGLINE_DB_URL", flag="--db", flag_given=obj.db_url is not None), "every command",
                "DAGLINE_DB_URL"),
        Setting("log_folder", resolve_log_folder(None), _source("DAGLINE_LOG_FOLDER", flag="--log-folder"),
                "scheduler, backfill run, dags test, tasks logs (local executor)", "DAGLINE_LOG_FOLDER"),
        Setting("scheduler.executor", registry.DEFAULT, "default (flag --executor overrides it)",
                "scheduler, backfill run, dags test"),
        Setting("scheduler.parallelism", 2, "default (flag --parallelism overrides it)",
                "scheduler, backfill run, dags test"),
    ]
    scheduler = SchedulerSettings.from_env()
    for field in dataclasses.fields(scheduler):
        variable = field.metadata.get("env") or f"DAGLINE_SCHEDULER_{field.name.upper()}"
        value = getattr(scheduler, field.name)
        out.append(Setting(f"scheduler.{field.name}", value if isinstance(value, (str, int, float, bool)) else
                           str(value), _source(variable), "scheduler, backfill run, dags test, operator", variable))
    callbacks = CallbackSettings.from_env()
    for field in dataclasses.fields(callbacks):
        variable = f"DAGLINE_CALLBACK_{field.name.upper()}"
        out.append(Setting(f"callback.{field.name}", getattr(callbacks, field.name), _source(variable),
                           "scheduler, operator (callback delivery)", variable))
    spark_conf = spark_policy()
    out.append(Setting("spark.allowed_conf", ",".join(spark_conf.allowed), _source(ALLOWED_CONF_SETTING),
                       "dags apply, operator (Spark policy)", ALLOWED_CONF_SETTING))
    max_bytes, files = log_limits()
    for name, value in (("max_bytes", max_bytes), ("files", files)):
        variable = f"DAGLINE_LOG_{name.upper()}"
        out.append(Setting(f"log.{name}", value, _source(variable), "local executor (log rotation)", variable))
    from dagline.executors.secret_sources import FILE_VARIABLE, PREFIX_VARIABLE, LocalSecrets

    secrets = LocalSecrets.from_env()
    for name, value, variable in (("prefix", secrets.prefix, PREFIX_VARIABLE), ("file", secrets.file, FILE_VARIABLE)):
        out.append(Setting(f"secrets.{name}", value, _source(variable),
                           "scheduler, operator, dags apply (secrets DAGs may read)", variable))
    api = ApiSettings.from_env()
    for name, variable in (("anonymous_read", "DAGLINE_API_ANONYMOUS_READ"),
                           ("max_body_bytes", "DAGLINE_API_MAX_BODY_BYTES"), ("max_batch", "DAGLINE_API_MAX_BATCH")):
        flag = "--anonymous-read" if name == "anonymous_read" else None
        out.append(Setting(f"api.{name}", getattr(api, name), _source(variable, flag=flag), "api, operator", variable))
    for name, variable in (("max_event_streams", "DAGLINE_UI_MAX_EVENT_STREAMS"),
                           ("max_event_streams_per_client", "DAGLINE_UI_MAX_EVENT_STREAMS_PER_CLIENT")):
        out.append(Setting(f"ui.{name}", getattr(api, name), _source(variable), "api, operator (web UI)", variable))
    # a secret: whether it is set, never its value
    shown_secret = "(set)" if api.ui_secret is not None else "(unset: one kept in the database)"
    out.append(Setting("ui.secret", shown_secret, _source("DAGLINE_UI_SECRET"), "api, operator (web UI CSRF)",
                       "DAGLINE_UI_SECRET"))
    from dagline.spec.app_files import JOBS_FOLDER_VARIABLE, jobs_folders

    out.append(Setting("spec.jobs_folder", os.pathsep.join(jobs_folders()), _source(JOBS_FOLDER_VARIABLE),
                       "dags apply (application files' homes)", JOBS_FOLDER_VARIABLE))
    operator_vars = {"namespace": "DAGLINE_NAMESPACE", "health_port": "DAGLINE_HEALTH_PORT",
                     "metrics_port": "DAGLINE_METRICS_PORT", "dagrun_history_limit": "DAGLINE_DAGRUN_HISTORY_LIMIT",
                     "status_interval_s": "DAGLINE_STATUS_INTERVAL", "liveness_timeout_s": "DAGLINE_LIVENESS_TIMEOUT",
                     "watch_timeout_s": "DAGLINE_WATCH_TIMEOUT",
                     "watch_inactivity_timeout_s": "DAGLINE_WATCH_INACTIVITY_TIMEOUT",
                     "watch_connect_timeout_s": "DAGLINE_WATCH_CONNECT_TIMEOUT",
                     "list_interval_s": "DAGLINE_LIST_INTERVAL",
                     "executor": "DAGLINE_EXECUTOR", "parallelism": "DAGLINE_PARALLELISM",
                     "log_format": "DAGLINE_LOG_FORMAT", "api_port": "DAGLINE_API_PORT", "api_url": "DAGLINE_API_URL",
                     "platform_pools": "DAGLINE_PLATFORM_POOLS"}
    operator = OperatorSettings.from_env()
    for name, variable in operator_vars.items():
        flag = {"executor": "--executor", "parallelism": "--parallelism", "namespace": "--namespace",
                "health_port": "--health-port", "metrics_port": "--metrics-port", "api_port": "--api-port"}.get(name)
        out.append(Setting(f"operator.{name}", getattr(operator, name), _source(variable, flag=flag), "operator",
                           variable))
    # each executor's own settings (spark-k8s's code imports the kubernetes client: only `config` pays for it)
    for kind in registry.KINDS:
        for shown in kind.code().settings_shown(os.environ):
            out.append(Setting(shown.name, shown.value, _source(shown.variable), f"{kind.name} executor",
                               shown.variable))
    return out


@main.command("config")
@json_option
@click.pass_obj
def config_cmd(obj: Context, as_json):
    """Every setting in force, its value and where it came from (flag, environment variable, default)."""
    rows = [dataclasses.asdict(s) for s in settings_in_force(obj)]
    if as_json:
        emit_json(rows)
    else:
        print_table(rows, ["name", "value", "source", "used_by"])
