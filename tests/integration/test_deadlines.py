"""Deadlines: a run or task instance not done at its deadline is recorded once (even with two replicas
on PostgreSQL), shown by `runs list` / `tasks list`, counted, and fires its `deadline_miss` callbacks;
one done in time fires nothing. The loop finds misses at the deadline, not when the task ends."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

from click.testing import CliRunner
from sqlalchemy import select

from dagline import metrics
from dagline.cli import main
from dagline.clock import FixedClock
from dagline.db.models import callback_outbox_t, dag_run_t, ti_t
from dagline.db.outbox import list_deliveries
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.deadlines import record_missed_deadlines
from dagline.scheduler.loop import Scheduler
from dagline.store.pools import set_pool
from tests.helpers import prometheus
from tests.helpers.harness import apply, backfill, events, runs, schedule, t, tis, write_dag
from tests.helpers.polling import wait_for
from tests.helpers.receiver import Receiver

DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: sales}
spec:
  paused: false
  schedule: "@daily"
  startDate: "2026-03-01T00:00:00"
  catchup: false
  deadline: {within: PT2H, of: data_interval_end}
  callbacks:
    - {events: [deadline_miss, success], log: {}}
  tasks:
    - {id: extract, spark: {mainApplicationFile: e.py}}
    - id: load
      upstream: [extract]
      pool: warehouse
      deadline: {within: PT30M}
      callbacks: [{events: [deadline_miss], log: {}}]
      spark: {mainApplicationFile: l.py}
"""


def _misses(db) -> list:
    return events(db, entity="deadline")


def _deliveries(db) -> list:
    with db.begin() as conn:
        return list_deliveries(conn)


def test_a_run_and_a_task_not_done_at_their_deadlines_are_recorded_once_at_the_deadline(db, tmp_path):
    apply(db, write_dag(tmp_path, DAG))
    set_pool(db, "warehouse", 0, now=t("2026-03-02T00:00:00Z"))  # `load` cannot start: the run stays running
    schedule(db, "2026-03-02T00:10:00Z")
    (run,) = runs(db, "sales")
    assert run["state"] == "running" and run["deadline"] == "2026-03-02T02:00:00+00:00"
    assert run["deadline_missed_at"] is None and _misses(db) == []

    before = metrics.DEADLINE_MISSES.labels(kind="task")._value.get()
    schedule(db, "2026-03-02T00:30:00Z")  # the task's deadline (interval end + 30 min), the run's not yet
    (miss,) = _misses(db)
    assert (miss.task_id, miss.at) == ("load", t("2026-03-02T00:30:00Z"))
    assert metrics.DEADLINE_MISSES.labels(kind="task")._value.get() == before + 1
    assert runs(db, "sales")[0]["deadline_missed_at"] is None

    schedule(db, "2026-03-02T02:00:00Z")
    schedule(db, "2026-03-02T03:00:00Z")  # noticed again by a later loop: still one record each
    assert [(m.task_id, m.at) for m in _misses(db)] == [
        ("load", t("2026-03-02T00:30:00Z")), (None, t("2026-03-02T02:00:00Z"))]
    (run,) = runs(db, "sales")
    assert run["deadline_missed_at"] == "2026-03-02T02:00:00+00:00"
    assert tis(db, run["id"])["load"].deadline_missed_at == t("2026-03-02T00:30:00Z")
    assert tis(db, run["id"])["extract"].deadline_missed_at is None  # no deadline of its own

    # the callbacks: one per miss, delivered by the loop through the outbox (log channel)
    delivered = [(d.event, d.task_id, d.state) for d in _deliveries(db)]
    assert delivered == [("deadline_miss", "load", "delivered"), ("deadline_miss", None, "delivered")]
    body = _deliveries(db)[1].payload
    assert body["event"] == "deadline_miss" and body["deadline"] == "2026-03-02T02:00:00+00:00"
    assert body["state"] == "running" and body["run_id"] == run["run_id"] and body["kind"] == "run"

    # the run finishes late: its success fires, but no second miss
    set_pool(db, "warehouse", 1, now=t("2026-03-02T03:00:00Z"))
    schedule(db, "2026-03-02T03:05:00Z")
    assert runs(db, "sales")[0]["state"] == "success"
    assert len(_misses(db)) == 2
    assert [d.event for d in _deliveries(db)] == ["deadline_miss", "deadline_miss", "success"]


