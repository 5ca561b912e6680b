"""`start` actions written per task instance (`scheduler.signal_starts`) leave the very rows that
acting on each signal in turn would: `latest` supersedes every start still pending before it, stored
or in the same claim, by the first later `latest` signal; `each` starts after the last `latest` stay
pending; a `stop` in the same claim sees the starts claimed before it. One claim, on both databases."""

from __future__ import annotations

from sqlalchemy import select, update

from dagline.db.models import dag_run_t, ti_t
from dagline.scheduler.signal_reactions import react_to_signals
from dagline.store.dags import DagCache
from dagline.store.runs import trigger_run
from dagline.store.signals import send_signal, show_signal
from tests.helpers.harness import apply, t, write_dag

NOW = t("2026-06-01T00:00:00Z")
BUSY_TASK = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: busy}
spec:
  schedule: null
  paused: false
  tasks:
    - id: evaluate
      onSignal:
        - {signal: eval.each, action: start, handling: each}
        - {signal: eval.latest, action: start, handling: latest}
        - {signal: eval.stop, action: stop}
      spark: {mainApplicationFile: evaluate.py}
"""


def _running_evaluate(db, tmp_path) -> int:
    """A running run whose `evaluate` try 1 is running: starts wait for it (they stay pending)."""
    apply(db, write_dag(tmp_path, BUSY_TASK))
    run = trigger_run(db, "busy", now=NOW)
    with db.begin() as conn:
        conn.execute(update(dag_run_t).where(dag_run_t.c.id == run.id).values(state="running", start_date=NOW))
        conn.execute(update(ti_t).where(ti_t.c.dag_run_id == run.id).values(state="running", try_number=1))
    return run.id


def _send(db, key: str) -> int:
    with db.begin() as conn:
        return send_signal(conn, key, None, now=NOW, source="user:test")[0]


def _react(db) -> int:
    with db.begin() as conn:
        return react_to_signals(conn, now=NOW, dags=DagCache(), who="scheduler:1", limit=200).signals


def _action(db, seq: int) -> tuple[str, str, str | None]:
    with db.begin() as conn:
        [a] = show_signal(conn, seq)["actions"]
    return a["action"], a["status"], a["detail"]


def test_starts_of_one_claim_are_written_as_if_one_at_a_time(db, tmp_path):
    run_id = _running_evaluate(db, tmp_path)
    stored = _send(db, "eval.each")
    assert _react(db) == 1
    assert _action(db, stored) == ("start", "pending", "waits for the task to be free")

    e1, l2, e3, l4, e5 = (_send(db, key) for key in
                          ("eval.each", "eval.latest", "eval.each", "eval.latest", "eval.each"))
    assert _react(db) == 5  # one claim
    assert _action(db, stored) == ("start", "superseded", f"superseded by signal {l2}")
    assert _action(db, e1) == ("start", "superseded", f"superseded by signal {l2}")
    assert _action(db, l2) == ("start", "superseded", f"superseded by signal {l4}")
    assert _action(db, e3) == ("start", "superseded", f"superseded by signal {l4}")
    assert _action(db, l4) == ("start", "pending", "waits for the task to be free")
    assert _action(db, e5) == ("start", "pending", "waits for the task to be free")

    e6, stop, l7 = (_send(db, key) for key in ("eval.each", "eval.stop", "eval.latest"))
    assert _react(db) == 3
    for seq in (l4, e5, e6):  # the stop sees every start claimed before it, the stored ones and e6
        assert _action(db, seq) == ("start", "superseded", f"superseded by signal {stop}")
    assert _action(db, stop) == ("stop", "done", "stop requested for try 1")
    assert _action(db, l7)[:2] == ("start", "pending")  # after the stop: it waits for the next try
    with db.begin() as conn:
        assert conn.execute(select(ti_t.c.stop_requested_at).where(ti_t.c.dag_run_id == run_id)).scalar_one()


def test_a_signal_claimed_again_after_acting_writes_nothing_more(db, tmp_path):
    _running_evaluate(db, tmp_path)
    seqs = [_send(db, "eval.latest") for _ in range(3)]
    assert _react(db) == 3
    before = [_action(db, seq) for seq in seqs]
    with db.begin() as conn:  # as if the commit's answer were lost and the signals claimed again
        conn.exec_driver_sql("UPDATE signal SET handled_at = NULL")
    assert _react(db) == 3
    assert [_action(db, seq) for seq in seqs] == before  # one action row each, unchanged
