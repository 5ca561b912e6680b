"""The core operations the operator relies on, without Kubernetes: deleting a DAG, and applies, triggers
and backfills that two replicas make at the same moment (on PostgreSQL a second writer blocks on the
first one's lock or unique key; the test holds the first writer's transaction open and lets go only
once the database shows the second one waiting)."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from sqlalchemy import insert, select, text

from dagline.db.claims import lock_dag
from dagline.db.models import backfill_t, dag_t
from dagline.errors import OperationFailed
from dagline.spec import LoadedDag
from dagline.store.backfills import create_backfill
from dagline.store.dags import _apply_one, apply_dags, deactivate
from dagline.store.pools import remove_pool, set_pool
from dagline.store.runs import trigger_run
from tests.helpers.dags import loaded
from tests.helpers.harness import events, run_row, schedule, t, ti_states
from tests.helpers.k8s.operator_harness import dag_manifest, run_rows
from tests.helpers.polling import wait_for


def _loaded(name="daily", **spec) -> list[LoadedDag]:
    return [loaded(dag_manifest(name, **spec))]


def _in_thread(fn):
    result: dict = {}

    def main():
        try:
            result["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            result["error"] = exc

    thread = threading.Thread(target=main)
    thread.start()
    return thread, result


def _wait_until_blocked(db, *threads, timeout=10.0):
    """Until as many sessions of this database as `threads` wait on a lock; fails if a thread ends first."""

    def blocked() -> bool:
        assert all(thread.is_alive() for thread in threads), "the second writer never waited on the first one's lock"
        with db.engine.connect() as conn:
            return conn.execute(text(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock'")).scalar() >= len(threads)

    wait_for(blocked, f"{len(threads)} sessions waiting on a lock", timeout=timeout, interval=0.01)


def test_deleting_a_dag_cancels_its_queued_runs_and_backfills_and_lets_running_runs_finish(db):
    now = t("2026-03-10T01:00:00+00:00")
    apply_dags(db, _loaded(catchup=False, maxActiveRuns=1), now=now)
    schedule(db, "2026-03-10T01:00:00+00:00")  # the 9 March run: success
    running = trigger_run(db, "daily", now=now, logical_date=t("2026-03-05"))
    with db.begin() as conn:  # as if a replica had started it
        conn.execute(text("UPDATE dag_run SET state = 'running' WHERE id = :id"), {"id": running.id})
    result = create_backfill(db, "daily", start=t("2026-03-01"), end=t("2026-03-02"), now=now)
    assert deactivate(db, "daily", now=now, who="k8s") == 2
    with db.begin() as conn:
        dag = conn.execute(select(dag_t).where(dag_t.c.dag_id == "daily")).one()
        backfill = conn.execute(select(backfill_t).where(backfill_t.c.id == result.backfill_id)).one()
    assert dag.is_active is False and dag.next_dagrun_create_after is None and backfill.state == "cancelled"
    states = {r.logical_date.day: r.state for r in run_rows(db, "daily")}
    assert states == {1: "failed", 2: "failed", 5: "running", 9: "success"}
    cancelled = [r for r in run_rows(db, "daily") if r.run_type == "backfill"]
    assert all(set(ti_states(db, r.id).values()) == {"skipped"} for r in cancelled)
    assert run_row(db, running.id).state == "running"
    # A second replica's delete writes nothing; applying the spec again restores the DAG.
    before = len(events(db))
    assert deactivate(db, "daily", now=now, who="k8s") is None and len(events(db)) == before
    [again] = apply_dags(db, _loaded(catchup=False, maxActiveRuns=1), now=now)
    assert again.action == "reactivated"


def test_a_pool_can_be_removed_but_not_the_default_one(db):
    now = t("2026-03-01")
    set_pool(db, "spark", 4, now=now)
    assert remove_pool(db, "spark", now=now) is True and remove_pool(db, "spark", now=now) is False
    with pytest.raises(OperationFailed, match="default pool cannot be removed"):
        remove_pool(db, "default", now=now)


def test_two_replicas_applying_a_new_dag_at_once_create_it_once(pg_db):
    now = t("2026-03-01")
    holder = pg_db.engine.connect()
    tx = holder.begin()
    holder.execute(insert(dag_t).values(dag_id="daily", is_paused=False, is_active=True, timezone="UTC",
                                        source_path="k8s://default/daily", created_at=now, updated_at=now))
    thread, result = _in_thread(lambda: apply_dags(pg_db, _loaded(), now=now))
    _wait_until_blocked(pg_db, thread)
    tx.rollback()  # the first replica's apply fails after all: the second must still create the DAG
    holder.close()
    thread.join(10)
    assert "error" not in result, result
    assert [r.action for r in result["value"]] == ["created"]


def test_two_replicas_applying_the_same_new_dag_at_once_store_one_version(pg_db):
    now = t("2026-03-01")
    holder = pg_db.engine.connect()
    tx = holder.begin()
    # The first replica's apply, stopped just before its commit: it holds the new row's unique key.
    _apply_one(holder, _loaded()[0].dag, "k8s://default/daily", now=now, who="replica-1")
    thread, result = _in_thread(lambda: apply_dags(pg_db, _loaded(), now=now, who="replica-2"))
    _wait_until_blocked(pg_db, thread)
    tx.commit()
    holder.close()
    thread.join(10)
    assert "error" not in result, result
    assert [r.action for r in result["value"]] == ["unchanged"]
    with pg_db.begin() as conn:
        assert conn.execute(text("SELECT count(*) FROM dag_version")).scalar() == 1


def test_a_trigger_and_a_backfill_with_one_request_id_are_made_once_by_two_replicas(pg_db):
    now = t("2026-03-10T01:00:00+00:00")
    apply_dags(pg_db, _loaded(catchup=False), now=now)
    # Replica 1 holds the DAG lock with its trigger written but not committed; replica 2 waits for it. Both
    # handle the same objects, so they ask with the same arguments (other arguments would be a conflict).
    holder = pg_db.engine.connect()
    tx = holder.begin()
    lock_dag(holder, "daily")
    holder.execute(text(
        "INSERT INTO dag_run (dag_id, run_id, logical_date, data_interval_start, data_interval_end, run_after, "
        "run_type, state, dag_version_id, created_at) SELECT 'daily', 'manual__uid-1', :at, :at, :at, :at, "
        "'manual', 'queued', current_version_id, :now FROM dag WHERE dag_id = 'daily'"),
        {"at": now - dt.timedelta(hours=1), "now": now})
    # a request id is stored within its namespace (`store.backfills.scoped_request_id`)
    holder.execute(insert(backfill_t).values(dag_id="daily", request_id="default/uid-2", from_date=t("2026-03-01"),
                                             to_date=t("2026-03-02"), reprocess="none", state="running",
                                             created_at=now))
    trigger, triggered = _in_thread(lambda: trigger_run(pg_db, "daily", now=now, logical_date=now - dt.timedelta(
        hours=1), run_id="manual__uid-1"))
    backfill, backfilled = _in_thread(lambda: create_backfill(pg_db, "daily", start=t("2026-03-01"),
                                                              end=t("2026-03-02"), now=now, request_id="uid-2"))
    _wait_until_blocked(pg_db, trigger, backfill)
    tx.commit()
    holder.close()
    trigger.join(10)
    backfill.join(10)
    assert "error" not in triggered and "error" not in backfilled, (triggered, backfilled)
    assert triggered["value"].run_id == "manual__uid-1"
    assert triggered["value"].logical_date == now - dt.timedelta(hours=1)
    assert backfilled["value"].created is False
    assert [r.run_id for r in run_rows(pg_db, "daily") if r.run_type != "scheduled"] == ["manual__uid-1"]
    with pg_db.begin() as conn:
        assert conn.execute(text("SELECT count(*) FROM backfill")).scalar() == 1
