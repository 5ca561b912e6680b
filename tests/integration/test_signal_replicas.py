"""Signals with several replicas on PostgreSQL: per-key order when two replicas claim at once, and
every signal acted on exactly once while replicas are killed with SIGKILL at random moments (between
a signal's receipt and its action, or in the middle of acting: the transaction rolls back and a peer
takes the signal)."""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from sqlalchemy import select

from dagline.db.models import dag_run_t, signal_action_t, signal_t, ti_t
from dagline.scheduler.signal_reactions import react_to_signals
from dagline.store.dags import DagCache
from dagline.store.runs import stop_run, trigger_run
from dagline.store.signals import send_signal
from dagline.testing import audit
from tests.helpers.harness import apply, runs, write_dag

pytestmark = pytest.mark.postgres
NOW = dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)

DAGS = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: loads}
spec:
  schedule: null
  paused: false
  maxActiveRuns: 3
  triggers: [{signal: load.ready}]
  tasks:
    - {id: a, retries: 3, retryDelay: PT1S, spark: {mainApplicationFile: a.py}}
    - {id: b, upstream: [a], retries: 3, retryDelay: PT1S, spark: {mainApplicationFile: b.py}}
---
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: stream}
spec:
  schedule: null
  paused: false
  tasks:
    - {id: train, mode: streaming, retries: 20, retryDelay: PT1S, spark: {mainApplicationFile: t.py}}
    - id: evaluate
      retries: 3
      retryDelay: PT1S
      onSignal: [{signal: model.published, action: start, handling: each}]
      spark: {mainApplicationFile: e.py}