def test_a_run_done_before_its_deadline_fires_nothing(db, tmp_path):
    apply(db, write_dag(tmp_path, DAG))
    set_pool(db, "warehouse", 1, now=t("2026-03-02T00:00:00Z"))
    schedule(db, "2026-03-02T00:10:00Z")
    assert runs(db, "sales")[0]["state"] == "success"
    schedule(db, "2026-03-02T05:00:00Z")
    assert _misses(db) == []
    assert [d.event for d in _deliveries(db)] == ["success"]
    with db.begin() as conn:  # nothing left for the deadline index to look at
        open_runs = conn.execute(select(dag_run_t.c.id).where(dag_run_t.c.deadline_missed_at.is_(None),
                                                               dag_run_t.c.state.in_(("queued", "running")))).all()
    assert open_runs == []


def test_runs_list_and_tasks_list_show_the_deadline_and_the_miss(db, tmp_path):
    apply(db, write_dag(tmp_path, DAG))
    set_pool(db, "warehouse", 0, now=t("2026-03-02T00:00:00Z"))
    schedule(db, "2026-03-02T02:30:00Z")
    cli = CliRunner()
    url = str(db.engine.url.render_as_string(hide_password=False))
    listed = json.loads(cli.invoke(main, ["--db", url, "runs", "list", "sales", "--json"]).output)
    assert listed[0]["deadline"] == "2026-03-02T02:00:00+00:00"
    assert listed[0]["deadline_missed_at"] == "2026-03-02T02:30:00+00:00"
    text = cli.invoke(main, ["--db", url, "runs", "list", "sales"]).output
    assert "MISSED 2026-03-02 02:00+00:00" in text
    run_id = listed[0]["run_id"]
    tasks = {r["task_id"]: r for r in json.loads(cli.invoke(main, ["--db", url, "tasks", "list", run_id, "--json"]).output)}
    assert tasks["load"]["deadline"] == "2026-03-02T00:30:00+00:00"
    assert tasks["load"]["deadline_missed_at"] == "2026-03-02T02:30:00+00:00"
    assert tasks["extract"]["deadline"] is None and tasks["extract"]["deadline_missed_at"] is None
    assert "MISSED 2026-03-02 00:30+00:00" in cli.invoke(main, ["--db", url, "tasks", "list", run_id]).output


def test_two_replicas_noticing_one_miss_at_once_record_it_once(pg_db, tmp_path):
    """Replica A's UPDATE holds the row; replica B's waits for it, then finds the miss recorded."""
    apply(pg_db, write_dag(tmp_path, DAG))
    set_pool(pg_db, "warehouse", 0, now=t("2026-03-02T00:00:00Z"))
    schedule(pg_db, "2026-03-02T00:10:00Z")
    now = t("2026-03-02T02:00:00Z")
    a = pg_db.engine.connect()
    tx = a.begin()
    first = record_missed_deadlines(a, now=now, who="scheduler:a")
    assert (first.runs, first.tasks) == (1, 1)
    second = {}

    def replica_b():
        with pg_db.begin() as b:
            second["misses"] = record_missed_deadlines(b, now=now, who="scheduler:b")

    thread = threading.Thread(target=replica_b)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive()  # B waits on A's row lock...
    tx.commit()
    a.close()
    thread.join(10)
    assert (second["misses"].runs, second["misses"].tasks) == (0, 0)  # ...then sees it recorded
    assert len(_misses(pg_db)) == 2
    with pg_db.begin() as conn:
        rows = conn.execute(select(callback_outbox_t.c.event, callback_outbox_t.c.task_id)).all()
    assert sorted(rows, key=str) == sorted([("deadline_miss", None), ("deadline_miss", "load")], key=str)
    with pg_db.begin() as conn:
        (load,) = conn.execute(select(ti_t).where(ti_t.c.task_id == "load")).all()
    assert load.deadline_missed_at == now


