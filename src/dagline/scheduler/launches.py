"""Turning queued task instances into executor launches: render the task's templates for its run
and resolve where its files live. A template that fails to render fails the try, with the reason."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.engine import Connection

from dagline.dagstore import DagCache
from dagline.db.models import dag_run_t, dag_version_t
from dagline.executors.base import SparkJob, TaskKey, TaskLaunch
from dagline.scheduler.critical_section import QueuedTI
from dagline.spec import Task
from dagline.templating import build_context, has_template, render_spark
from dagline.times import duration_seconds


def build_launches(
    conn: Connection, queued: Sequence[QueuedTI], *, dags: DagCache
) -> tuple[list[TaskLaunch], list[tuple[QueuedTI, str]]]:
    """Launches for these TIs, and the TIs whose templates could not be rendered (with the error)."""
    if not queued:
        return [], []
    runs = {
        row.id: row for row in conn.execute(
            select(dag_run_t.c.id, dag_run_t.c.run_id, dag_run_t.c.logical_date, dag_run_t.c.data_interval_start,
                   dag_run_t.c.data_interval_end, dag_run_t.c.conf, dag_version_t.c.source_dir)
            .join(dag_version_t, dag_version_t.c.id == dag_run_t.c.dag_version_id)
            .where(dag_run_t.c.id.in_({q.dag_run_id for q in queued})))
    }
    versions = dags.get_many(conn, {q.dag_version_id for q in queued})
    launches, broken = [], []
    for q in queued:
        dag = versions[q.dag_version_id]
        run = runs[q.dag_run_id]
        task = dag.tasks[q.task_id]
        try:
            job = render_job(task, dag, run_id=run.run_id, logical_date=run.logical_date,
                             data_interval=(run.data_interval_start, run.data_interval_end),
                             try_number=q.try_number, conf=run.conf or {})
        except ValueError as exc:
            broken.append((q, f"template error: {exc}"))
            continue
        timeout = duration_seconds(task.execution_timeout) if task.execution_timeout is not None else None
        launches.append(TaskLaunch(
            ti_id=q.ti_id, key=TaskKey(q.dag_id, run.run_id, q.task_id, q.try_number), job=job,
            working_dir=run.source_dir, timeout_s=timeout,
        ))
    return launches, broken


def render_job(task: Task, dag, *, run_id: str, logical_date: dt.datetime,
               data_interval: tuple[dt.datetime, dt.datetime], try_number: int, conf: dict) -> SparkJob:
    spark = task.spark
    context = {}  # plain text renders as itself: build the variables (dates in the DAG's zone) only when used
    if any(has_template(text) for text in (*spark.arguments, *spark.conf.values())):
        context = build_context(
            dag_id=dag.dag_id, task_id=task.task_id, run_id=run_id, logical_date=logical_date,
            data_interval_start=data_interval[0], data_interval_end=data_interval[1], try_number=try_number,
            params={**dag.spec.params, **conf}, conf=conf, timezone=dag.timezone,  # a run's conf overrides params
        )
    arguments, conf_values = render_spark(spark, context)
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
