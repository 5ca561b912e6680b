"""Spec fields acted on after creation, and objects waiting for their DAG: `paused` on DAGs and Backfills,
a Backfill or DagRun applied before its DAG, and a Backfill that can never run."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select

from dagline.clock import FixedClock
from dagline.db.models import signal_listener_t
from dagline.executors.noop import NoopExecutor
from dagline.store.dags import set_paused
from tests.helpers.k8s.operator_harness import (
    NS,
    backfill_manifest,
    backfill_rows,
    condition,
    dag_manifest,
    dag_row,
    dagrun_manifest,
    is_ready,
    replica,
    run_rows,
    task,
)

MARCH_10 = dt.datetime(2026, 3, 10, 1, tzinfo=dt.timezone.utc)


def test_spec_paused_pauses_and_unpauses_the_dag(kube, run_kopf, pg_db):
    with replica(run_kopf, pg_db, clock=FixedClock(MARCH_10)):
        kube.create("dags", NS, dag_manifest("daily", paused=True))
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="DAG Ready")
        assert dag_row(pg_db, "daily").is_paused is True
        kube.patch("dags", NS, "daily", {"spec": {"paused": False}})
        kube.wait_for(lambda: dag_row(pg_db, "daily").is_paused, until=lambda paused: paused is False,
                      what="unpaused")


def test_a_pause_from_the_cli_shows_in_kubectl_get_dags(kube, run_kopf, pg_db):
    """The `Paused` printer column reads `status.paused`, which follows the database: a pause from the CLI,
    API or UI leaves `spec.paused` as the author wrote it, and kubectl still tells the truth."""
    with replica(run_kopf, pg_db, clock=FixedClock(MARCH_10)):
        kube.create("dags", NS, dag_manifest("daily", paused=False))
        ready = kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="DAG Ready")
        assert ready["status"]["paused"] is False
        set_paused(pg_db, "daily", True, now=MARCH_10, who="cli")
        shown = kube.wait_for(lambda: kube.get("dags", NS, "daily"), what="status.paused true",
                              until=lambda d: d["status"].get("paused") is True)
        assert shown["spec"]["paused"] is False


def test_a_backfill_and_a_dagrun_applied_before_their_dag_wait_for_it(kube, run_kopf, pg_db):
    clock = FixedClock(MARCH_10)
    with replica(run_kopf, pg_db, clock=clock, executor=NoopExecutor(parallelism=4, clock=clock)):
        kube.create("backfills", NS, backfill_manifest("early", start="2026-03-01", end="2026-03-02"))
        kube.create("dagruns", NS, dagrun_manifest("early-run", logicalDate="2026-03-05"))
        waiting = kube.wait_for(lambda: kube.get("backfills", NS, "early"), what="backfill Invalid",
                                until=lambda b: condition(b, "Invalid"))
        assert waiting["status"]["phase"] == "Invalid" and "DAG 'daily' is not applied" in waiting["status"]["message"]
        events = kube.wait_for(lambda: kube.events(NS, involving="early"), what="a Warning Event")
        assert events[0]["type"] == "Warning" and events[0]["reason"] == "DagNotReady"
        run = kube.wait_for(lambda: kube.get("dagruns", NS, "early-run"), what="run waiting",
                            until=lambda r: condition(r, "Invalid"))
        assert condition(run, "Invalid")["reason"] == "UnknownDag" and backfill_rows(pg_db) == []
        kube.create("dags", NS, dag_manifest("daily", catchup=False))
        done = kube.wait_for(lambda: kube.get("backfills", NS, "early"), timeout=10, what="backfill Succeeded",
                             until=lambda b: b["status"].get("phase") == "Succeeded")
        assert done["status"]["succeeded"] == 2 and is_ready(done) and condition(done, "Invalid") is None
        kube.wait_for(lambda: kube.get("dagruns", NS, "early-run"), timeout=10, what="run success",
                      until=lambda r: r["status"].get("state") == "success")
    assert sorted(r.run_type for r in run_rows(pg_db, "daily")) == ["backfill", "backfill", "manual", "scheduled"]


def test_a_backfill_with_bad_dates_is_invalid_for_good_and_writes_nothing(kube, run_kopf, pg_db):
    with replica(run_kopf, pg_db, clock=FixedClock(MARCH_10)):
        kube.create("dags", NS, dag_manifest("daily", catchup=False))
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="DAG Ready")
        kube.create("backfills", NS, backfill_manifest("reversed", start="2026-03-05", end="2026-03-01"))
        refused = kube.wait_for(lambda: kube.get("backfills", NS, "reversed"), what="backfill Invalid",
                                until=lambda b: condition(b, "Invalid"))
        assert condition(refused, "Invalid")["reason"] == "Invalid"
        assert refused["status"]["message"].startswith("spec.start: the start 2026-03-05 is after the end")
    assert backfill_rows(pg_db) == []


def test_spec_paused_pauses_a_backfill_and_resumes_it(kube, run_kopf, pg_db):
    clock = FixedClock(MARCH_10)
    with replica(run_kopf, pg_db, clock=clock, executor=NoopExecutor(parallelism=4, clock=clock)):
        kube.create("dags", NS, dag_manifest("daily", catchup=False))
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="DAG Ready")
        kube.create("backfills", NS, backfill_manifest("held", start="2026-03-01", end="2026-03-02", paused=True))
        held = kube.wait_for(lambda: kube.get("backfills", NS, "held"), what="backfill Paused",
                             until=lambda b: (b.get("status") or {}).get("phase") == "Paused")
        assert held["status"]["queued"] == 2
        kube.wait_for(lambda: [r.state for r in run_rows(pg_db, "daily") if r.run_type == "scheduled"],
                      until=lambda states: states == ["success"], what="the scheduled run done")
        assert [r.state for r in run_rows(pg_db, "daily") if r.run_type == "backfill"] == ["queued", "queued"]
        kube.patch("backfills", NS, "held", {"spec": {"paused": False}})
        kube.wait_for(lambda: kube.get("backfills", NS, "held"), timeout=10, what="backfill Succeeded",
                      until=lambda b: b["status"].get("phase") == "Succeeded")
    assert backfill_rows(pg_db)[0].is_paused is False


def test_signal_rules_under_the_old_on_key_as_kubectl_sends_it_are_kept_with_a_warning(kube, run_kopf, pg_db):
    """kubectl turns an unquoted `on:` into the key `true`; the CRD declares it, so the DAG is not refused and
    its rules are not pruned; the operator reads it as `onSignal` and says so in a Warning Event."""
    rules = [{"signal": "model.published", "action": "start"}]
    with replica(run_kopf, pg_db, clock=FixedClock(MARCH_10)):
        kube.create("dags", NS, dag_manifest("daily", schedule=None, tasks=[task("serve", **{"true": rules})]))
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="DAG Ready")
        events = kube.wait_for(lambda: kube.events(NS, involving="daily"), what="a Warning Event")
        assert [(e["type"], e["reason"]) for e in events] == [("Warning", "DeprecatedField")]
        assert "spec.tasks[0].true (an unquoted `on:`): renamed to onSignal" in events[0]["message"]
    with pg_db.begin() as conn:
        stored = conn.execute(select(signal_listener_t.c.key)).scalars().all()
    assert stored == ["model.published"]
