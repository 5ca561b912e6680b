"""Scenarios a user would notice, each run by the real scheduler loop (noop executor, frozen clock)
on SQLite and on PostgreSQL, asserting on runs, task instances and the event log."""

from __future__ import annotations

import pytest

from dagline.errors import OperationFailed
from dagline.store.runs import trigger_run
from tests.helpers.harness import (
    apply,
    assert_invariants,
    backfill,
    events,
    run_row,
    runs,
    schedule,
    t,
    ti_states,
    tis,
    write_dag,
)

DAILY = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: daily}
spec:
  paused: false
  schedule: "0 2 * * *"
  timezone: Europe/Amsterdam
  startDate: "2026-03-01T00:00:00"
  catchup: %(catchup)s
  maxActiveRuns: %(max_active_runs)s
  tasks:
    - id: extract
      spark: {mainApplicationFile: extract.py, arguments: ["--ds", "{{ ds }}"]}
    - id: transform
      upstream: [extract]
      dependsOnPast: %(depends_on_past)s
      spark: {mainApplicationFile: transform.py}
    - id: load
      upstream: [transform]
      spark: {mainApplicationFile: load.py}
"""


def daily(tmp_path, *, catchup="true", max_active_runs=16, depends_on_past="false", extra_conf=None):
    body = DAILY % dict(catchup=catchup, max_active_runs=max_active_runs, depends_on_past=depends_on_past)
    if extra_conf:
        body = body.replace("spark: {mainApplicationFile: transform.py}",
                            f"spark: {{mainApplicationFile: transform.py, conf: {extra_conf}}}")
    return write_dag(tmp_path, body)


def test_a_week_of_daily_runs_is_created_in_order_with_its_intervals(db, tmp_path):
    apply(db, daily(tmp_path, max_active_runs=3))
    # 2026-03-08 03:00 Amsterdam: seven intervals (03-01 .. 03-07, 02:00 local) have ended.
    schedule(db, "2026-03-08T03:00:00+01:00")
    rows = runs(db, "daily")
    assert [r["logical_date"] for r in rows] == [f"2026-03-0{d}T01:00:00+00:00" for d in range(1, 8)]
    assert [r["data_interval_end"] for r in rows] == [f"2026-03-0{d}T01:00:00+00:00" for d in range(2, 9)]
    assert all(r["run_type"] == "scheduled" and r["state"] == "success" for r in rows)
    assert [r["previous_run_id"] for r in rows] == [None] + [r["id"] for r in rows[:-1]]
    # maxActiveRuns 3: never more than three runs running at once, read back from the event log
    running = peak = 0
    for ev in events(db, entity="dag_run"):
        running += (ev.to_state == "running") - (ev.from_state == "running")
        peak = max(peak, running)
    assert peak == 3
    # each task ran once, extract before transform before load, in every run
    for r in rows:
        order = [e.task_id for e in events(db, entity="task_instance", dag_run_id=r["id"], to_state="queued")]
        assert order == ["extract", "transform", "load"]
    assert_invariants(db)


def test_catchup_false_creates_only_the_latest_interval(db, tmp_path):
    apply(db, daily(tmp_path, catchup="false"))
    schedule(db, "2026-03-08T03:00:00+01:00")
    assert [r["logical_date"] for r in runs(db, "daily")] == ["2026-03-07T01:00:00+00:00"]


def test_nothing_is_created_before_the_first_interval_ends(db, tmp_path):
    apply(db, daily(tmp_path))
    schedule(db, "2026-03-02T01:59:59+01:00")
    assert runs(db, "daily") == []
    schedule(db, "2026-03-02T02:00:00+01:00")
    assert [r["logical_date"] for r in runs(db, "daily")] == ["2026-03-01T01:00:00+00:00"]


def test_a_manual_run_waits_for_its_logical_date_and_does_not_move_the_schedule(db, tmp_path):
    apply(db, daily(tmp_path))
    run = trigger_run(db, "daily", now=t("2026-03-01T12:00:00Z"), logical_date=t("2026-03-01T18:00:00Z"),
                      conf={"k": "v"})
    assert (run.data_interval_start, run.data_interval_end) == (t("2026-03-01T01:00:00Z"), t("2026-03-02T01:00:00Z"))
    schedule(db, "2026-03-01T12:00:00Z")
    assert run_row(db, run.id).state == "queued"  # dated in the future: waits
    schedule(db, "2026-03-02T01:30:00Z")
    rows = runs(db, "daily")
    assert [(r["run_type"], r["state"]) for r in rows] == [("scheduled", "success"), ("manual", "success")]
    # on the timeline, the manual run comes after the scheduled run of 03-01 and points to it
    assert rows[1]["previous_run_id"] == rows[0]["id"]
    with pytest.raises(OperationFailed, match="already has run"):
        trigger_run(db, "daily", now=t("2026-03-03T00:00:00Z"), logical_date=t("2026-03-01T18:00:00Z"))


FAILING = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: failing}
spec:
  paused: false
  catchup: true
  schedule: null
  defaults: {retries: 2, retryDelay: PT10M, retryExponentialBackoff: %(exponential)s}
  tasks:
    - id: extract
      spark: {mainApplicationFile: extract.py, conf: {dagline.noop.outcome: "%(outcome)s"}}
    - id: load
      upstream: [extract]
      spark: {mainApplicationFile: load.py}
    - id: notify_failure
      upstream: [extract]
      triggerRule: one_failed
      retries: 0
      spark: {mainApplicationFile: notify.py}
    - id: cleanup
      upstream: [load, notify_failure]
      triggerRule: all_done
      retries: 0
      spark: {mainApplicationFile: cleanup.py}
"""


