"""`--now` without an offset: a command that spans DAGs (`scheduler`, `operator`) cannot read it in any one
DAG's time zone and refuses it (exit 2, naming `--now`), writing nothing; a command of one DAG
(`backfill create`) reads it in that DAG's zone, as every time given to a command."""

from __future__ import annotations

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
