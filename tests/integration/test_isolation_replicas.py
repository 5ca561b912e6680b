"""Done-when for issue 11: hostile DAGs in the folder next to a healthy one leave the healthy one on
schedule. Two real `dagline scheduler` replicas on PostgreSQL, the wall clock, three DAGs applied from
one folder: `healthy`, `endless` (a template that never finishes rendering) and `broken` (its stored
version can no longer be read, so creating its runs raises). The healthy DAG's due runs are created
and succeed; every try of `endless` fails on the time budget with the reason; `broken` is recorded as
an import error; both replicas keep running and stop cleanly on SIGTERM."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time

from click.testing import CliRunner
from sqlalchemy import select, update

from dagline.cli import main
from dagline.db.models import dag_t, dag_version_t, replica_t
from tests.helpers.harness import events, runs, ti_states, write_dag

DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: %(name)s}
spec:
  schedule: "@daily"
  startDate: "%(start)s"
  catchup: true
  paused: false
  tasks:
    - {id: a, spark: {mainApplicationFile: a.py, arguments: ["%(argument)s"]}}
    - {id: b, upstream: [a], spark: {mainApplicationFile: b.py}}
"""
NEVER_ENDS = "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}"


def _wait_for(predicate, what: str, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_hostile_dags_next_to_a_healthy_one_leave_it_on_schedule_with_two_replicas(pg_db, tmp_path):
    start = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=3)).date().isoformat()
    folder = tmp_path / "dags"
    folder.mkdir()
    for name, argument in (("healthy", "{{ ds }}"), ("endless", NEVER_ENDS), ("broken", "{{ ds }}")):
        write_dag(folder, DAG % {"name": name, "start": start, "argument": argument}, f"{name}.yaml")
    applied = CliRunner().invoke(main, ["--db", pg_db.url, "dags", "apply", str(folder)])
    assert applied.exit_code == 0, applied.output
    with pg_db.begin() as conn:  # `broken`'s stored spec can no longer be read (as one stored before a bound)
        version_id = conn.execute(select(dag_t.c.current_version_id).where(dag_t.c.dag_id == "broken")).scalar_one()
        conn.execute(update(dag_version_t).where(dag_version_t.c.id == version_id)
                     .values(spec={"schedule": "@daily", "startDate": start, "tasks": []}))

    env = dict(os.environ, DAGLINE_SCHEDULER_POLL_INTERVAL_S="0.1", DAGLINE_SCHEDULER_HOUSEKEEPING_INTERVAL_S="1",
               DAGLINE_SCHEDULER_TEMPLATE_TIME_BUDGET_S="1")
    replicas = [subprocess.Popen([sys.executable, "-m", "dagline.cli", "--db", pg_db.url, "scheduler", "--executor",
                                  "noop", "--parallelism", "4"], env=env, stderr=subprocess.DEVNULL)
                for _ in range(2)]
    try:
        def healthy_done():
            done = [r for r in runs(pg_db, "healthy") if r["state"] == "success"]
            return len(done) >= 3

        def endless_done():
            found = runs(pg_db, "endless")
            return len(found) >= 3 and all(r["state"] == "failed" for r in found)

        _wait_for(healthy_done, "the healthy DAG's three due runs to succeed")
        _wait_for(endless_done, "every run of the endless DAG to fail")
        assert all(p.poll() is None for p in replicas), "a replica stopped"
    finally:
        for proc in replicas:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(60) for proc in replicas]  # generous: a render in progress is abandoned at once
    assert codes == [0, 0]

    healthy = runs(pg_db, "healthy")
    assert [r["logical_date"][:10] for r in healthy][:3] == [
        (dt.date.fromisoformat(start) + dt.timedelta(days=i)).isoformat() for i in range(3)]
    assert all(ti_states(pg_db, r["id"]) == {"a": "success", "b": "success"} for r in healthy if r["state"] == "success")
    for run in runs(pg_db, "endless"):
        assert ti_states(pg_db, run["id"]) == {"a": "failed", "b": "upstream_failed"}
    reasons = {e.detail for e in events(pg_db, entity="task_instance", dag_id="endless", to_state="failed")}
    assert reasons and all("task a, spark.arguments[0]: " in r and "time budget of 1s" in r for r in reasons)
    assert runs(pg_db, "broken") == []
    listed = {r["dag_id"]: r for r in json.loads(
        CliRunner().invoke(main, ["--db", pg_db.url, "dags", "list", "--json"]).output)}
    assert listed["healthy"]["import_error"] is None and listed["endless"]["import_error"] is None
    assert listed["broken"]["import_error"].startswith("creating runs: ") and "spec.tasks" in listed["broken"]["import_error"]
    with pg_db.begin() as conn:
        states = sorted(row.state for row in conn.execute(select(replica_t)))
    assert states == ["stopped", "stopped"]
