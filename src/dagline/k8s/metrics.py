"""The operator's metrics in the Prometheus text format (version 0.0.4).

Database gauges (runs and task instances by state) are read at scrape time and are the same in every
replica: aggregate them with `max`, not `sum`. The counters and the loop figures are per replica.
"""

from __future__ import annotations

import time

from sqlalchemy import func, select

from dagline.db.models import RUN_STATES, TI_STATES, dag_run_t, ti_t


def _family(name: str, kind: str, help_text: str, samples: list[tuple[dict[str, str], float]]) -> list[str]:
    lines = [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
    for labels, value in samples:
        label_text = ",".join(f'{key}="{val}"' for key, val in labels.items())
        lines.append(f"{name}{{{label_text}}} {value:g}" if label_text else f"{name} {value:g}")
    return lines


def render(runtime) -> str:
    """Every metric of a replica, as one text page."""
    lines: list[str] = []
    try:
        with runtime.db.begin() as conn:
            runs = dict(conn.execute(select(dag_run_t.c.state, func.count()).group_by(dag_run_t.c.state)).all())
            tis = dict(conn.execute(select(ti_t.c.state, func.count()).group_by(ti_t.c.state)).all())
        database_up = 1
    except Exception:  # noqa: BLE001 - the page says the database is down instead of failing
        runs, tis, database_up = None, None, 0
    lines += _family("dagline_database_up", "gauge", "1 if the database answered this scrape.", [({}, database_up)])
    if runs is not None:
        lines += _family("dagline_dag_runs", "gauge", "DAG runs in the database, by state.",
                         [({"state": state}, runs.get(state, 0)) for state in RUN_STATES])
        lines += _family("dagline_task_instances", "gauge", "Task instances in the database, by state.",
                         [({"state": state}, tis.get(state, 0)) for state in TI_STATES])
    health = runtime.health
    if runtime.scheduler is not None:
        lines += _family("dagline_scheduler_loops_total", "counter", "Scheduler loop iterations of this replica.",
                         [({}, health.loops)])
        lines += _family("dagline_scheduler_failed_loops_total", "counter",
                         "Iterations ended by a database error (the loop carried on after a backoff).",
                         [({}, runtime.scheduler.failed_loops)])
        lines += _family("dagline_scheduler_loop_duration_seconds", "gauge", "How long the last iteration took.",
                         [({}, round(health.last_loop_s, 6))])
        if health.scheduler_beat is not None:
            lines += _family("dagline_scheduler_last_loop_age_seconds", "gauge",
                             "Seconds since the last iteration ended.",
                             [({}, round(time.monotonic() - health.scheduler_beat, 3))])
    stats = runtime.sync.stats
    lines += _family("dagline_status_syncs_total", "counter", "Status syncs (database -> objects) done.",
                     [({}, stats.syncs)])
    lines += _family("dagline_status_sync_failures_total", "counter", "Status syncs ended by an outage.",
                     [({}, stats.failed_syncs)])
    lines += _family("dagline_status_patches_total", "counter", "Object statuses written by the status sync.",
                     [({}, stats.status_patches)])
    lines += _family("dagline_dagrun_objects_created_total", "counter", "DagRun objects created for runs.",
                     [({}, stats.dagruns_created)])
    lines += _family("dagline_dagrun_objects_deleted_total", "counter",
                     "DagRun objects deleted by the history limit.", [({}, stats.dagruns_deleted)])
    return "\n".join(lines) + "\n"