def test_a_failing_task_is_retried_then_fails_and_its_downstream_is_upstream_failed(db, tmp_path):
    apply(db, write_dag(tmp_path, FAILING % dict(exponential="true", outcome="failed")))
    run = trigger_run(db, "failing", now=t("2026-05-01T00:00:00Z"))
    schedule(db, "2026-05-01T00:00:00Z")
    first = tis(db, run.id)["extract"]
    assert (first.state, first.try_number, first.next_retry_at) == ("up_for_retry", 1, t("2026-05-01T00:10:00Z"))
    assert ti_states(db, run.id)["load"] == "none"
    schedule(db, "2026-05-01T00:09:59Z")  # not yet
    assert tis(db, run.id)["extract"].try_number == 1
    schedule(db, "2026-05-01T00:10:00Z")
    second = tis(db, run.id)["extract"]
    # exponential backoff: the second retry waits twice as long
    assert (second.state, second.try_number, second.next_retry_at) == ("up_for_retry", 2, t("2026-05-01T00:30:00Z"))
    schedule(db, "2026-05-01T00:30:00Z")
    assert ti_states(db, run.id) == {"extract": "failed", "load": "upstream_failed", "notify_failure": "success",
                                     "cleanup": "success"}
    # the cleanup task succeeded, but a task failed: the run is failed (a cleanup cannot hide a failure)
    assert run_row(db, run.id).state == "failed"
    tries = [(e.try_number, e.to_state) for e in events(db, entity="task_instance", task_id="extract")
             if e.to_state in ("queued", "failed", "up_for_retry")]
    assert tries == [(1, "queued"), (1, "up_for_retry"), (2, "queued"), (2, "up_for_retry"), (3, "queued"),
                     (3, "failed")]
    assert_invariants(db)


def test_cleanup_tasks_skip_or_run_by_their_trigger_rule_when_all_goes_well(db, tmp_path):
    apply(db, write_dag(tmp_path, FAILING % dict(exponential="false", outcome="success")))
    run = trigger_run(db, "failing", now=t("2026-05-01T00:00:00Z"))
    schedule(db, "2026-05-01T00:00:00Z")
    assert ti_states(db, run.id) == {"extract": "success", "load": "success", "notify_failure": "skipped",
                                     "cleanup": "success"}
    assert run_row(db, run.id).state == "success"


