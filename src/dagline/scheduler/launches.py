"""Turning queued task instances into executor launches: render the task's templates for its run
and resolve where its files live. A template that fails to render (an error, a bound, the time
budget) fails the try, with a reason naming the task and the template.

In three steps, so that no transaction waits on a template: `gather_launches` reads what rendering
needs (in the caller's transaction), `render_launches` renders in the replica's renderer process (no
transaction open), and the caller records the failures in a transaction of its own
(`executor_events.fail_unlaunchable`).

What each try was launched with (its rendered job, or the error that kept it from launching) is
stored (`launch_records`, `store.launches.record_launches`), in the next transaction the replica
commits anyway: the run page shows it from there and never renders (ADR 60).

A try started by a signal renders `{{ signal.key }}`, `{{ signal.value }}`, `{{ signal.seq }}` and
`{{ signal.source }}` from that signal (`task_instance.signal_seq`); any other try of a run a signal
created (a DAG's `triggers:`, its `trigger` signal action) renders the signal that created the run; in
any other try `signal` is null (None).

Each try also gets the environment it needs to send signals (`try_env`): `DAGLINE_API_URL` (where
the HTTP API is, as the replica was told) and `DAGLINE_SIGNAL_TOKEN`, a token made for this try
alone, stored hashed in the transaction that gathers it (`api_tokens.issue_try_tokens`). The
local executor puts them in the job's environment, spark-k8s in a per-try Secret. The task's own
`env` travels as `TaskVariable`s: its secrets are read by the executor (`task_variables`), never here.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Sequence

from sqlalchemy.engine import Connection

from dagline.domain import names
from dagline.domain.templating import build_context, spark_templates
from dagline.executors.base import SparkJob, TaskKey, TaskLaunch, TaskVariable
from dagline.scheduler.critical_section import QueuedTI
from dagline.scheduler.isolation import describe, is_dags_fault
from dagline.scheduler.renderer import Renderer, RenderFailed, RenderInterrupted, RenderRequest
from dagline.spec import Task
from dagline.store.dags import DagCache
from dagline.store.launches import LaunchRecord, runs_and_signals_of_tries
from dagline.store.tokens import issue_try_tokens
from dagline.times import duration_seconds


@dataclasses.dataclass(frozen=True)
class PendingLaunch:
    """A queued try with everything needed to render and launch it."""

    queued: QueuedTI
    run_id: str
    task: Task
    request: RenderRequest
    working_dir: str | None
    timeout_s: float | None
    env: tuple[tuple[str, str], ...] = ()  # DAGLINE_API_URL and the try's DAGLINE_SIGNAL_TOKEN


@dataclasses.dataclass
class Rendered:
    launches: list[TaskLaunch] = dataclasses.field(default_factory=list)
    broken: list[tuple[QueuedTI, str]] = dataclasses.field(default_factory=list)  # (try, why)
    left: list[QueuedTI] = dataclasses.field(default_factory=list)  # not rendered: the replica is stopping


@dataclasses.dataclass
class Gathered:
    pending: list[PendingLaunch]
    broken: list[tuple[QueuedTI, str]]  # tries that cannot even be rendered (their DAG cannot be read)


DEFAULT_API_URL = "http://127.0.0.1:8793"  # `dagline api`'s default address


def try_env(api_url: str, token: str) -> tuple[tuple[str, str], ...]:
    """What a try needs to send signals with `dagline.sdk.client.send_signal`."""
    return (("DAGLINE_API_URL", api_url), ("DAGLINE_SIGNAL_TOKEN", token))


def gather_launches(conn: Connection, queued: Sequence[QueuedTI], *, dags: DagCache, now: dt.datetime,
                    api_url: str = DEFAULT_API_URL) -> Gathered:
    """What rendering these tries needs: their run, task, context and working folder (database reads only)."""
    if not queued:
        return Gathered([], [])
    runs, signals = {}, {}  # each try's run, with the folder of its DAG version, and its signal: one read
    for row in runs_and_signals_of_tries(conn, [q.ti_id for q in queued]):
        runs[row.ti_id] = row
        if row.seq is not None:  # a signal started the try (a pruned signal is absent)
            signals[row.ti_id] = signal_for_templates(row)
        elif row.trigger_seq is not None:  # a signal created the run
            namespace, key = names.split(row.trigger_key)
            signals[row.ti_id] = {"key": key, "namespace": namespace, "value": json.loads(row.trigger_value),
                                  "seq": row.trigger_seq, "source": row.trigger_source}
    dags.prefetch(conn, {q.dag_version_id for q in queued})
    tokens = issue_try_tokens(conn, [(q.ti_id, q.try_number) for q in queued], now=now)
    pending, broken = [], []
    for q in queued:
        run = runs[q.ti_id]
        try:
            dag = dags.get(conn, q.dag_version_id)
            task = dag.tasks[q.task_id]
            templates = spark_templates(task.spark)
            context = {}  # a task with nothing to render needs no context (the dates in the DAG's zone...)
            if templates:
                conf = run.conf or {}
                context = build_context(
                    dag_id=dag.name, dag_namespace=dag.namespace, task_id=task.task_id, run_id=run.run_id,
                    logical_date=run.logical_date,
                    data_interval_start=run.data_interval_start, data_interval_end=run.data_interval_end,
                    try_number=q.try_number, params={**dag.spec.params, **conf}, conf=conf,  # conf overrides params
                    timezone=dag.timezone, signal=signals.get(q.ti_id),
                )
        except Exception as exc:  # this try cannot be launched; the others can (see `isolation`)
            if not is_dags_fault(exc):
                raise
            broken.append((q, f"cannot launch: {describe(exc, f'task {q.task_id}')}"))
            continue
        timeout = duration_seconds(task.execution_timeout) if task.execution_timeout is not None else None
        pending.append(PendingLaunch(q, run.run_id, task, RenderRequest(task.task_id, templates, context),
                                     run.source_dir, timeout, try_env(api_url, tokens[q.ti_id])))
    return Gathered(pending, broken)


def signal_for_templates(row) -> dict:
    """The signal that started a try, as its templates see it ({key, namespace, value, seq, source}: the bare
    key and its sender's namespace), from a row with the signal's columns."""
    namespace, key = names.split(row.key)
    return {"key": key, "namespace": namespace, "value": json.loads(row.value), "seq": row.seq, "source": row.source}


def render_launches(gathered: Gathered, renderer: Renderer) -> Rendered:
    """Render every try's templates (outside any transaction); stops early if the replica is stopping."""
    result = Rendered(broken=list(gathered.broken))
    pending = gathered.pending
    for index, p in enumerate(pending):
        try:
            values = renderer.render(p.request)
        except RenderFailed as exc:
            result.broken.append((p.queued, f"template error: {exc}"))
            continue
        except RenderInterrupted:
            result.left = [q.queued for q in pending[index:]]
            break
        q = p.queued
        result.launches.append(TaskLaunch(
            ti_id=q.ti_id, key=TaskKey(q.dag_id, p.run_id, q.task_id, q.try_number), job=spark_job(p.task, values),
            working_dir=p.working_dir, timeout_s=p.timeout_s, streaming=p.task.streaming,
            stop_grace_s=p.task.stop_grace_period.total_seconds(), env=p.env, task_env=task_variables(p.task),
        ))
    return result


def launch_records(launches: Sequence[TaskLaunch], broken: Sequence[tuple[QueuedTI, str]], *,
                   at: dt.datetime) -> list[LaunchRecord]:
    """The `try_launch` rows of launched tries (their rendered job) and of tries that could not launch (why)."""
    records = [LaunchRecord(launch.ti_id, launch.key.try_number, at, launch.job.main_application_file,
                            list(launch.job.arguments), dict(launch.job.conf)) for launch in launches]
    records += [LaunchRecord(q.ti_id, q.try_number, at, error=why) for q, why in broken]
    return records


def task_variables(task: Task) -> tuple[TaskVariable, ...]:
    """The task's `env` as the executors take it (secrets named, not read: each executor reads them)."""
    out = []
    for var in task.env:
        ref = var.value_from.secret_key_ref if var.value_from is not None else None
        out.append(TaskVariable(var.name, var.value, None if ref is None else (ref.name, ref.key)))
    return tuple(out)


def spark_job(task: Task, rendered: dict[str, str]) -> SparkJob:
    """The task's Spark job with its templates replaced by their rendered text (keyed as `spark_templates`)."""
    spark = task.spark
    arguments = tuple(rendered[f"spark.arguments[{i}]"] for i in range(len(spark.arguments)))
    conf = {key: rendered[f"spark.conf[{key!r}]"] for key in spark.conf}
    driver, executor = spark.driver, spark.executor
    return SparkJob(
        main_application_file=spark.main_application_file,
        arguments=arguments,
        conf=tuple(sorted(conf.items())),
        image=spark.image,
        driver_cores=getattr(driver, "cores", None),
        driver_memory=getattr(driver, "memory", None),
        executor_instances=getattr(executor, "instances", None),
        executor_cores=getattr(executor, "cores", None),
        executor_memory=getattr(executor, "memory", None),
        connect=task.connect,
        connect_server=(task.connect_server.model_dump(by_alias=True, exclude_none=True)
                        if task.connect and task.connect_server is not None else None),
        pod=spark.pod.model_dump(by_alias=True, exclude_none=True) if spark.pod is not None else None,
        volumes=tuple(spark.volumes or ()),
        driver_service_account=getattr(driver, "service_account", None),
    )


def render_job(task: Task, dag, *, run_id: str, logical_date: dt.datetime,
               data_interval: tuple[dt.datetime, dt.datetime], try_number: int, conf: dict,
               signal: dict | None = None) -> SparkJob:
    """One try's Spark job rendered now (`dagline tasks render` / `tasks test`), in a renderer process of
    its own with the scheduler's budgets. Raises `RenderFailed` (a ValueError) naming the task and the
    template."""
    context = build_context(
        dag_id=dag.name, dag_namespace=dag.namespace, task_id=task.task_id, run_id=run_id, logical_date=logical_date,
        data_interval_start=data_interval[0], data_interval_end=data_interval[1], try_number=try_number,
        params={**dag.spec.params, **conf}, conf=conf, timezone=dag.timezone,  # a run's conf overrides params
        signal=signal,
    )
    renderer = Renderer()
    try:
        values = renderer.render(RenderRequest(task.task_id, spark_templates(task.spark), context))
    finally:
        renderer.close()
    return spark_job(task, values)
