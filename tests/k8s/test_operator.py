"""The operator end to end: real kopf and the status sync against the Kubernetes API emulator, a real
PostgreSQL, and (where runs must run) the scheduler loop with the noop executor, all in one process."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import hashlib

from sqlalchemy import select

from dagline.clock import FixedClock
from dagline.db.models import dag_version_t
from dagline.executors.noop import NoopExecutor
from dagline.k8s.resources import ANNOTATION_HISTORY_LIMIT
from tests.helpers.harness import assert_invariants, ti_states
from tests.helpers.k8s.operator_harness import (
    NS,
    START,
    backfill_manifest,
    backfill_rows,
    condition,
    dag_manifest,
    dag_row,
    dagrun_manifest,
    http_get,
    is_ready,
    managed_dagruns,
    replica,
    run_rows,
    task,
)


def test_an_applied_dag_is_stored_and_reports_ready_with_its_version(kube, run_kopf, pg_db):
    with replica(run_kopf, pg_db):
        kube.create("dags", NS, dag_manifest("daily"))
        dag = kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="DAG Ready")
    status = dag["status"]
    assert status["version"] == 1 and len(status["versionHash"]) == 16
    assert status["active"] is True and status["observedGeneration"] == 1
    assert status["nextRun"] == "2026-03-02T00:00:00+00:00"  # the first day ends at midnight
    row = dag_row(pg_db, "daily")
    assert row.is_active and row.source_path == "k8s://default/daily"


def test_an_invalid_dag_is_refused_with_a_condition_and_an_event_and_nothing_stored(kube, run_kopf, pg_db):
    broken = dag_manifest("broken", tasks=[task("extract"), task("load", "extrct")])
    with replica(run_kopf, pg_db) as runtime:
        kube.create("dags", NS, broken)
        dag = kube.wait_for(lambda: kube.get("dags", NS, "broken"), until=lambda d: condition(d, "Invalid"),
                            what="Invalid condition")
        invalid = condition(dag, "Invalid")
        assert invalid["status"] == "True" and invalid["reason"] == "Invalid"
        assert invalid["message"].startswith("spec.tasks[1].upstream: unknown task 'extrct'")
        assert condition(dag, "Ready")["status"] == "False"
        events = kube.wait_for(lambda: kube.events(NS, involving="broken"), what="a Warning Event")
        assert [(e["type"], e["reason"]) for e in events] == [("Warning", "Invalid")]
        assert "spec.tasks[1].upstream" in events[0]["message"]
        assert dag_row(pg_db, "broken") is None
        # The operator is still healthy and serves the next DAG.
        assert http_get(runtime.servers.health_port, "/healthz")[0] == 200
        kube.create("dags", NS, dag_manifest("daily"))
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="the valid DAG Ready")
    assert dag_row(pg_db, "broken") is None


def _run_states(db, dag_id):
    return [(r.run_type, r.state) for r in run_rows(db, dag_id)]


def test_a_changed_dag_gets_a_new_version_and_a_running_run_keeps_its_own(kube, run_kopf, pg_db):
    clock = FixedClock(START + dt.timedelta(hours=12))
    slow = NoopExecutor(parallelism=4, clock=clock, duration_s=60.0)  # tasks run until the test ends
    with replica(run_kopf, pg_db, executor=slow, clock=clock):
        kube.create("dags", NS, dag_manifest("daily", schedule=None))
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="DAG Ready")
        kube.create("dagruns", NS, dagrun_manifest("daily-now", logicalDate="2026-03-01T06:00:00"))
        kube.wait_for(lambda: kube.get("dagruns", NS, "daily-now"),
                      until=lambda r: (r.get("status") or {}).get("state") == "running", what="run running")
        changed = dag_manifest("daily", schedule=None, tasks=[task("extract"), task("load", "extract"),
                                                              task("report", "load")])
        kube.patch("dags", NS, "daily", {"spec": {"tasks": changed["spec"]["tasks"]}})
        dag = kube.wait_for(lambda: kube.get("dags", NS, "daily"),
                            until=lambda d: d["status"].get("version") == 2, what="version 2")
        assert dag["status"]["observedGeneration"] == 2 and is_ready(dag)
        run = kube.wait_for(lambda: kube.get("dagruns", NS, "daily-now"),
                            until=lambda r: r["status"].get("taskCounts"), what="task counts")
        # The run in flight stays on version 1: two tasks, not three.
        assert run["status"]["dagVersion"] == 1 and sum(run["status"]["taskCounts"].values()) == 2
    with pg_db.begin() as conn:
        versions = conn.execute(select(dag_version_t.c.id).where(dag_version_t.c.dag_id == "daily")).scalars().all()
    [only] = run_rows(pg_db, "daily")
    assert len(versions) == 2 and only.dag_version_id == min(versions)


def test_a_manual_dagrun_runs_and_its_status_mirrors_state_and_task_counts(kube, run_kopf, pg_db):
    clock = FixedClock(START + dt.timedelta(hours=12))
    with replica(run_kopf, pg_db, executor=NoopExecutor(parallelism=4, clock=clock), clock=clock):
        kube.create("dags", NS, dag_manifest("daily", schedule=None))
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="DAG Ready")
        created = kube.create("dagruns", NS, dagrun_manifest("daily-1", logicalDate="2026-03-01",
                                                             conf={"out": "/tmp/x"}))
        run = kube.wait_for(lambda: kube.get("dagruns", NS, "daily-1"),
                            until=lambda r: (r.get("status") or {}).get("state") == "success", what="run success")
        dag = kube.wait_for(lambda: kube.get("dags", NS, "daily"),
                            until=lambda d: d["status"].get("lastRunState") == "success", what="DAG last run")
    status = run["status"]
    assert status["runId"] == f"manual__{created['metadata']['uid']}" and status["runType"] == "manual"
    assert status["taskCounts"] == {"success": 2}
    assert status["logicalDate"] == "2026-03-01T00:00:00+00:00" and status["dagVersion"] == 1
    assert status["startDate"] and status["endDate"] and is_ready(run)
    assert dag["status"]["lastRunId"] == status["runId"]
    [row] = run_rows(pg_db, "daily")
    assert row.conf == {"out": "/tmp/x"} and row.state == "success"
    assert managed_dagruns(kube) == []  # the user's own object shows this run


class HeldNoopExecutor(NoopExecutor):
    """The noop executor with a gate: while `held`, launched tries report nothing, so their runs stay running
    for as long as the test needs; releasing it lets every try succeed at the next sync."""

    held = True

    def sync(self):
        return [] if self.held else super().sync()


def test_scheduled_runs_get_dagrun_objects_owned_by_their_dag_and_the_history_limit_prunes(kube, run_kopf, pg_db):
    clock = FixedClock(START + dt.timedelta(days=6, hours=1))  # six days have ended since startDate
    executor = HeldNoopExecutor(parallelism=8, clock=clock)
    with replica(run_kopf, pg_db, executor=executor, clock=clock):
        dag = kube.create("dags", NS, dag_manifest("daily", annotations={ANNOTATION_HISTORY_LIMIT: "2"}))
        # While they run, every scheduled run has its object, whatever the history limit.
        running = kube.wait_for(lambda: managed_dagruns(kube, "daily"), until=lambda objs: len(objs) == 6 and all(
            (o.get("status") or {}).get("state") == "running" for o in objs), what="six running DagRun objects")
        executor.held = False
        kube.wait_for(lambda: [r.state for r in run_rows(pg_db, "daily")],
                      until=lambda states: states == ["success"] * 6, timeout=15, what="six runs succeeded")
        kept = kube.wait_for(lambda: managed_dagruns(kube, "daily"), until=lambda objs: len(objs) == 2 and all(
            (o.get("status") or {}).get("state") == "success" for o in objs), what="two DagRun objects kept")
    runs = {r.run_id: r for r in run_rows(pg_db, "daily")}
    assert sorted(o["spec"]["runId"] for o in running) == sorted(runs)
    # Once finished, only the newest runs up to the limit keep their objects.
    newest = sorted(runs.values(), key=lambda r: (r.end_date, r.id))[-2:]
    assert sorted(o["spec"]["runId"] for o in kept) == sorted(r.run_id for r in newest)
    for obj in kept:
        assert obj["metadata"]["ownerReferences"][0]["uid"] == dag["metadata"]["uid"]
        assert obj["metadata"]["labels"]["dagline.io/managed-by"] == "dagline"
        run = runs[obj["spec"]["runId"]]
        assert obj["metadata"]["name"] == f"daily-{hashlib.sha256(run.run_id.encode()).hexdigest()[:10]}"
        assert obj["status"]["runType"] == "scheduled" and obj["status"]["id"] == run.id


def test_a_backfill_runs_to_succeeded_and_its_status_counts_up_on_the_way(kube, run_kopf, pg_db):
    clock = FixedClock(dt.datetime(2026, 3, 10, 1, tzinfo=dt.timezone.utc))
    executor = NoopExecutor(parallelism=4, clock=clock, duration_s=0.3)
    with replica(run_kopf, pg_db, executor=executor, clock=clock):
        kube.create("dags", NS, dag_manifest("daily", catchup=False))  # only 9 March is scheduled
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="DAG Ready")
        kube.create("backfills", NS, backfill_manifest("march", start="2026-03-01", end="2026-03-03",
                                                       maxActiveRuns=1))
        final = kube.wait_for(lambda: kube.get("backfills", NS, "march"),
                              until=lambda b: (b.get("status") or {}).get("phase") == "Succeeded", timeout=20,
                              what="backfill Succeeded")
    seen = [v["status"] for v in kube.history("backfills", NS, "march") if v and v.get("status", {}).get("phase")]
    progress = [(s["phase"], s["running"], s["succeeded"]) for s in seen]
    assert final["status"]["total"] == 3 and final["status"]["succeeded"] == 3 and final["status"]["failed"] == 0
    assert any(phase == "Running" and running == 1 and 0 < done < 3 for phase, running, done in progress), progress
    assert [done for _, _, done in progress] == sorted(done for _, _, done in progress)  # it only counts up
    assert max(running for _, running, _ in progress) == 1  # maxActiveRuns: 1
    [row] = backfill_rows(pg_db)
    assert row.request_id == f"default/{final['metadata']['uid']}" and row.state == "completed"
    backfill_runs = [r for r in run_rows(pg_db, "daily") if r.run_type == "backfill"]
    assert [r.logical_date.day for r in backfill_runs] == [1, 2, 3]
    # While they ran, the backfill's runs had DagRun objects too.
    assert sorted(o["spec"]["runId"] for o in managed_dagruns(kube, "daily")) == sorted(
        r.run_id for r in run_rows(pg_db, "daily"))


def test_two_replicas_create_nothing_twice_and_write_the_same_statuses(kube, run_kopf, pg_db):
    clock = FixedClock(dt.datetime(2026, 3, 4, 1, tzinfo=dt.timezone.utc))
    replicas = contextlib.ExitStack()
    with replicas:
        first = replicas.enter_context(replica(run_kopf, pg_db, clock=clock,
                                               executor=NoopExecutor(parallelism=4, clock=clock, duration_s=0.05)))
        second = replicas.enter_context(replica(run_kopf, pg_db, clock=clock,
                                                executor=NoopExecutor(parallelism=4, clock=clock, duration_s=0.05)))
        kube.create("dags", NS, dag_manifest("daily", startDate="2026-02-20T00:00:00", catchup=False))
        kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="DAG Ready")
        manual = kube.create("dagruns", NS, dagrun_manifest("daily-by-hand", logicalDate="2026-03-02T12:00:00"))
        backfill = kube.create("backfills", NS, backfill_manifest("late-feb", start="2026-02-25", end="2026-03-01"))
        kube.wait_for(lambda: kube.get("backfills", NS, "late-feb"), timeout=20, what="backfill Succeeded",
                      until=lambda b: (b.get("status") or {}).get("phase") == "Succeeded")
        kube.wait_for(lambda: [r.state for r in run_rows(pg_db, "daily")], timeout=20, what="every run done",
                      until=lambda states: len(states) == 7 and set(states) == {"success"})
        kube.wait_for(lambda: kube.get("dagruns", NS, "daily-by-hand"), what="manual run mirrored",
                      until=lambda r: (r.get("status") or {}).get("state") == "success")
        objects = kube.wait_for(lambda: managed_dagruns(kube, "daily"), what="six DagRun objects, all success",
                                until=lambda objs: len(objs) == 6 and all(o["status"]["state"] == "success"
                                                                          for o in objs))
        def writes_of_one_pass(runtime):
            before = runtime.sync.stats.status_patches, runtime.sync.stats.dagruns_created
            runtime.sync.sync()
            return (runtime.sync.stats.status_patches - before[0], runtime.sync.stats.dagruns_created - before[1])

        # Both write the same statuses, so they settle: a pass of either then finds nothing to write (a pass
        # may still rewrite what its watch cache has not yet seen the other write; fighting would never end).
        for runtime in (first, second):
            kube.wait_for(functools.partial(writes_of_one_pass, runtime), until=lambda writes: writes == (0, 0),
                          what="a status sync pass that writes nothing")
        assert first.cache.get("dags", NS, "daily") and second.cache.get("dags", NS, "daily")
    [row] = backfill_rows(pg_db)
    assert row.request_id == f"default/{backfill['metadata']['uid']}" and row.total == 5
    runs = run_rows(pg_db, "daily")
    assert [r.run_type for r in runs].count("manual") == 1
    assert [r.run_id for r in runs if r.run_type == "manual"] == [f"manual__{manual['metadata']['uid']}"]
    assert [r.run_type for r in runs].count("backfill") == 5 and [r.run_type for r in runs].count("scheduled") == 1
    assert sorted(o["spec"]["runId"] for o in objects) == sorted(r.run_id for r in runs if r.run_type != "manual")
    ever = [name for (res, _ns, name) in kube.call(lambda em: list(em.objects)) if res.plural == "dagruns"]
    assert len(ever) == 7  # six mirrors and the user's object: none created twice
    assert kube.events(NS) == [] or all(e["type"] != "Warning" for e in kube.events(NS))
    assert_invariants(pg_db)


def _long_backfill(kube, pg_db):
    """A DAG, and a backfill of three days one at a time whose first run is running, two queued."""
    kube.create("dags", NS, dag_manifest("daily", catchup=False))
    kube.wait_for(lambda: kube.get("dags", NS, "daily"), until=is_ready, what="DAG Ready")
    kube.create("backfills", NS, backfill_manifest("march", start="2026-03-01", end="2026-03-03", maxActiveRuns=1))
    return kube.wait_for(lambda: [(r.run_type, r.state) for r in run_rows(pg_db, "daily")], what="runs running",
                         until=lambda runs: sorted(runs) == [("backfill", "queued"), ("backfill", "queued"),
                                                             ("backfill", "running"), ("scheduled", "running")])


def test_deleting_a_dag_deactivates_it_cancels_queued_runs_and_collects_its_dagrun_objects(kube, run_kopf, pg_db):
    clock = FixedClock(dt.datetime(2026, 3, 10, 1, tzinfo=dt.timezone.utc))
    slow = NoopExecutor(parallelism=4, clock=clock, duration_s=60.0)
    with replica(run_kopf, pg_db, executor=slow, clock=clock):
        _long_backfill(kube, pg_db)
        kube.wait_for(lambda: managed_dagruns(kube, "daily"), until=lambda objs: len(objs) == 2,
                      what="objects of the two running runs")
        kube.delete("dags", NS, "daily")
        kube.wait_gone("dags", NS, "daily")
        assert managed_dagruns(kube) == []  # owned by the DAG: collected with it
        backfill = kube.wait_for(lambda: kube.get("backfills", NS, "march"), what="backfill Cancelled",
                                 until=lambda b: b["status"].get("phase") == "Cancelled")
        assert backfill["status"]["failed"] == 2 and backfill["status"]["running"] == 1
    assert dag_row(pg_db, "daily").is_active is False
    assert sorted(_run_states(pg_db, "daily")) == [("backfill", "failed"), ("backfill", "failed"),
                                                   ("backfill", "running"), ("scheduled", "running")]
    cancelled = [r for r in run_rows(pg_db, "daily") if r.state == "failed"]
    assert {state for r in cancelled for state in ti_states(pg_db, r.id).values()} == {"skipped"}
    assert [b.state for b in backfill_rows(pg_db)] == ["cancelled"]


def test_deleting_a_backfill_cancels_its_runs_that_have_not_started(kube, run_kopf, pg_db):
    clock = FixedClock(dt.datetime(2026, 3, 10, 1, tzinfo=dt.timezone.utc))
    slow = NoopExecutor(parallelism=4, clock=clock, duration_s=60.0)
    with replica(run_kopf, pg_db, executor=slow, clock=clock):
        _long_backfill(kube, pg_db)
        kube.delete("backfills", NS, "march")
        kube.wait_gone("backfills", NS, "march")
        assert dag_row(pg_db, "daily").is_active is True
    assert sorted(_run_states(pg_db, "daily")) == [("backfill", "failed"), ("backfill", "failed"),
                                                   ("backfill", "running"), ("scheduled", "running")]
    [row] = backfill_rows(pg_db)
    assert row.state == "cancelled"