def test_a_retry_that_succeeds_lets_the_run_succeed(db, tmp_path):
    outcome = "{{ 'failed' if try_number == 1 else 'success' }}"
    apply(db, write_dag(tmp_path, FAILING % dict(exponential="false", outcome=outcome)))
    run = trigger_run(db, "failing", now=t("2026-05-01T00:00:00Z"))
    schedule(db, "2026-05-01T00:00:00Z")
    schedule(db, "2026-05-01T00:10:00Z")
    assert ti_states(db, run.id)["extract"] == "success"
    assert tis(db, run.id)["extract"].try_number == 2
    assert run_row(db, run.id).state == "success"


def test_a_backfill_inserted_between_scheduled_runs_keeps_depends_on_past(db, tmp_path):
    # transform fails for 2026-03-03 only; transform depends on its past
    outcome = "{\"dagline.noop.outcome\": \"{{ 'failed' if ds == '2026-03-03' else 'success' }}\"}"
    apply(db, daily(tmp_path, catchup="false", depends_on_past="true", extra_conf=outcome))
    schedule(db, "2026-03-02T03:00:00+01:00")          # scheduled run for 03-01
    schedule(db, "2026-03-06T03:00:00+01:00")          # catchup false: jumps to 03-05, leaving a gap
    before = runs(db, "daily")
    assert [r["logical_date"][:10] for r in before] == ["2026-03-01", "2026-03-05"]
    assert all(r["state"] == "success" for r in before)

    result = backfill(db, "daily", "2026-03-02T00:00:00+01:00", "2026-03-04T23:00:00+01:00",
                      now="2026-03-06T03:00:00+01:00")
    assert [e.action for e in result.plan.entries] == ["create"] * 3
    rows = runs(db, "daily")
    assert [r["logical_date"][:10] for r in rows] == ["2026-03-01", "2026-03-02", "2026-03-03", "2026-03-04",
                                                      "2026-03-05"]
    assert [r["previous_run_id"] for r in rows] == [None] + [r["id"] for r in rows[:-1]]
    assert rows[4]["run_type"] == "scheduled"  # 03-05 now points to the inserted 03-04

    schedule(db, "2026-03-06T03:00:00+01:00", backfill_id=result.backfill_id)
    by_day = {r["logical_date"][:10]: r for r in runs(db, "daily")}
    assert ti_states(db, by_day["2026-03-02"]["id"])["transform"] == "success"
    assert ti_states(db, by_day["2026-03-03"]["id"])["transform"] == "failed"
    # 03-04's transform waits for 03-03's, which failed: it never ran
    assert ti_states(db, by_day["2026-03-04"]["id"]) == {"extract": "success", "transform": "none", "load": "none"}
    assert by_day["2026-03-04"]["state"] == "running"
    assert not events(db, entity="task_instance", dag_run_id=by_day["2026-03-04"]["id"], task_id="transform")
    # the scheduler fast-forwards after the latest run: the next scheduled run is 03-06, not a gap
    schedule(db, "2026-03-07T03:00:00+01:00")
    assert runs(db, "daily")[-1]["logical_date"][:10] == "2026-03-06"
    assert_invariants(db)


