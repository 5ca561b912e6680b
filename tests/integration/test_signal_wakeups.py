"""Wake-ups for signals on PostgreSQL: a transaction that only stored new signals wakes replicas to the
reaction step alone ('signals'), one that only created runs (a trigger) to starting runs ('runs');
one that changed anything else as well wakes them fully ('notified');
the reaction step's own transaction holds its announcements save urgent ones (stop requests); a
signal stored already handled (no listener) wakes no one."""

from __future__ import annotations

import datetime as dt

from dagline.db.notify import RUNS_ONLY, SIGNALS_ONLY, announce, hold_announcements
from dagline.db.signal_log import insert_signal
from dagline.scheduler.replica.wakeup import Wakeup
from dagline.spec import load_dag_paths
from dagline.store.dags import apply_dags
from dagline.store.runs import trigger_run
from tests.helpers.dags import dag, task, write

AT = dt.datetime(2026, 5, 1, tzinfo=dt.timezone.utc)


def _listening(pg_db) -> Wakeup:
    wakeup = Wakeup(pg_db)
    wakeup.start()
    wakeup.ignore("scheduler:1")
    return wakeup


def test_signals_alone_wake_to_the_reaction_step_and_anything_more_wakes_fully(pg_db):
    wakeup = _listening(pg_db)
    try:
        with pg_db.begin() as conn:
            announce(conn, SIGNALS_ONLY)
            announce(conn, SIGNALS_ONLY)  # once per transaction
        assert wakeup.wait(30) == "signals"
        with pg_db.begin() as conn:
            announce(conn, SIGNALS_ONLY)
            announce(conn, "cli")  # the same transaction changed something else too
        assert wakeup.wait(30) == "notified"
    finally:
        wakeup.close()


def test_runs_created_alone_wake_to_starting_runs_and_anything_more_wakes_fully(pg_db, tmp_path):
    write(tmp_path, dag("created", task("a")))
    apply_dags(pg_db, load_dag_paths([str(tmp_path)]), now=dt.datetime.now(dt.timezone.utc))
    wakeup = _listening(pg_db)
    try:
        trigger_run(pg_db, "created", now=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
        assert wakeup.wait(30) == "runs"
        with pg_db.begin() as conn:
            announce(conn, RUNS_ONLY)
            announce(conn, "cli")  # the same transaction changed something else too
        assert wakeup.wait(30) == "notified"
    finally:
        wakeup.close()


def test_a_held_transaction_wakes_no_one_unless_urgent(pg_db):
    wakeup = _listening(pg_db)
    try:
        with pg_db.begin() as conn:
            hold_announcements(conn)
            announce(conn, "scheduler:2")
        assert wakeup.wait(0.5) == "timeout"
        with pg_db.begin() as conn:
            hold_announcements(conn)
            announce(conn, "scheduler:2", urgent=True)  # a stop request: the try's replica must hear it
        assert wakeup.wait(30) == "notified"
    finally:
        wakeup.close()


def test_a_signal_nobody_listens_to_wakes_no_one(pg_db):
    wakeup = _listening(pg_db)
    try:
        with pg_db.begin() as conn:
            seq, created = insert_signal(conn, key="nobody.listens", value_text="1", sender_id=None, namespace="default",
                                         source="test", sent_at=AT)
            assert created
        assert wakeup.wait(0.5) == "timeout"
    finally:
        wakeup.close()
