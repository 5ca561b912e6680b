"""Turning queued task instances into executor launches: render the task's templates for its run
and resolve where its files live. A template that fails to render fails the try, with the reason.
A try started by a signal renders `{{ signal.key }}`, `{{ signal.value }}`, `{{ signal.seq }}` and
`{{ signal.source }}` from that signal (`task_instance.signal_seq`); in any other try `signal` is
null (None).

Each try also gets the environment it needs to send signals (`try_env`): `DAGLINE_API_URL` (where
the HTTP API is, as the replica was told) and `DAGLINE_SIGNAL_TOKEN`, a token made for this try
alone, stored hashed in the same transaction that queues it (`api_tokens.issue_try_tokens`). The
local executor puts them in the job's environment, spark-k8s in a per-try Secret."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.engine import Connection

from dagline.api_tokens import issue_try_tokens
from dagline.dagstore import DagCache
from dagline.db.models import dag_run_t, dag_version_t, signal_t, ti_t
from dagline.executors.base import SparkJob, TaskKey, TaskLaunch
from dagline.scheduler.critical_section import QueuedTI
from dagline.spec import Task
from dagline.templating import build_context, render_spark
from dagline.times import duration_seconds


DEFAULT_API_URL = "http://127.0.0.1:8793"  # `dagline api`'s default address


def build_launches(
    conn: Connection, queued: Sequence[QueuedTI], *, dags: DagCache, now: dt.datetime,
    api_url: str = DEFAULT_API_URL,
) -> tuple[list[TaskLaunch], list[tuple[QueuedTI, str]]]:
    """Launches for these TIs, and the TIs whose templates could not be rendered (with the error)."""
    if not queued:
        return [], []
    runs = {
        row.id: row for row in conn.execute(
            select(dag_run_t.c.id, dag_run_t.c.run_id, dag_run_t.c.logical_date, dag_run_t.c.data_interval_start,
                   dag_run_t.c.data_interval_end, dag_run_t.c.conf)
            .where(dag_run_t.c.id.in_({q.dag_run_id for q in queued})))
    }
    source_dirs = dict(conn.execute(
        select(dag_version_t.c.id, dag_version_t.c.source_dir)
        .where(dag_version_t.c.id.in_({q.dag_version_id for q in queued}))).all())
    signals = signals_of(conn, [q.ti_id for q in queued])
    tokens = issue_try_tokens(conn, [(q.ti_id, q.try_number) for q in queued], now=now)
    launches, broken = [], []
    for q in queued:
        dag = dags.get(conn, q.dag_version_id)
        run = runs[q.dag_run_id]
        task = dag.tasks[q.task_id]
        try:
            job = render_job(task, dag, run_id=run.run_id, logical_date=run.logical_date,
                             data_interval=(run.data_interval_start, run.data_interval_end),
                             try_number=q.try_number, conf=run.conf or {}, signal=signals.get(q.ti_id))
        except ValueError as exc:
            broken.append((q, f"template error: {exc}"))
            continue
        timeout = duration_seconds(task.execution_timeout) if task.execution_timeout is not None else None
        launches.append(TaskLaunch(
            ti_id=q.ti_id, key=TaskKey(q.dag_id, run.run_id, q.task_id, q.try_number), job=job,
            working_dir=source_dirs.get(q.dag_version_id), timeout_s=timeout,
            streaming=task.streaming, stop_grace_s=task.stop_grace_period.total_seconds(),
            env=try_env(api_url, tokens[q.ti_id]),
        ))
    return launches, broken


def try_env(api_url: str, token: str) -> tuple[tuple[str, str], ...]:
    """What a try needs to send signals with `dagline.client.send_signal`."""
    return (("DAGLINE_API_URL", api_url), ("DAGLINE_SIGNAL_TOKEN", token))


def signals_of(conn: Connection, ti_ids) -> dict[int, dict]:
    """ti id -> the signal that started its try ({key, value, seq, source}); TIs no signal started,
    or whose signal was pruned, are absent."""
    by_ti = dict(conn.execute(select(ti_t.c.id, ti_t.c.signal_seq)
                              .where(ti_t.c.id.in_(list(ti_ids)), ti_t.c.signal_seq.is_not(None))).all())
    if not by_ti:
        return {}
    found = {row.seq: {"key": row.key, "value": json.loads(row.value), "seq": row.seq, "source": row.source}
             for row in conn.execute(select(signal_t.c.seq, signal_t.c.key, signal_t.c.value, signal_t.c.source)
                                     .where(signal_t.c.seq.in_(set(by_ti.values()))))}
    return {ti_id: found[seq] for ti_id, seq in by_ti.items() if seq in found}


def render_job(task: Task, dag, *, run_id: str, logical_date: dt.datetime,
               data_interval: tuple[dt.datetime, dt.datetime], try_number: int, conf: dict,
               signal: dict | None = None) -> SparkJob:
    context = build_context(
        dag_id=dag.dag_id, task_id=task.task_id, run_id=run_id, logical_date=logical_date,
        data_interval_start=data_interval[0], data_interval_end=data_interval[1], try_number=try_number,
        params={**dag.spec.params, **conf}, conf=conf, timezone=dag.timezone,  # a run's conf overrides params
        signal=signal,
    )
    arguments, conf_values = render_spark(task.spark, context)
    spark = task.spark
    driver, executor = spark.driver, spark.executor
    return SparkJob(
        main_application_file=spark.main_application_file,
        arguments=tuple(arguments),
        conf=tuple(sorted(conf_values.items())),
        image=spark.image,
        driver_cores=getattr(driver, "cores", None),
        driver_memory=getattr(driver, "memory", None),
        executor_instances=getattr(executor, "instances", None),
        executor_cores=getattr(executor, "cores", None),
        executor_memory=getattr(executor, "memory", None),
    )
