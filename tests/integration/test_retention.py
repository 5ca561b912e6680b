"""`dagline db clean`: finished history older than the cutoff goes in batches, with everything that hangs
off it; what is still needed stays, and the timeline stays consistent (on SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from sqlalchemy import func, select

from dagline.clock import FixedClock
from dagline.db.models import dag_run_t, event_t, ti_t
from dagline.errors import InvalidInput
from dagline.executors.noop import NoopExecutor
from dagline.scheduler.loop import Scheduler
from dagline.scheduler.settings import SchedulerSettings
from dagline.store.backfills import create_backfill
from dagline.store.retention import clean_history, clean_turn
from dagline.store.runs import trigger_run
from tests.helpers.cli import cli, snapshot
from tests.helpers.dags import DAILY_EXTRACT_LOAD
from tests.helpers.harness import apply, assert_invariants, runs, schedule, t, write_dag

DAILY = DAILY_EXTRACT_LOAD
NOW = "2026-03-11T12:00:00+00:00"


def _ten_days(db, tmp_path):
    """Runs for 03-01 .. 03-10, each created and finished on the day after its logical date."""
    apply(db, write_dag(tmp_path, DAILY), now="2026-03-01T00:00:00+00:00")
    for day in range(2, 12):
        schedule(db, f"2026-03-{day:02d}T00:00:00+00:00")
    assert [r["state"] for r in runs(db, "daily")] == ["success"] * 10


def _dates(db) -> list[str]:
    return [r["logical_date"][:10] for r in runs(db, "daily")]


def _count(db, table, **where) -> int:
    with db.begin() as conn:
        stmt = select(func.count()).select_from(table)
        for column, value in where.items():
            stmt = stmt.where(table.c[column] == value)
        return conn.execute(stmt).scalar_one()


def test_clean_deletes_old_finished_runs_with_their_rows_in_batches_and_the_oldest_kept_run_starts_the_timeline(
        db, tmp_path):
    _ten_days(db, tmp_path)
    old = runs(db, "daily")[:5]
    out = json.loads(cli(db, "db", "clean", "--older-than", "P5D", "--now", NOW, "--yes", "--json").output)
    # ended on 03-02 .. 03-06, before the cutoff 03-06T12:00
    assert out["runs"] == 5 and out["task_instances"] == 10 and out["runs_by_dag"] == {"daily": 5}
    assert out["events"] > 0 and out["before"] == "2026-03-06T12:00:00+00:00"
    assert _dates(db) == ["2026-03-06", "2026-03-07", "2026-03-08", "2026-03-09", "2026-03-10"]
    kept = runs(db, "daily")
    assert kept[0]["previous_run_id"] is None  # the oldest kept run is now the first on the timeline
    assert [r["previous_run_id"] for r in kept[1:]] == [r["id"] for r in kept[:-1]]
    for gone in old:
        assert _count(db, ti_t, dag_run_id=gone["id"]) == 0
        assert _count(db, event_t, dag_run_id=gone["id"]) == 0
    assert "5 run(s)" in _details(db, "cleaned")[0]
    assert_invariants(db)
    # the pages and listings still read: the oldest kept run says it is first on the timeline
    assert json.loads(cli(db, "runs", "show", str(kept[0]["id"]), "--json").output)["previous"] is None
    again = json.loads(cli(db, "db", "clean", "--older-than", "P5D", "--now", NOW, "--yes", "--json").output)
    assert again["runs"] == 0


def _details(db, to_state: str) -> list[str]:
    with db.begin() as conn:
        return list(conn.execute(select(event_t.c.detail).where(event_t.c.to_state == to_state)).scalars())


def test_small_batches_give_the_same_result(db, tmp_path):
    _ten_days(db, tmp_path)
    seen = []
    cleaned = clean_history(db, before=t("2026-03-09T00:00:00+00:00"), now=t(NOW), batch_runs=2,
                            after_batch=lambda done: seen.append(done.runs))
    assert cleaned.runs == 7 and cleaned.task_instances == 14
    assert seen[:4] == [2, 4, 6, 7]  # one transaction per batch of two runs
    assert _dates(db) == ["2026-03-08", "2026-03-09", "2026-03-10"]
    assert_invariants(db)


def test_keep_last_keeps_each_dags_latest_runs_however_old_and_one_at_least(db, tmp_path):
    _ten_days(db, tmp_path)
    cli(db, "db", "clean", "--older-than", "P1D", "--keep-last", "3", "--now", "2026-04-30", "--yes")
    assert _dates(db) == ["2026-03-08", "2026-03-09", "2026-03-10"]
    cli(db, "db", "clean", "--older-than", "P1D", "--now", "2026-04-30", "--yes")
    assert _dates(db) == ["2026-03-10"]  # the latest run stays: dependsOnPast and the DAG list read it
    assert_invariants(db)


def test_dry_run_counts_and_deletes_nothing(db, tmp_path):
    _ten_days(db, tmp_path)
    before = snapshot(db)
    out = json.loads(cli(db, "db", "clean", "--older-than", "P5D", "--now", NOW, "--dry-run", "--json").output)
    assert out["dry_run"] is True and out["runs"] == 5 and out["task_instances"] == 10
    assert snapshot(db) == before
    text = cli(db, "db", "clean", "--older-than", "P5D", "--now", NOW, "--dry-run").output
    assert text.startswith("would delete 5 run(s), 10 task instance(s)")


def test_without_yes_and_no_answer_it_refuses_and_deletes_nothing(db, tmp_path):
    _ten_days(db, tmp_path)
    before = snapshot(db)
    cli(db, "db", "clean", "--older-than", "P5D", "--now", NOW, expect=1)
    assert snapshot(db) == before


def test_archive_appends_every_deleted_row_as_json_lines(db, tmp_path):
    _ten_days(db, tmp_path)
    folder = tmp_path / "archive"
    cli(db, "db", "clean", "--older-than", "P5D", "--now", NOW, "--yes", "--archive", str(folder))
    archived = [json.loads(line) for line in (folder / "dag_run.jsonl").read_text().splitlines()]
    assert [r["logical_date"][:10] for r in archived] == [f"2026-03-0{d}" for d in range(1, 6)]
    assert all(r["state"] == "success" for r in archived)
    tis = (folder / "task_instance.jsonl").read_text().splitlines()
    assert len(tis) == 10 and {json.loads(line)["task_id"] for line in tis} == {"extract", "load"}
    assert (folder / "event.jsonl").read_text().count("\n") > 0


def test_runs_still_needed_stay_queued_running_previous_of_unfinished_and_running_backfills(db, tmp_path):
    _ten_days(db, tmp_path)
    # a queued manual run: the latest on the timeline; the 03-10 run is its `previous`
    trigger_run(db, "daily", now=t("2026-03-11T06:00:00+00:00"))
    # a running backfill re-running 03-02 (its run replaces the old one and stays until the backfill ends)
    backfill = create_backfill(db, "daily", start=t("2026-03-02"), end=t("2026-03-02"), now=t(NOW),
                               reprocess="completed")
    cli(db, "db", "clean", "--older-than", "P1D", "--now", "2026-04-30", "--yes")
    left = runs(db, "daily")
    # 03-01: the `previous` of the backfill's queued run; the 03-02 run the backfill replaced (overridden,
    # finished) goes; 03-10: the `previous` of the queued manual run
    assert [(r["logical_date"][:10], r["state"]) for r in left] == [
        ("2026-03-01", "success"), ("2026-03-02", "queued"), ("2026-03-10", "success"), ("2026-03-11", "queued")]
    assert left[1]["backfill_id"] == backfill.backfill_id
    assert_invariants(db)


def test_bad_input_is_refused_naming_the_option_and_nothing_is_deleted(db, tmp_path):
    _ten_days(db, tmp_path)
    before = snapshot(db)
    bad = cli(db, "db", "clean", "--older-than", "soon", "--now", NOW, "--yes", expect=2)
    assert "--older-than" in bad.output + (bad.stderr or "")
    unknown = cli(db, "db", "clean", "--older-than", "P1D", "--dag", "nope", "--now", NOW, "--yes", expect=1)
    assert "nope" in unknown.output + (unknown.stderr or "")
    cli(db, "db", "clean", "--older-than", "P1D", "--keep-last", "0", "--now", NOW, "--yes", expect=2)
    assert snapshot(db) == before


def test_cleaning_while_a_scheduler_runs_keeps_every_invariant(db, tmp_path):
    """Batches interleaved with a replica's loop passes (its clock injected): the replica keeps creating
    and finishing runs, and the history it reads stays consistent."""
    _ten_days(db, tmp_path)
    clock = FixedClock(t("2026-03-12T00:00:00+00:00"))
    sched = Scheduler(db, NoopExecutor(parallelism=8, clock=clock), clock=clock)
    sched.start()
    try:
        def one_pass(_done):
            clock.advance(dt.timedelta(days=1))
            sched.iterate()
            sched.iterate()

        cleaned = clean_history(db, before=t("2026-03-09T00:00:00+00:00"), now=t(NOW), batch_runs=2,
                                after_batch=one_pass)
        for _ in range(3):
            sched.iterate()
    finally:
        sched.stop()
    assert cleaned.runs == 7
    left = runs(db, "daily")
    assert left[0]["logical_date"][:10] == "2026-03-08" and left[0]["previous_run_id"] is None
    assert len(left) > 3  # the replica went on creating runs between the batches
    assert all(r["state"] in ("success", "running", "queued") for r in left)
    assert_invariants(db)
    with db.begin() as conn:
        assert conn.execute(select(func.count()).select_from(dag_run_t)).scalar_one() == len(left)


def test_a_replica_with_a_retention_setting_cleans_off_its_loop_thread(db, tmp_path):
    _ten_days(db, tmp_path)
    clock = FixedClock(t(NOW))
    sched = Scheduler(db, NoopExecutor(parallelism=8, clock=clock), clock=clock,
                      settings=SchedulerSettings(clean_older_than="P5D"))
    sched.run(until_idle=True)
    assert sched.upkeep.cleaner is not None
    sched.upkeep.cleaner.join(120)
    assert _dates(db) == ["2026-03-06", "2026-03-07", "2026-03-08", "2026-03-09", "2026-03-10"]
    assert_invariants(db)


def test_one_replica_cleans_at_a_time(pg_db, tmp_path):
    _ten_days(pg_db, tmp_path)
    clock = FixedClock(t(NOW))
    sched = Scheduler(pg_db, NoopExecutor(parallelism=8, clock=clock), clock=clock,
                      settings=SchedulerSettings(clean_older_than="P5D"))
    with clean_turn(pg_db) as mine:  # another replica is cleaning
        assert mine
        assert sched.upkeep.clean(t(NOW)) is None
        assert len(runs(pg_db, "daily")) == 10
    assert sched.upkeep.clean(t(NOW)).runs == 5  # its turn once the other is done


def test_a_bad_retention_setting_is_refused_naming_the_variable():
    with pytest.raises(InvalidInput) as refused:
        SchedulerSettings(clean_older_than="90 days")
    assert refused.value.field == "DAGLINE_SCHEDULER_CLEAN_OLDER_THAN"


def test_dags_delete_of_a_long_history_goes_in_batches(db, tmp_path):
    from dagline.store.deletion import delete_dag

    _ten_days(db, tmp_path)
    removed = delete_dag(db, "daily", now=t(NOW), batch_runs=3)
    assert (removed.runs, removed.task_instances) == (10, 20)
    assert _count(db, dag_run_t) == 0 and _count(db, ti_t) == 0
    assert "deleted with 10 runs" in _details(db, "deleted")[0]
    cli(db, "dags", "list", "--json")  # the DAG is gone from the listing
    assert "daily" not in cli(db, "dags", "list").output
