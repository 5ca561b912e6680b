"""`--now` without an offset: a command that spans DAGs (`scheduler`, `operator`) cannot read it in any one
DAG's time zone and refuses it (exit 2, naming `--now`), writing nothing; a command of one DAG
(`backfill create`) reads it in that DAG's zone, as every time given to a command."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from tests.helpers.cli import GOOD, cli, snapshot


@pytest.mark.parametrize("command", [["scheduler", "--executor", "noop", "--until-idle"], ["operator"]])
@pytest.mark.parametrize("now", ["2026-04-01T03:30", "2026-04-01"])
def test_a_command_spanning_dags_refuses_a_now_without_an_offset(db, applied, command, now):
    before = snapshot(db)
    err = cli(db, *command, "--now", now, expect=2).stderr
    assert "--now" in err and "has no offset" in err and "add one (e.g. 'Z' or '+02:00')" in err
    assert snapshot(db) == before


def test_the_scheduler_takes_a_now_with_an_offset(db, applied):
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", "2026-03-02T01:00:00+01:00")
    assert [r["state"] for r in json.loads(cli(db, "runs", "list", "sales", "--json").output)] == ["success"]


def test_backfill_reads_a_now_without_an_offset_in_the_dags_zone(db, tmp_path):
    path = tmp_path / "ny.yaml"
    path.write_text(GOOD.replace("startDate:", "timezone: America/New_York\n  startDate:"))
    cli(db, "dags", "apply", str(path))
    # the 2026-03-05 interval ends at 2026-03-06T00:00 New York time (05:00 UTC): 02:00 there is past it
    out = cli(db, "backfill", "create", "sales", "--start", "2026-03-05", "--end", "2026-03-05", "--dry-run",
              "--json", "--now", "2026-03-06T02:00").output
    assert [r["action"] for r in json.loads(out)["runs"]] == ["create"]


@pytest.fixture
def new_york(db, tmp_path):
    """`sales` in New York (UTC-5 in early March), daily, without catch-up, applied paused."""
    path = tmp_path / "ny.yaml"
    path.write_text(GOOD.replace("startDate:", "timezone: America/New_York\n  startDate:")
                    .replace("catchup: true", "catchup: false").replace("paused: false", "paused: true"))
    cli(db, "dags", "apply", str(path), "--now", "2026-03-01T12:00:00Z")
    return db


def _events(db, entity: str) -> list:
    from sqlalchemy import select

    from dagline.db.models import event_t
    with db.begin() as conn:
        return [r.at for r in conn.execute(select(event_t.c.at).where(event_t.c.entity == entity)
                                           .order_by(event_t.c.id))]


def test_commands_of_one_dag_read_a_now_without_an_offset_in_its_zone(new_york):
    db = new_york
    # 02:00 in New York is 07:00 UTC: the 2026-03-05 interval (ending 05:00 UTC) is complete then, not at 02:00 UTC
    out = cli(db, "dags", "next-runs", "sales", "--now", "2026-03-06T02:00", "--count", "1", "--json").output
    assert json.loads(out)[0]["logical_date"] == "2026-03-05T05:00:00+00:00"
    cli(db, "dags", "unpause", "sales", "--now", "2026-03-06T02:00")
    assert _events(db, "dag")[-1] == dt.datetime(2026, 3, 6, 7, tzinfo=dt.timezone.utc)
    run_id = cli(db, "dags", "trigger", "sales", "--now", "2026-03-06T02:00").output.strip()
    [run] = [r for r in json.loads(cli(db, "runs", "list", "sales", "--json").output) if r["run_id"] == run_id]
    assert run["logical_date"] == "2026-03-06T07:00:00+00:00"  # now, read in New York
    cli(db, "tasks", "stop", run_id, "load", "--now", "2026-03-06T02:05")
    cli(db, "runs", "stop", run_id, "--now", "2026-03-06T02:10")
    [run] = [r for r in json.loads(cli(db, "runs", "list", "sales", "--json").output) if r["run_id"] == run_id]
    assert run["end_date"] == "2026-03-06T07:10:00+00:00"
