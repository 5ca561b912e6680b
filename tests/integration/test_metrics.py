"""A real replica's /metrics page: `dagline scheduler --metrics-port` on PostgreSQL, scraped over HTTP
before and after it does work. The clock is frozen with `--now`, so the figures are exact."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from sqlalchemy import func, select

from dagline.db.models import ti_t
from dagline.domain.states import TIState
from tests.helpers import prometheus
from tests.helpers.harness import apply, write_dag

NOW = "2026-03-03T00:00:00+00:00"

DAGS = """\
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: daily}
spec:
  schedule: "@daily"
  startDate: "2026-03-01T00:00:00"
  catchup: true
  paused: true
  tasks:
    - id: extract
      spark: {mainApplicationFile: job.py}
    - id: load
      upstream: [extract]
      spark: {mainApplicationFile: job.py}
    - id: report
      upstream: [load]
      spark: {mainApplicationFile: job.py}
---
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: broken}
spec:
  schedule: "@daily"
  startDate: "2026-03-02T00:00:00"
  catchup: true
  paused: true
  tasks:
    - id: fails
      spark: {mainApplicationFile: job.py, conf: {dagline.noop.outcome: failed}}
    - id: bad-template
      spark: {mainApplicationFile: job.py, arguments: ["{{ 1 / 0 }}"]}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(predicate, what: str, proc, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except OSError:  # the server is not listening yet
            value = None
        if value:
            return value
        assert proc.poll() is None, f"the replica exited while waiting for {what}: {proc.stderr.read()}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _finished_tis(db) -> int:
    with db.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(ti_t).where(ti_t.c.state.in_(TIState.FINISHED))).scalar()


def _unpause(db, *dag_ids):
    for dag_id in dag_ids:
        subprocess.run([sys.executable, "-m", "dagline.cli", "--db", db.url, "dags", "unpause", dag_id, "--now", NOW],
                       check=True, capture_output=True)


def test_a_replicas_metrics_move_as_it_creates_runs_and_finishes_task_instances(pg_db, tmp_path):
    apply(pg_db, write_dag(tmp_path, DAGS), now=NOW)
    port = _free_port()
    env = dict(os.environ, DAGLINE_SCHEDULER_POLL_INTERVAL_S="0.05")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagline.cli", "--db", pg_db.url, "scheduler", "--executor", "noop",
         "--metrics-port", str(port), "--now", NOW], env=env, stderr=subprocess.PIPE, text=True)
    try:
        def idle_page():
            page = prometheus.scrape(port)
            return page if (prometheus.value(page, "dagline_scheduler_loops_total") or 0) >= 2 else None

        before = _wait_for(idle_page, "two loops of the paused replica", proc)
        value = prometheus.value
        assert value(before, "dagline_database_up") == 1
        assert value(before, "dagline_dag_runs_created_total", run_type="scheduled") == 0
        assert value(before, "dagline_task_instances", state="running") == 0
        assert value(before, "dagline_pool_slots", pool="default", pool_namespace="") == 128
        assert value(before, "dagline_pool_slots_free", pool="default", pool_namespace="") == 128
        examined_before = value(before, "dagline_scheduler_loop_phase_duration_seconds_count", phase="examine")
        assert examined_before >= 2  # every loop examines, even when nothing runs

        _unpause(pg_db, "daily", "broken")
        _wait_for(lambda: _finished_tis(pg_db) == 3 * 2 + 2, "every task instance to finish", proc)

        def settled_page():  # the transaction that finished the last TI has committed; one more loop
            page = prometheus.scrape(port)
            done = value(page, "dagline_dag_runs_finished_total", state="success") == 2
            return page if done and value(page, "dagline_dag_runs_finished_total", state="failed") == 1 else None

        after = _wait_for(settled_page, "the page to show the finished runs", proc)
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stderr.close()

    # Runs: daily for 03-01 (due at 03-02, created a day late) and 03-02 (due now); broken for 03-02.
    assert value(after, "dagline_dag_runs_created_total", run_type="scheduled") == 3
    assert value(after, "dagline_dag_run_schedule_delay_seconds_count") == 3
    assert value(after, "dagline_dag_run_schedule_delay_seconds_sum") == 86400.0
    assert value(after, "dagline_dag_run_schedule_delay_seconds_bucket", le="0.01") == 2
    # The database gauges count what is not finished yet (ADR 0075): nothing is left; finished runs and
    # task instances are counted by the counters below, never by reading the whole history at a scrape.
    assert value(after, "dagline_dag_runs", state="running") == 0
    assert value(after, "dagline_dag_runs", state="queued") == 0
    assert value(after, "dagline_dag_runs", state="success") is None
    assert value(after, "dagline_task_instances", state="queued") == 0
    assert value(after, "dagline_task_instances", state="success") is None
    # Task instances: 6 succeeded, one failed in its job, one could not be launched (its template fails).
    assert value(after, "dagline_task_instance_transitions_total", state="success") == 6
    assert value(after, "dagline_task_instance_transitions_total", state="failed") == 2
    assert value(after, "dagline_task_instance_transitions_total", state="queued") == 8
    assert value(after, "dagline_executor_launches_total", executor="noop") == 7
    assert value(after, "dagline_executor_launch_failures_total", executor="noop") == 1
    assert value(after, "dagline_executor_reports_total", executor="noop", state="success") == 6
    assert value(after, "dagline_executor_reports_total", executor="noop", state="failed") == 1
    assert value(after, "dagline_executor_queue_depth", executor="noop") == 0
    assert value(after, "dagline_pool_slots_used", pool="default", pool_namespace="") == 0
    # The loop's phases were timed: more examinations than before, and runs were created and queued.
    assert value(after, "dagline_scheduler_loop_phase_duration_seconds_count", phase="examine") > examined_before
    for phase in ("create_runs", "start_runs", "critical_section", "launch", "executor_sync"):
        assert value(after, "dagline_scheduler_loop_phase_duration_seconds_count", phase=phase) > 0, phase
        assert value(after, "dagline_scheduler_loop_phase_duration_seconds_sum", phase=phase) > 0, phase
    assert value(after, "dagline_scheduler_critical_section_busy_total") == 0  # one replica: never busy
    # A scheduled task waited between becoming ready and being queued; all 8 were measured.
    assert value(after, "dagline_task_instance_queue_delay_seconds_count") == 8


def test_a_metrics_port_in_use_is_a_clear_error(pg_db):
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "dagline.cli", "--db", pg_db.url, "scheduler", "--executor", "noop",
             "--until-idle", "--metrics-port", str(port)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert f"--metrics-port {port}: cannot serve metrics there" in result.stderr