"""


def _send(db, key, value, sender_id=None, now=NOW):
    with db.begin() as conn:
        return send_signal(conn, key, value, sender_id=sender_id, source="test", now=now)[0]


def test_two_replicas_claiming_at_once_keep_seq_order_per_key(pg_db, tmp_path):
    apply(pg_db, write_dag(tmp_path, DAGS))
    run = trigger_run(pg_db, "stream", now=NOW)
    with pg_db.begin() as conn:  # started (no scheduler here: the test plays two replicas' reaction steps)
        conn.execute(dag_run_t.update().where(dag_run_t.c.id == run.id).values(state="running", start_date=NOW))
    first, second = _send(pg_db, "model.published", 1), _send(pg_db, "model.published", 2)
    other = _send(pg_db, "load.ready", {})
    holder = pg_db.engine.connect()
    tx = holder.begin()
    try:
        held = react_to_signals(holder, now=NOW, dags=DagCache(), who="a", limit=1)  # takes `first`, uncommitted
        assert held.signals == 1
        with pg_db.begin() as conn:  # the peer skips `first`; `second` must wait behind it; `other` is free
            peer = react_to_signals(conn, now=NOW, dags=DagCache(), who="b", limit=10)
        assert peer.signals == 1 and peer.runs_created == 1
        with pg_db.begin() as conn:
            handled = dict(conn.execute(select(signal_t.c.seq, signal_t.c.handled_at.is_not(None))).all())
        assert handled == {first: False, second: False, other: True}
        tx.commit()
    finally:
        holder.close()
    with pg_db.begin() as conn:
        assert react_to_signals(conn, now=NOW, dags=DagCache(), who="b", limit=10).signals == 1
        actions = conn.execute(select(signal_action_t.c.signal_seq, signal_action_t.c.status)
                               .where(signal_action_t.c.task_id == "evaluate")
                               .order_by(signal_action_t.c.id)).all()
    assert [a.signal_seq for a in actions] == [first, second]


def _replica(db, logs, n):
    env = dict(os.environ, DAGLINE_SCHEDULER_POLL_INTERVAL_S="0.2", DAGLINE_SCHEDULER_HEARTBEAT_INTERVAL_S="0.5",
               DAGLINE_SCHEDULER_REPLICA_TIMEOUT_S="2", DAGLINE_SCHEDULER_HOUSEKEEPING_INTERVAL_S="0.5",
               DAGLINE_NOOP_DURATION="0.02-0.1", DAGLINE_NOOP_SEED=str(n))
    with open(logs / f"replica-{n}.log", "w") as log:  # the child keeps its own descriptor
        return subprocess.Popen([sys.executable, "-m", "dagline.cli", "--db", db.url, "scheduler", "--executor",
                                 "noop", "--parallelism", "16"], env=env, stdout=log, stderr=subprocess.STDOUT)


def _wait(predicate, what, timeout=120.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_every_signal_is_acted_on_once_in_order_while_replicas_are_killed(pg_db, tmp_path):
    apply(pg_db, write_dag(tmp_path, DAGS))
    stream = trigger_run(pg_db, "stream", now=dt.datetime.now(dt.timezone.utc))
    logs = tmp_path / "logs"
    logs.mkdir()
    rng = random.Random(13)
    replicas = [_replica(pg_db, logs, n) for n in range(3)]
    spawned = 3
    sent = {"load.ready": [], "model.published": []}
    kills = 0
    try:
        _wait(lambda: runs(pg_db, "stream")[0]["state"] == "running", "the streaming run to start")
        deadline = time.monotonic() + 12
        i = 0
        next_kill = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            key = "load.ready" if i % 3 == 0 else "model.published"
            seq = _send(pg_db, key, {"i": i}, sender_id=f"s{i}", now=dt.datetime.now(dt.timezone.utc))
            if i % 7 == 0:  # a sender retrying: the same signal, no second effect
                assert _send(pg_db, key, {"i": i}, sender_id=f"s{i}") == seq
            sent[key].append(seq)
            i += 1
            time.sleep(0.02)
            if time.monotonic() >= next_kill:
                victim = rng.randrange(len(replicas))
                replicas[victim].send_signal(signal.SIGKILL)
                replicas[victim].wait(10)
                kills += 1
                replicas[victim] = _replica(pg_db, logs, spawned)
                spawned += 1
                next_kill = time.monotonic() + rng.uniform(0.5, 1.5)

        def settled():
            with pg_db.begin() as conn:
                if conn.execute(select(signal_t.c.seq).where(signal_t.c.handled_at.is_(None))).first():
                    return False
                if conn.execute(select(signal_action_t.c.id).where(signal_action_t.c.status == "pending")).first():
                    return False
                evaluate = conn.execute(select(ti_t.c.state).where(ti_t.c.dag_run_id == stream.id,
                                                                   ti_t.c.task_id == "evaluate")).scalar_one()
            return evaluate in ("success", "failed") and all(
                r["state"] in ("success", "failed") for r in runs(pg_db, "loads"))

        _wait(settled, "every signal to be acted on")
        stop_run(pg_db, str(stream.id), now=dt.datetime.now(dt.timezone.utc))
        _wait(lambda: runs(pg_db, "stream")[0]["state"] in ("success", "failed"), "the stopped run to end")
    finally:
        for proc in replicas:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(30)
    assert kills >= 5
    with pg_db.begin() as conn:
        loads = conn.execute(select(dag_run_t.c.run_id, dag_run_t.c.state).where(dag_run_t.c.dag_id == "loads")).all()
        assert sorted(r.run_id for r in loads) == sorted(f"signal__{s}" for s in sent["load.ready"])
        starts = conn.execute(select(signal_action_t.c.signal_seq, signal_action_t.c.try_number,
                                     signal_action_t.c.status)
                              .where(signal_action_t.c.task_id == "evaluate")
                              .order_by(signal_action_t.c.signal_seq)).all()
        assert [s.signal_seq for s in starts] == sent["model.published"]  # each acted on once
        assert all(s.status == "done" for s in starts)
        tries = [s.try_number for s in starts]
        assert tries == sorted(tries) and len(set(tries)) == len(tries)  # one try each, in seq order
        violations = audit.drained_violations(conn, dt.datetime.now(dt.timezone.utc))
    assert {k: v for k, v in violations.items() if v and k != "stuck_runs"} == {}