def test_two_replica_loops_running_at_once_past_the_deadline_record_each_miss_once(pg_db, tmp_path):
    apply(pg_db, write_dag(tmp_path, DAG))
    set_pool(pg_db, "warehouse", 0, now=t("2026-03-02T00:00:00Z"))
    schedule(pg_db, "2026-03-02T00:10:00Z")
    before = sum(metrics.DEADLINE_MISSES.labels(kind=k)._value.get() for k in ("run", "task"))
    clock = FixedClock(t("2026-03-02T03:00:00Z"))
    replicas = [Scheduler(pg_db, NoopExecutor(8, clock=clock), clock=clock) for _ in range(2)]
    for replica in replicas:
        replica.start()
    barrier = threading.Barrier(2)

    def loop(replica):
        barrier.wait()
        for _ in range(3):
            replica.iterate()

    threads = [threading.Thread(target=loop, args=(r,)) for r in replicas]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for replica in replicas:
        replica.stop()
    assert sorted((m.task_id or "") for m in _misses(pg_db)) == ["", "load"], [tuple(m) for m in _misses(pg_db)]
    assert sum(metrics.DEADLINE_MISSES.labels(kind=k)._value.get() for k in ("run", "task")) == before + 2
    assert sorted(d.task_id or "" for d in _deliveries(pg_db) if d.event == "deadline_miss") == ["", "load"]


def test_backfill_runs_have_no_deadline(db, tmp_path):
    apply(db, write_dag(tmp_path, DAG))
    backfill(db, "sales", "2026-03-01", "2026-03-03", now="2026-03-10T00:00:00Z")
    schedule(db, "2026-03-10T00:00:00Z")
    filled = [r for r in runs(db, "sales") if r["run_type"] == "backfill"]
    assert len(filled) == 3 and all(r["deadline"] is None for r in filled)
    (scheduled,) = [r for r in runs(db, "sales") if r["run_type"] == "scheduled"]  # the latest interval
    assert scheduled["deadline"] == "2026-03-10T02:00:00+00:00"
    assert _misses(db) == []


LATE = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: late}
spec:
  paused: false
  schedule: "@daily"
  startDate: "2026-03-01T00:00:00"
  catchup: false
  deadline: {within: PT1H}
  callbacks:
    - {events: [deadline_miss], log: {}}
    - {events: [deadline_miss], webhook: {urlFrom: {env: SECRET_HOOK_URL}}}
  tasks:
    - {id: load, pool: warehouse, spark: {mainApplicationFile: l.py}}
"""


def test_a_real_replicas_metrics_page_counts_the_miss_and_the_callback_deliveries(pg_db, tmp_path):
    """`dagline scheduler --metrics-port` with its clock past the run's deadline: the miss and the two
    deliveries (log line, webhook to a real local receiver) appear on the scraped page."""
    apply(pg_db, write_dag(tmp_path, LATE))
    set_pool(pg_db, "warehouse", 0, now=t("2026-03-02T00:00:00Z"))  # `load` cannot start: the run stays open
    receiver = Receiver()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "SECRET_HOOK_URL": receiver.url, "DAGLINE_SCHEDULER_POLL_INTERVAL_S": "0.05",
           "DAGLINE_CALLBACK_ALLOWED_NETWORKS": receiver.allowed_networks}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dagline.cli", "--db", pg_db.url, "scheduler", "--executor", "noop",
         "--metrics-port", str(port), "--now", "2026-03-02T01:30:00Z"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    value = prometheus.value

    def settled():
        page = prometheus.scrape(port)
        done = value(page, "dagline_callback_deliveries_total", channel="webhook", outcome="delivered") == 1
        return page if done and value(page, "dagline_callback_deliveries_total", channel="log",
                                      outcome="delivered") == 1 else None

    try:
        page = wait_for(settled, "the miss's deliveries on the metrics page", timeout=60, tolerate=(OSError,))
    finally:
        proc.terminate()
        proc.wait(30)
        receiver.close()
    assert value(page, "dagline_deadline_misses_total", kind="run") == 1
    assert value(page, "dagline_deadline_misses_total", kind="task") in (None, 0)  # no task deadline
    assert value(page, "dagline_callback_delivery_duration_seconds_count", channel="webhook") == 1
    for phase in ("callbacks", "deadlines"):
        assert value(page, "dagline_scheduler_loop_phase_duration_seconds_count", phase=phase) > 0, phase
    [body] = receiver.bodies()
    assert (body["event"], body["kind"], body["deadline"]) == ("deadline_miss", "run", "2026-03-02T01:00:00+00:00")
