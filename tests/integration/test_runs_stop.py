"""`dagline runs stop` ends a run `failed` whether it was queued or running: a stopped run is never
`success` (though its skipped tasks and stopped streaming tries would say so), so `backfill create
--reprocess failed` takes it again. A running run ends once its stopped tries have ended, by the run
decision, with the reason `stopped by <who>`; clearing its tasks makes it an ordinary run again."""

from __future__ import annotations

import json

from sqlalchemy import select, update

from dagline.db.models import dag_run_t, event_t, ti_t
from dagline.domain.states import RunState, TIState
from tests.helpers.cli import cli


def _running_with_extract_done(db) -> str:
    cli(db, "dags", "pause", "sales")  # no scheduled run besides it
    run_id = cli(db, "dags", "trigger", "sales", "--logical-date", "2026-03-05", "--now", "2026-03-07").output.strip()
    with db.begin() as conn:
        conn.execute(update(dag_run_t).values(state=RunState.RUNNING))
        conn.execute(update(ti_t).where(ti_t.c.task_id == "extract").values(state=TIState.SUCCESS, try_number=1))
    return run_id


def _run(db, run_id) -> dict:
    return next(r for r in json.loads(cli(db, "runs", "list", "sales", "--json").output) if r["run_id"] == run_id)


def _run_ends(db) -> list[tuple]:
    with db.begin() as conn:
        return [tuple(r) for r in conn.execute(
            select(event_t.c.from_state, event_t.c.to_state, event_t.c.detail)
            .where(event_t.c.entity == "dag_run", event_t.c.to_state.in_(["failed", "success"]))
            .order_by(event_t.c.id))]


def test_a_stopped_running_run_ends_failed_and_is_reprocessed(db, applied):
    run_id = _running_with_extract_done(db)
    cli(db, "runs", "stop", run_id, "--now", "2026-03-07T00:10:00Z")
    cli(db, "dags", "unpause", "sales")
    out = cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-03-07T00:20:00Z", expect=1)
    assert f"{run_id}: stopped by cli" in out.stderr  # the run this replica ended failed, and why
    assert _run(db, run_id)["state"] == "failed"
    tasks = json.loads(cli(db, "tasks", "list", run_id, "--json").output)
    assert [(t["task_id"], t["state"]) for t in tasks] == [("extract", "success"), ("load", "skipped")]
    assert ("running", "failed", "stopped by cli") in _run_ends(db)
    out = cli(db, "backfill", "create", "sales", "--start", "2026-03-05", "--end", "2026-03-05", "--reprocess",
              "failed", "--json", "--now", "2026-03-07T00:30:00Z").output
    assert [(r["action"], r["existing_state"]) for r in json.loads(out)["runs"]] == [("replace", "failed")]


def test_a_stopped_run_whose_tasks_are_cleared_runs_again_and_can_succeed(db, applied):
    run_id = _running_with_extract_done(db)
    cli(db, "runs", "stop", run_id, "--now", "2026-03-07T00:10:00Z")
    cli(db, "dags", "unpause", "sales")
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-03-07T00:20:00Z", expect=1)
    cli(db, "tasks", "clear", run_id, "load", "--now", "2026-03-07T00:30:00Z")
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-03-07T00:40:00Z")
    assert _run(db, run_id)["state"] == "success"


def test_a_stopped_queued_run_ends_failed(db, applied):
    run_id = cli(db, "dags", "trigger", "sales", "--logical-date", "2026-03-05", "--now", "2026-03-01").output.strip()
    cli(db, "runs", "stop", run_id, "--now", "2026-03-07T00:10:00Z")
    assert _run(db, run_id)["state"] == "failed"
