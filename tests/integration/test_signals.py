"""Signals acted on by the real scheduler loop (noop executor, frozen clock), on SQLite and
PostgreSQL: triggers, start/restart/stop rules, streaming tries, dagline's own task signals,
exactly-once action rows and per-key order."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from click.testing import CliRunner
from sqlalchemy import select, text

from dagline import metrics
from dagline.cli import main
from dagline.clock import FixedClock
from dagline.db import claims
from dagline.db.models import signal_action_t, signal_t, ti_t
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.scheduler.replica.wakeup import Wakeup
from dagline.scheduler.signal_reactions import react_to_signals
from dagline.store.dags import DagCache
from dagline.store.runs import stop_run, stop_task, trigger_run
from dagline.store.signals import send_signal, show_signal
from tests.helpers.harness import apply, assert_invariants, events, runs, t, tis, write_dag

NOW = "2026-05-01T12:00:00+00:00"


class Recording(NoopExecutor):
    """The noop executor, remembering every launch (to read rendered arguments)."""

    def __init__(self, clock):
        super().__init__(parallelism=64, clock=clock)
        self.launched = []

    def launch(self, launches):
        self.launched += launches
        super().launch(launches)

    def args(self, task_id):
        return [(launch.key.try_number, launch.job.arguments) for launch in self.launched
                if launch.key.task_id == task_id]


class Replica:
    """One scheduler kept alive across steps (its streaming noop tries live as long as it does)."""

    def __init__(self, db, now=NOW):
        self.db = db
        self.clock = FixedClock(t(now))
        self.executor = Recording(self.clock)
        self.sched = Scheduler(db, self.executor, clock=self.clock)
        self.sched.start()

    def settle(self, loops=60):
        for _ in range(loops):
            if self.sched.iterate().work == 0:
                return
        raise AssertionError("the scheduler did not settle")

    def send(self, key, value=None, **kw):
        kw.setdefault("source", "user:test")
        with self.db.begin() as conn:
            return send_signal(conn, key, value, now=self.clock.now(), **kw)[0]

    def close(self):
        self.sched.stop()


@pytest.fixture
def replica(db):
    r = Replica(db)
    yield r
    r.close()


def latencies_observed(action: str) -> float:
    """How many actions of this kind `dagline_signal_action_latency_seconds` has observed in this process."""
    return metrics.REGISTRY.get_sample_value("dagline_signal_action_latency_seconds_count", {"action": action}) or 0


def actions(db, seq):
    with db.begin() as conn:
        return show_signal(conn, seq)["actions"]


TRIGGERED = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: features}
spec:
  schedule: null
  paused: false
  maxActiveRuns: 1
  triggers: [{signal: features.ready}]
  tasks:
    - id: build
      spark: {mainApplicationFile: build.py,
              arguments: ["{{ conf.day }}", "{{ signal.key }}", "{{ signal.value.day }}", "{{ signal.seq }}"]}
"""


def test_a_trigger_creates_one_run_per_signal_queued_within_max_active_runs(db, tmp_path, replica):
    apply(db, write_dag(tmp_path, TRIGGERED))
    observed = latencies_observed("trigger")
    seqs = [replica.send("features.ready", {"day": f"2026-05-0{d}"}) for d in (1, 2, 3)]
    again = replica.send("features.ready", {"day": "2026-05-01"}, sender_id="x")
    assert replica.send("features.ready", {"day": "2026-05-01"}, sender_id="x") == again  # a retried send
    replica.sched.iterate()  # one loop: four runs exist, one started (maxActiveRuns 1), three wait queued
    assert latencies_observed("trigger") == observed + 4
    rows = runs(db, "features")
    assert len(rows) == 4 and all(r["run_type"] == "signal" for r in rows)
    assert [r["state"] for r in rows].count("queued") == 3
    replica.settle()
    rows = runs(db, "features")
    assert [r["state"] for r in rows] == ["success"] * 4
    # each run's tries see the signal that created it, as `signal`
    assert sorted(args for _, args in replica.executor.args("build")) == sorted(
        (day, "features.ready", day, str(seq)) for day, seq in zip(("2026-05-01", "2026-05-02", "2026-05-03",
                                                                    "2026-05-01"), (*seqs, again)))
    for seq in seqs:
        [action] = actions(db, seq)
        assert action["action"] == "trigger" and action["run_id"] == f"signal__{seq}"
        assert action["rule"] == "spec.triggers[0]" and action["task_id"] is None
    assert_invariants(db)


