"""`dagline scheduler --log-format json`: every line of its log is a JSON object, with one line per
decision worth knowing (run created, task queued, task and run finished, callbacks...), logged only
once the decision is committed."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

from dagline.clock import FixedClock
from dagline.db import decisions
from dagline.executors.noop import NoopExecutor
from dagline.logformat import DECISIONS, JsonFormatter
from dagline.scheduler.loop import Scheduler
from dagline.scheduler.settings import SchedulerSettings
from dagline.store.runs import trigger_run
from tests.helpers.harness import apply, t, write_dag

DAG = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: logged}
spec:
  paused: false
  schedule: null
  callbacks: [{events: [success], log: {}}]
  tasks:
    - {id: a, spark: {mainApplicationFile: a.py}}
    - {id: b, upstream: [a], spark: {mainApplicationFile: b.py}}
"""


def _schedule_one_run(db, tmp_path, *options: str) -> subprocess.CompletedProcess:
    """Apply the DAG, trigger one run and let a real `dagline scheduler` process run it to the end."""
    apply(db, write_dag(tmp_path, DAG))
    trigger_run(db, "logged", logical_date=t("2026-03-01"), now=t("2026-03-01"))
    url = db.engine.url.render_as_string(hide_password=False)
    done = subprocess.run(
        [sys.executable, "-m", "dagline.cli", "--db", url, "scheduler", "--executor", "noop", "--until-idle",
         *options, "--now", "2026-03-01T00:00:00Z"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def test_json_log_has_one_line_per_decision(db, tmp_path):
    done = _schedule_one_run(db, tmp_path, "--log-format", "json")
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]  # every line is JSON
    assert all({"ts", "level", "logger", "message"} <= line.keys() for line in lines)
    made = [(line["decision"], line.get("task_id"), line.get("to_state")) for line in lines if "decision" in line]
    assert ("run_started", None, "running") in made
    assert [m for m in made if m[0] == "ti_queued"] == [("ti_queued", "a", "queued"), ("ti_queued", "b", "queued")]
    assert ("ti_finished", "b", "success") in made and ("run_finished", None, "success") in made
    assert made.index(("ti_queued", "a", "queued")) < made.index(("ti_queued", "b", "queued"))
    finished = next(line for line in lines if line.get("decision") == "run_finished")
    assert finished["dag_id"] == "logged" and finished["at"] == "2026-03-01T00:00:00+00:00"
    callback = next(line for line in lines if line.get("decision") == "callback")
    assert callback["event"] == "success" and callback["kind"] == "run" and callback["delivery_id"]


def test_text_is_the_default_and_has_no_decision_lines(db, tmp_path):
    done = _schedule_one_run(db, tmp_path)
    assert "ti queued:" not in done.stderr and not done.stderr.lstrip().startswith("{")
    assert ": run success" in done.stderr  # the `log` callback's line, in text


def test_a_rolled_back_decision_is_never_logged(db, caplog):
    logger = logging.getLogger("dagline.decisions")
    logger.setLevel(logging.INFO)
    try:
        row = {"at": t("2026-03-01"), "who": "test", "entity": "task_instance", "dag_id": "d", "dag_run_id": 1,
               "task_id": "x", "from_state": "scheduled", "to_state": "queued"}
        with caplog.at_level(logging.INFO, logger="dagline.decisions"):
            try:
                with db.begin() as conn:
                    decisions.note(conn, [row])
                    raise RuntimeError("rolled back")
            except RuntimeError:
                pass
            assert caplog.records == []
            with db.begin() as conn:
                decisions.note(conn, [row])
            assert [r.decision for r in caplog.records] == ["ti_queued"]
    finally:
        logger.setLevel(logging.WARNING)


def test_timeouts_zombies_adoptions_and_dead_replicas_are_decisions():
    # the detail texts the housekeeping and adoption code write
    assert decisions.kind_of({"entity": "task_instance", "to_state": "up_for_retry",
                              "detail": "timed out: running longer than its executionTimeout"}) == "timeout"
    assert decisions.kind_of({"entity": "task_instance", "to_state": "failed",
                              "detail": "zombie: its replica died and no job of this try was found"}) == "zombie"
    assert decisions.kind_of({"entity": "scheduler", "detail": "scheduler 2 adopts 3 task instances of scheduler 1: "
                                                               "ids 1, 2, 3"}) == "adoption"
    assert decisions.kind_of({"entity": "scheduler", "from_state": "running", "to_state": "dead"}) == "replica_dead"
    assert decisions.kind_of({"entity": "dag_run", "from_state": None, "to_state": "queued"}) == "run_created"
    assert decisions.kind_of({"entity": "deadline", "from_state": "running", "to_state": "running"}) == "deadline_missed"
    assert decisions.kind_of({"entity": "task_instance", "from_state": "none", "to_state": "scheduled"}) is None


WATCHED = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: watched}
spec:
  paused: false
  schedule: "@daily"
  startDate: "2026-03-01T00:00:00"
  catchup: false
  tasks:
    - {id: slow, retries: 1, retryDelay: PT1M, executionTimeout: PT10M, spark: {mainApplicationFile: s.py}}
    - {id: long, retries: 1, spark: {mainApplicationFile: l.py}}
