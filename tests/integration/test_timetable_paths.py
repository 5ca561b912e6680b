"""One timetable, three paths: `dags next-runs`, the scheduler's run creation and backfill planning
give the same intervals across DST changes (issue 10: no interval lost or moved).

Each case is a schedule where the old cron code lost or moved an interval (a twice-daily cron
across spring-forward, an ambiguous fall-back wall time, an hourly cron in Lord Howe's 30-minute
shift, midnight in Santiago, quarter hours in Amsterdam). The DAG's intervals are read three ways
through the real CLI: `next-runs` on the file, a backfill's dry-run plan over the same range, and
the runs the scheduler creates (noop executor, `--until-idle` at an injected `--now`).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dagline.cli import main

COUNT = 8

# (zone, schedule, local start date)
CASES = [
    ("America/New_York", "0 0,12 * * *", "2026-03-06T00:00:00"),  # twice daily across spring forward
    ("America/New_York", "30 1 * * *", "2026-10-29T00:00:00"),  # 01:30 happens twice on 2026-11-01
    ("Australia/Lord_Howe", "0 * * * *", "2026-10-04T00:00:00"),  # a 30-minute spring-forward gap
    ("America/Santiago", "0 0 * * *", "2026-09-04T00:00:00"),  # midnight does not exist on 2026-09-06
    ("Europe/Amsterdam", "*/15 * * * *", "2026-10-25T01:30:00"),  # 02:00-02:59 twice
]

SPEC = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {{name: {name}}}
spec:
  schedule: "{schedule}"
  timezone: {zone}
  startDate: "{start}"
  catchup: true
  maxActiveRuns: 64
  tasks:
    - id: only
      spark: {{mainApplicationFile: job.py}}
"""


def cli(db, *args):
    result = CliRunner().invoke(main, ["--db", db.url, *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def intervals(rows) -> list[tuple[str, str, str]]:
    return [(r["logical_date"], r["data_interval_start"], r["data_interval_end"]) for r in rows]


@pytest.mark.parametrize("zone,schedule,start", CASES, ids=[f"{z}:{s}" for z, s, _ in CASES])
def test_next_runs_run_creation_and_backfill_agree(db, tmp_path, zone, schedule, start):
    path = tmp_path / "dag.yaml"
    path.write_text(SPEC.format(name="dst", schedule=schedule, zone=zone, start=start))

    from_file = intervals(json.loads(cli(db, "dags", "next-runs", str(path), "--count", str(COUNT), "--json")))
    assert len(from_file) == COUNT
    last_start, last_end = from_file[-1][1], from_file[-1][2]

    cli(db, "dags", "apply", str(path))
    cli(db, "dags", "unpause", "dst")
    stored = intervals(json.loads(cli(db, "dags", "next-runs", "dst", "--count", str(COUNT), "--json")))
    plan = json.loads(cli(db, "backfill", "create", "dst", "--start", from_file[0][1], "--end", last_start,
                          "--dry-run", "--json", "--now", last_end))
    planned = intervals(plan["runs"])
    assert {r["action"] for r in plan["runs"]} == {"create"}

    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", last_end)
    runs = json.loads(cli(db, "runs", "list", "dst", "--json"))
    created = sorted(intervals([r for r in runs if r["run_type"] == "scheduled"]))

    assert from_file == stored == planned == created
    for (_, _, end), (_, start_next, _) in zip(created, created[1:]):
        assert end == start_next  # contiguous: nothing lost between two runs