def test_reprocess_failed_overrides_a_failed_run_and_keeps_it(db, tmp_path):
    outcome = "{\"dagline.noop.outcome\": \"{{ 'failed' if run_id.startswith('scheduled') and ds == '2026-03-02' else 'success' }}\"}"
    apply(db, daily(tmp_path, extra_conf=outcome))
    schedule(db, "2026-03-04T03:00:00+01:00")
    rows = runs(db, "daily")
    assert [r["state"] for r in rows] == ["success", "failed", "success"]
    failed_run = rows[1]

    plan = backfill(db, "daily", "2026-03-01", "2026-03-03T23:00:00+01:00", now="2026-03-04T03:00:00+01:00",
                    reprocess="failed")
    assert [e.action for e in plan.plan.entries] == ["keep_existing", "replace", "keep_existing"]
    schedule(db, "2026-03-04T03:00:00+01:00", backfill_id=plan.backfill_id)

    after = runs(db, "daily")
    old = next(r for r in after if r["id"] == failed_run["id"])
    assert old["state"] == "overridden"
    assert ti_states(db, old["id"])["transform"] == "failed"  # its task instances stay, for audit
    live = [r for r in after if r["state"] != "overridden"]
    assert [(r["logical_date"][:10], r["run_type"], r["state"]) for r in live] == [
        ("2026-03-01", "scheduled", "success"), ("2026-03-02", "backfill", "success"),
        ("2026-03-03", "scheduled", "success")]
    assert [r["previous_run_id"] for r in live] == [None, live[0]["id"], live[1]["id"]]
    assert [e.to_state for e in events(db, entity="dag_run", dag_run_id=old["id"])][-1] == "overridden"
    # the same request again changes nothing
    again = backfill(db, "daily", "2026-03-01", "2026-03-03T23:00:00+01:00", now="2026-03-04T03:00:00+01:00",
                     reprocess="failed")
    assert again.plan.count("replace") == 0
    assert_invariants(db)


EDITED = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: edited}
spec:
  paused: false
  catchup: true
  schedule: null
  tasks:
    - id: extract
      retries: 1
      retryDelay: PT1H
      spark: {mainApplicationFile: extract.py, conf: {dagline.noop.outcome: "{{ 'failed' if try_number == 1 else 'success' }}"}}
    - id: load
      upstream: [extract]
      spark: {mainApplicationFile: load.py}
"""


def test_a_dag_edited_mid_run_leaves_the_running_run_on_its_version(db, tmp_path):
    path = write_dag(tmp_path, EDITED)
    [v1] = apply(db, path)
    run = trigger_run(db, "edited", now=t("2026-05-01T00:00:00Z"))
    schedule(db, "2026-05-01T00:00:00Z")
    assert run_row(db, run.id).state == "running"  # extract waits for its retry

    (tmp_path / "dag.yaml").write_text(EDITED + """    - id: publish
      upstream: [load]
      spark: {mainApplicationFile: publish.py}
""")
    [v2] = apply(db, path)
    assert v2.action == "updated" and v2.version != v1.version
    schedule(db, "2026-05-01T01:00:00Z")
    old = runs(db, "edited")[0]
    assert (old["state"], old["dag_version"]) == ("success", v1.version)
    assert set(ti_states(db, run.id)) == {"extract", "load"}

    new = trigger_run(db, "edited", now=t("2026-05-02T00:00:00Z"))
    schedule(db, "2026-05-02T00:00:00Z")
    schedule(db, "2026-05-02T01:00:00Z")
    assert set(ti_states(db, new.id)) == {"extract", "load", "publish"}
    assert runs(db, "edited")[1]["dag_version"] == v2.version
    # applying the same file again is not a new version
    [same] = apply(db, path)
    assert same.action == "unchanged"


POOLED = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {name: pooled}
spec:
  paused: false
  catchup: true
  schedule: null
  maxActiveTasks: 5
  defaults: {pool: narrow}
  tasks:
%s
"""


