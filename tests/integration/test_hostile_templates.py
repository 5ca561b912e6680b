"""A hostile template fails its own try, never the scheduler: `dags apply` of a spec whose template
would make 10 GB is quick (nothing is folded at load), a template over a bound or past its time budget
fails that try with a message naming the task and the argument (shown by `tasks list`), the other
DAGs run on, and SIGTERM stops a replica even while it renders a template that never ends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from click.testing import CliRunner
from sqlalchemy import select

from dagline.cli import main
from dagline.clock import FixedClock
from dagline.db.models import replica_t
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.scheduler.settings import SchedulerSettings
from dagline.store.runs import trigger_run
from tests.helpers.harness import assert_invariants, events, t, ti_states, write_dag

NOW = "2026-03-01T00:00:00Z"
DAGS = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: hostile}
spec:
  schedule: null
  paused: false
  params: {items: [a, b]}
  tasks:
    - id: huge
      retries: 3
      spark: {mainApplicationFile: a.py, arguments: ["--ok", "{{ 'x' * 10**10 }}"]}
    - id: endless
      spark: {mainApplicationFile: a.py, conf: {spark.x: "%(endless)s"}}
    - id: method
      spark: {mainApplicationFile: a.py, arguments: ["{{ params.items }}"]}
    - {id: after, upstream: [huge], spark: {mainApplicationFile: b.py}}
---
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: healthy}
spec:
  schedule: null
  paused: false
  tasks:
    - {id: a, spark: {mainApplicationFile: a.py, arguments: ["{{ ds }}"]}}
    - {id: b, upstream: [a], spark: {mainApplicationFile: b.py}}
"""
NEVER_ENDS = "{%% for i in range(99999) %%}{%% for j in range(99999) %%}{%% endfor %%}{%% endfor %%}"


def cli(db, *args):
    return CliRunner().invoke(main, ["--db", db.url, *args])


def test_hostile_templates_fail_their_own_tries_with_the_reason_and_the_healthy_dag_runs(db, tmp_path):
    path = write_dag(tmp_path, DAGS % {"endless": NEVER_ENDS.replace("%%", "%")})
    applied = cli(db, "dags", "apply", path)  # it used to run out of memory folding 'x' * 10**10
    assert applied.exit_code == 0, applied.output
    hostile = trigger_run(db, "hostile", now=t(NOW))
    healthy = trigger_run(db, "healthy", now=t(NOW))
    clock = FixedClock(t(NOW))
    settings = SchedulerSettings(template_time_budget_s=0.5)
    Scheduler(db, NoopExecutor(parallelism=8, clock=clock), clock=clock, settings=settings).run(until_idle=True)

    assert ti_states(db, healthy.id) == {"a": "success", "b": "success"}
    assert ti_states(db, hostile.id) == {"huge": "failed", "endless": "failed", "method": "failed",
                                         "after": "upstream_failed"}
    [huge] = events(db, task_id="huge", to_state="failed")  # no retry: the template will not change
    assert huge.detail.startswith("template error: task huge, spark.arguments[1]: ")
    assert "over the output budget of 1,048,576 characters" in huge.detail
    rows = {r["task_id"]: r for r in json.loads(cli(db, "tasks", "list", str(hostile.id), "--json").output)}
    assert "task endless, spark.conf['spark.x']: " in rows["endless"]["message"]
    assert "did not finish rendering within the time budget of 0.5s" in rows["endless"]["message"]
    assert "task method, spark.arguments[0]: " in rows["method"]["message"]
    assert "outputs the function or method 'items', not a value" in rows["method"]["message"]
    assert "write ['items'] instead of .items" in rows["method"]["message"]
    assert_invariants(db)


def test_sigterm_stops_a_replica_in_the_middle_of_a_render_that_never_ends(pg_db, tmp_path):
    only_endless = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: endless}
spec:
  schedule: null
  paused: false
  tasks:
    - {id: spin, spark: {mainApplicationFile: a.py, arguments: ["%s"]}}
""" % NEVER_ENDS.replace("%%", "%")
    assert cli(pg_db, "dags", "apply", write_dag(tmp_path, only_endless)).exit_code == 0
    run = trigger_run(pg_db, "endless", now=t(NOW))
    env = dict(os.environ, DAGLINE_SCHEDULER_TEMPLATE_TIME_BUDGET_S="3600")  # only SIGTERM can end this render
    proc = subprocess.Popen([sys.executable, "-m", "dagline.cli", "--db", pg_db.url, "scheduler", "--executor",
                             "noop"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while ti_states(pg_db, run.id)["spin"] != "queued":  # queued, committed: now it renders
            assert proc.poll() is None and time.monotonic() < deadline, "the replica never queued the task"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0  # generous: the render alone would take an hour
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    assert ti_states(pg_db, run.id) == {"spin": "queued"}  # left for the next replica, which renders it again
    with pg_db.begin() as conn:
        [job] = conn.execute(select(replica_t)).all()
    assert job.state == "stopped"
    with proc.stderr:
        assert "left unrendered" in proc.stderr.read()