PIPELINE = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: ml}
spec:
  schedule: null
  paused: false
  tasks:
    - id: train
      mode: streaming
      spark: {mainApplicationFile: train.py}
    - id: evaluate
      onSignal: [{signal: model.published, action: start, handling: %(handling)s}]
      retries: 0
      spark: {mainApplicationFile: evaluate.py, arguments: ["{{ signal.value.path }}", "{{ signal.seq }}"]}
    - id: serve
      mode: streaming
      onSignal:
        - {signal: model.validated, action: restart}
        - {signal: serving.off, action: stop}
      spark: {mainApplicationFile: serve.py,
              arguments: ["{{ signal.value.path if signal else 'none' }}", "{{ try_number }}"]}
"""


def _ml(db, tmp_path, replica, handling="each"):
    apply(db, write_dag(tmp_path, PIPELINE % {"handling": handling}))
    run = trigger_run(db, "ml", now=replica.clock.now())
    replica.settle()
    return run


def test_a_start_rule_waits_for_its_signal_and_each_signal_starts_one_try_in_order(db, tmp_path, replica):
    run = _ml(db, tmp_path, replica)
    assert {k: v.state for k, v in tis(db, run.id).items()} == {"train": "running", "evaluate": "none",
                                                                "serve": "running"}
    assert runs(db, "ml")[0]["state"] == "running"
    observed = latencies_observed("start")
    seqs = [replica.send("model.published", {"path": f"/m/{i}"}) for i in (1, 2, 3)]
    replica.settle()
    assert latencies_observed("start") == observed + 3  # one sent -> action latency per action row
    assert replica.executor.args("evaluate") == [(i, (f"/m/{i}", str(seq))) for i, seq in zip((1, 2, 3), seqs)]
    for i, seq in enumerate(seqs, 1):
        [action] = actions(db, seq)
        assert (action["action"], action["status"], action["try_number"], action["task_id"]) == \
            ("start", "done", i, "evaluate")
    evaluate = tis(db, run.id)["evaluate"]
    assert (evaluate.state, evaluate.try_number, evaluate.signal_seq) == ("success", 3, seqs[-1])
    assert evaluate.max_tries == 3  # retries 0, yet three tries: signal-started tries use up no retries
    assert runs(db, "ml")[0]["state"] == "running"  # streaming tasks keep it running
    assert_invariants(db)


def test_latest_keeps_only_the_newest_waiting_signal(db, tmp_path, replica):
    _ml(db, tmp_path, replica, handling="latest")
    seqs = [replica.send("model.published", {"path": f"/m/{i}"}) for i in (1, 2, 3)]
    replica.settle()
    assert replica.executor.args("evaluate") == [(1, ("/m/3", str(seqs[2])))]
    assert [a["status"] for seq in seqs for a in actions(db, seq)] == ["superseded", "superseded", "done"]


def test_restart_stops_the_streaming_try_and_starts_one_with_the_new_value_as_one_action(db, tmp_path, replica):
    run = _ml(db, tmp_path, replica)
    assert replica.executor.args("serve") == [(1, ("none", "1"))]
    seq = replica.send("model.validated", {"path": "/m/good"})
    replica.settle()
    assert replica.executor.args("serve") == [(1, ("none", "1")), (2, ("/m/good", "2"))]
    [action] = actions(db, seq)
    assert (action["action"], action["status"], action["try_number"]) == ("restart", "done", 2)
    ends = [(e.try_number, e.from_state, e.to_state) for e in events(db, entity="task_instance", task_id="serve")
            if e.from_state == "running"]
    assert ends == [(1, "running", "success")]  # the stopped streaming try ended success
    off = replica.send("serving.off", True)
    replica.settle()
    serve = tis(db, run.id)["serve"]
    assert (serve.state, serve.try_number) == ("success", 2)
    [action] = actions(db, off)
    assert (action["action"], action["try_number"]) == ("stop", 2)
    assert runs(db, "ml")[0]["state"] == "running"  # train still streams
    stopping, skipped = stop_run(db, str(run.id), now=replica.clock.now())
    assert (stopping, skipped) == (["train"], ["evaluate"])
    assert runs(db, "ml")[0]["state"] == "running"  # its streaming try stops gracefully first
    replica.settle()
    assert tis(db, run.id)["train"].state == "success"  # the stopped streaming try
    assert runs(db, "ml")[0]["state"] == "failed"  # a stopped run is never success
    assert_invariants(db)


def test_tasks_stop_ends_a_batch_try_failed_without_retry(db, tmp_path, replica):
    apply(db, write_dag(tmp_path, """
        apiVersion: dagline.io/v1alpha1
        kind: DAG
        metadata: {name: batch}
        spec:
          schedule: null
          paused: false
          tasks:
            - {id: long, retries: 3, spark: {mainApplicationFile: a.py, conf: {x: "1"}}}
    """))
    replica.executor._duration = (3600.0, 3600.0)  # a try that would run for an hour
    run = trigger_run(db, "batch", now=replica.clock.now())
    replica.settle()
    assert tis(db, run.id)["long"].state == "running"
    assert stop_task(db, str(run.id), "long", now=replica.clock.now()) == "long try 1: stop asked"
    replica.settle()
    long = tis(db, run.id)["long"]
    assert (long.state, long.try_number) == ("failed", 1)
    assert runs(db, "batch")[0]["state"] == "failed"


def test_scope_run_takes_only_signals_sent_from_the_same_run(db, tmp_path, replica):
    apply(db, write_dag(tmp_path, (PIPELINE % {"handling": "each"}).replace(
        "handling: each}", "handling: each, scope: run}")))
    first = trigger_run(db, "ml", now=replica.clock.now())
    second = trigger_run(db, "ml", now=replica.clock.now(), logical_date=replica.clock.now() - dt.timedelta(hours=1))
    replica.settle()
    seq = replica.send("model.published", {"path": "/m/1"}, source_dag_run_id=second.id, source="try:x")
    other = replica.send("model.published", {"path": "/m/0"})  # from no run: no run takes it
    replica.settle()
    assert tis(db, first.id)["evaluate"].state == "none"
    assert tis(db, second.id)["evaluate"].state == "success"
    assert [a["run_id"] for a in actions(db, seq)] == [second.run_id]
    assert actions(db, other) == []


def test_a_task_ending_is_a_signal_another_dag_triggers_on(db, tmp_path, replica):
    apply(db, write_dag(tmp_path, """
        apiVersion: dagline.io/v1alpha1
        kind: DAG
        metadata: {name: upstream}
        spec:
          schedule: null
          paused: false
          tasks: [{id: load, spark: {mainApplicationFile: a.py}}]
    """, "a.yaml"))
    apply(db, write_dag(tmp_path, """
        apiVersion: dagline.io/v1alpha1
        kind: DAG
        metadata: {name: downstream}
        spec:
          schedule: null
          paused: false
          triggers: [{signal: dagline.task.upstream.load.success}]
          tasks: [{id: report, spark: {mainApplicationFile: b.py, arguments: ["{{ conf.run_id }}"]}}]
    """, "b.yaml"))
    run = trigger_run(db, "upstream", now=replica.clock.now())
    replica.settle()
    [down] = runs(db, "downstream")
    assert down["state"] == "success" and down["run_type"] == "signal"
    assert replica.executor.args("report") == [(1, (run.run_id,))]
    with db.begin() as conn:
        keys = [r.key for r in conn.execute(select(signal_t.c.key).order_by(signal_t.c.seq))]
    assert keys == ["dagline.task.upstream.load.running", "dagline.task.upstream.load.success",
                    "dagline.task.downstream.report.running", "dagline.task.downstream.report.success"]


def test_tasks_render_of_a_triggered_run_shows_the_signal_that_created_it(db, tmp_path, replica):
    apply(db, write_dag(tmp_path, TRIGGERED))
    seq = replica.send("features.ready", {"day": "2026-05-07"})
    replica.settle()
    [run] = runs(db, "features")
    result = CliRunner().invoke(main, ["--db", db.url, "tasks", "render", "features", "build", run["logical_date"],
                                       "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["run_id"] == f"signal__{seq}"
    assert data["arguments"] == ["2026-05-07", "features.ready", "2026-05-07", str(seq)]
    assert data["context"]["signal"] == {"key": "features.ready", "value": {"day": "2026-05-07"}, "seq": seq,
                                         "source": "user:test", "namespace": "default"}


def test_an_action_row_is_written_once_per_signal_rule_run_and_task(db, tmp_path, replica):
    run = _ml(db, tmp_path, replica)
    seq = replica.send("model.published", {"path": "/m/1"})
    with db.begin() as conn:  # hand the signal back as if it had not been handled: the guard holds
        react_to_signals(conn, now=replica.clock.now(), dags=DagCache(), who="test", limit=10)
    with db.begin() as conn:
        conn.execute(signal_t.update().where(signal_t.c.seq == seq).values(handled_at=None))
    with db.begin() as conn:
        again = react_to_signals(conn, now=replica.clock.now(), dags=DagCache(), who="test", limit=10)
    assert again.signals == 1 and again.actions == 0
    replica.settle()
    with db.begin() as conn:
        rows = conn.execute(select(signal_action_t).where(signal_action_t.c.signal_seq == seq)).all()
    assert len(rows) == 1
    assert tis(db, run.id)["evaluate"].try_number == 1


def test_the_audit_sees_signals_acted_on_out_of_order_or_twice_and_runs_without_their_signal(db, tmp_path, replica):
    from dagline.testing import audit

    run = _ml(db, tmp_path, replica)
    seqs = [replica.send("model.published", {"path": f"/m/{i}"}) for i in (1, 2)]
    apply(db, write_dag(tmp_path, TRIGGERED, "t.yaml"))
    trig = replica.send("features.ready", {"day": "x"})
    replica.settle()
    with db.begin() as conn:
        assert {k: v for k, v in audit.all_violations(conn).items() if k.startswith("signal")} == {
            "signal_order_violations": [], "signal_trigger_violations": []}
        assert audit.unhandled_signals(conn) == [] and audit.stuck_signals(conn) == []
        a = signal_action_t.c
        conn.execute(signal_action_t.update().where(a.signal_seq == seqs[1]).values(try_number=1))  # out of order
        conn.execute(signal_action_t.delete().where(a.signal_seq == trig))  # a signal run nobody asked for
        conn.execute(signal_t.update().where(signal_t.c.seq == seqs[0]).values(handled_at=None))
        order = audit.signal_order_violations(conn)
        assert [(v["seq"], v["after_seq"]) for v in order] == [(seqs[1], seqs[0])]
        [trigger] = audit.signal_trigger_violations(conn)
        assert trigger["reason"] == "0 trigger actions name this signal run"
        assert audit.unhandled_signals(conn) == [seqs[0]]
        conn.execute(signal_action_t.update().where(a.signal_seq == seqs[1]).values(status="pending"))
        [stuck] = audit.stuck_signals(conn)
        assert stuck["task_id"] == "evaluate" and stuck["dag_run_id"] == run.id


def test_a_storm_of_signals_loses_none_and_doubles_none(db, tmp_path, replica):
    """600 signals sent at once: every trigger signal gets exactly one run (all run, maxActiveRuns 1),
    `latest` keeps only the newest waiting start, every signal is handled and has its one action."""
    from dagline.testing import audit

    _ml(db, tmp_path, replica, handling="latest")
    apply(db, write_dag(tmp_path, TRIGGERED, "t.yaml"))
    with db.begin() as conn:  # one transaction, as an API batch would
        triggers = [send_signal(conn, "features.ready", {"day": str(i)}, sender_id=f"t{i}", source="storm",
                                now=replica.clock.now())[0] for i in range(100)]
        models = [send_signal(conn, "model.published", {"path": f"/m/{i}"}, sender_id=f"m{i}", source="storm",
                              now=replica.clock.now())[0] for i in range(500)]
    replica.settle(loops=400)
    feature_runs = runs(db, "features")
    assert sorted(r["run_id"] for r in feature_runs) == sorted(f"signal__{s}" for s in triggers)
    assert {r["state"] for r in feature_runs} == {"success"}
    statuses = [a["status"] for seq in models for a in actions(db, seq)]
    assert len(statuses) == 500 and statuses.count("done") >= 1
    assert statuses[-1] == "done" and set(statuses[:-1]) <= {"done", "superseded"}
    with db.begin() as conn:
        assert audit.unhandled_signals(conn) == []
        assert {k: v for k, v in audit.all_violations(conn).items() if v} == {}


def _written_by(conn, table, where):
    """The transaction that last wrote the row (PostgreSQL's xmin)."""
    return conn.execute(select(text("xmin::text")).select_from(table).where(where)).scalar_one()


def test_a_reaction_queues_and_launches_the_try_it_started_in_its_own_transaction(pg_db, tmp_path):
    replica = Replica(pg_db)
    try:
        run = _ml(pg_db, tmp_path, replica)
        seq = replica.send("model.published", {"path": "/m/1"})
        replica.sched.iterate_safely(replica.sched._react_alone)  # what a replica woken for signals does
        evaluate = tis(pg_db, run.id)["evaluate"]
        assert (evaluate.state, evaluate.try_number, evaluate.signal_seq) == ("queued", 1, seq)
        assert replica.executor.args("evaluate") == [(1, ("/m/1", str(seq)))]
        with pg_db.begin() as conn:  # handled, acted on and queued: one commit
            assert _written_by(conn, signal_t, signal_t.c.seq == seq) == \
                _written_by(conn, ti_t, ti_t.c.id == evaluate.id)
    finally:
        replica.close()


def test_a_reaction_that_finds_the_pools_held_commits_and_wakes_the_peers(pg_db, tmp_path):
    """A peer in the critical section: the reaction is stored all the same, the try waits `scheduled`,
    the peers are woken (this replica queued nothing), and a later pass queues it."""
    replica = Replica(pg_db)
    peer = Wakeup(pg_db)
    try:
        run = _ml(pg_db, tmp_path, replica)
        seq = replica.send("model.published", {"path": "/m/1"})
        peer.start()
        with pg_db.engine.connect() as other, other.begin():
            claims.lock_pool(other, "default")  # held until this block ends
            replica.sched.iterate_safely(replica.sched._react_alone)
            evaluate = tis(pg_db, run.id)["evaluate"]
            assert (evaluate.state, evaluate.try_number) == ("scheduled", 0)
            assert [a["status"] for a in actions(pg_db, seq)] == ["done"]
            assert replica.executor.args("evaluate") == []
        assert peer.wait(30) == "notified"
        replica.settle()
        assert replica.executor.args("evaluate") == [(1, ("/m/1", str(seq)))]
        assert_invariants(pg_db)
    finally:
        peer.close()
        replica.close()