def test_pool_slots_and_task_limits_are_never_exceeded(db, tmp_path):
    from sqlalchemy import select

    from dagline.clock import FixedClock
    from dagline.db.models import ti_t
    from dagline.executors.noop import NoopExecutor
    from dagline.store.pools import set_pool

    tasks = []
    for i in range(10):
        slots = 2 if i % 3 == 0 else 1
        tasks.append(f"    - {{id: t{i}, poolSlots: {slots}, priorityWeight: {i}, spark: {{mainApplicationFile: j.py}}}}")
    tasks.append("    - {id: limited, maxActiveTisPerDag: 1, pool: default, spark: {mainApplicationFile: j.py}}")
    apply(db, write_dag(tmp_path, POOLED % "\n".join(tasks)))
    set_pool(db, "narrow", 3, now=t("2026-05-01T00:00:00Z"))
    run_ids = [trigger_run(db, "pooled", now=t("2026-05-01T00:00:00Z"), logical_date=t(f"2026-05-01T0{h}:00:00Z")).id
               for h in range(3)]
    clock = FixedClock(t("2026-05-01T06:00:00Z"))
    schedule(db, "2026-05-01T06:00:00Z",
             executor=NoopExecutor(parallelism=16, clock=clock, duration_s=(0.005, 0.03), seed=7))
    assert all(run_row(db, r).state == "success" for r in run_ids)

    with db.begin() as conn:
        ti_pool = {r.id: r for r in conn.execute(select(ti_t))}
    used, peak_pool, active, peak_active, limited, peak_limited = 0, 0, 0, 0, 0, 0
    for ev in events(db, entity="task_instance"):
        ti = ti_pool[ev.ti_id]
        starts = ev.to_state == "queued"
        ends = ev.from_state == "running"
        delta = 1 if starts else -1 if ends else 0
        if ti.pool == "narrow":
            used += delta * ti.pool_slots
            peak_pool = max(peak_pool, used)
        active += delta
        peak_active = max(peak_active, active)
        if ti.task_id == "limited":
            limited += delta
            peak_limited = max(peak_limited, limited)
    assert peak_pool == 3          # the pool was used fully, never beyond its 3 slots
    assert peak_active <= 5        # maxActiveTasks across the DAG's runs
    assert peak_limited == 1       # maxActiveTisPerDag
    assert_invariants(db)


def test_a_manual_run_on_a_scheduled_date_takes_that_interval(db, tmp_path):
    apply(db, daily(tmp_path))
    trigger_run(db, "daily", now=t("2026-03-01T00:00:00Z"), logical_date=t("2026-03-02T01:00:00Z"))
    schedule(db, "2026-03-04T03:00:00+01:00")
    rows = runs(db, "daily")
    assert [(r["logical_date"][:10], r["run_type"]) for r in rows] == [
        ("2026-03-01", "scheduled"), ("2026-03-02", "manual"), ("2026-03-03", "scheduled")]
    with db.begin() as conn:
        from sqlalchemy import select

        from dagline.db.models import dag_t
        assert conn.execute(select(dag_t.c.next_dagrun)).scalar_one() == t("2026-03-04T01:00:00Z")
    assert_invariants(db)


def test_a_schedule_change_takes_effect_from_the_end_of_the_latest_run(db, tmp_path):
    path = daily(tmp_path)
    apply(db, path)
    schedule(db, "2026-03-03T03:00:00+01:00")  # 03-01 and 03-02 at 02:00 Amsterdam
    (tmp_path / "dag.yaml").write_text((tmp_path / "dag.yaml").read_text().replace('"0 2 * * *"', '"0 14 * * *"'))
    apply(db, path)
    schedule(db, "2026-03-05T00:00:00+01:00")
    rows = runs(db, "daily")
    # the last old interval ended 03-03 02:00; the new schedule's first interval starts after it, at 14:00
    assert [(r["data_interval_start"], r["data_interval_end"]) for r in rows[2:]] == [
        ("2026-03-03T13:00:00+00:00", "2026-03-04T13:00:00+00:00")]
    assert rows[2]["dag_version"] != rows[1]["dag_version"]
    assert [r["previous_run_id"] for r in rows] == [None] + [r["id"] for r in rows[:-1]]
