"""`backfill run` with another scheduler on the SQLite file fails before it writes anything: no backfill,
no run, no run overridden (on PostgreSQL replicas share the database, so there is nothing to refuse)."""

from __future__ import annotations

import json

from dagline.scheduler.replica.guard import SchedulerLock
from tests.helpers.cli import GOOD, cli, snapshot


def test_backfill_run_beside_a_running_scheduler_exits_1_having_written_nothing(sqlite_db, tmp_path):
    db = sqlite_db
    (tmp_path / "sales.yaml").write_text(GOOD)
    cli(db, "dags", "apply", str(tmp_path / "sales.yaml"))
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-03-03T00:00:00Z")
    runs_before = json.loads(cli(db, "runs", "list", "sales", "--json").output)
    before = snapshot(db)
    running = SchedulerLock(db)
    running.acquire()  # as a running `dagline scheduler` holds it
    try:
        err = cli(db, "backfill", "run", "sales", "--start", "2026-03-01", "--end", "2026-03-02", "--reprocess",
                  "completed", "--executor", "noop", "--now", "2026-03-03T00:00:00Z", expect=1).stderr
    finally:
        running.release()
    assert "another scheduler" in err and "is already running" in err
    assert snapshot(db) == before
    assert json.loads(cli(db, "runs", "list", "sales", "--json").output) == runs_before
    assert json.loads(cli(db, "backfill", "list", "--json").output) == []