"""


class _Lines(logging.Handler):
    """The JSON lines `--log-format json` would print, kept in memory."""

    def __init__(self):
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.lines: list[dict] = []

    def emit(self, record):
        self.lines.append(json.loads(self.format(record)))


def test_run_created_ti_queued_timeout_and_adoption_are_json_lines_from_real_loops(pg_db, tmp_path):
    """Two replicas on PostgreSQL: A creates the scheduled run and queues both tasks; B, whose clock is past
    `slow`'s executionTimeout, times it out; A stops gracefully and B adopts `long`. Each is one JSON line."""
    apply(pg_db, write_dag(tmp_path, WATCHED))
    logger, lines = logging.getLogger(DECISIONS), _Lines()
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)  # what logformat.configure("json") does
    fast = SchedulerSettings(heartbeat_interval_s=1.0, replica_timeout_s=2.0, poll_interval_s=0.05,
                             housekeeping_interval_s=1e-6)
    a_clock, b_clock = FixedClock(t("2026-03-02T00:00:00Z")), FixedClock(t("2026-03-02T00:10:01Z"))
    a = Scheduler(pg_db, NoopExecutor(4, clock=a_clock, duration_s=3600), clock=a_clock, settings=fast)
    b = Scheduler(pg_db, NoopExecutor(4, clock=b_clock, duration_s=3600), clock=b_clock, settings=fast)
    try:
        a.start()
        a.iterate()
        a.iterate()
        b.start()
        b.iterate()  # past slow's executionTimeout: B times it out (A still runs the job)
        a.request_stop()
        a.stop()  # graceful: `long` keeps running, for a peer to adopt
        b.iterate()
    finally:
        for replica in (a, b):
            replica.stop()
        logger.removeHandler(lines)
        logger.setLevel(logging.WARNING)
    made = [line for line in lines.lines if "decision" in line]
    assert all({"ts", "level", "logger", "message", "at", "who"} <= line.keys() for line in made)

    (created,) = [line for line in made if line["decision"] == "run_created"]
    assert (created["dag_id"], created["to_state"], created["who"]) == ("watched", "queued", a.who)
    queued = sorted(line["task_id"] for line in made if line["decision"] == "ti_queued" and line["who"] == a.who)
    assert queued == ["long", "slow"]
    (timeout,) = [line for line in made if line["decision"] == "timeout"]
    assert (timeout["task_id"], timeout["to_state"], timeout["who"]) == ("slow", "up_for_retry", b.who)
    assert timeout["at"] == "2026-03-02T00:10:01+00:00" and "executionTimeout" in timeout["detail"]
    (adoption,) = [line for line in made if line["decision"] == "adoption"]
    assert adoption["who"] == b.who and f"of scheduler {a.replica_id}" in adoption["detail"]
