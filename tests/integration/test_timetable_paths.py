"""One timetable, three paths: `dags next-runs`, the scheduler's run creation and backfill planning
give the same intervals across DST changes (issue 10: no interval lost or moved).

Each case is a schedule where the old cron code lost or moved an interval (a twice-daily cron
across spring-forward, an ambiguous fall-back wall time, an hourly cron in Lord Howe's 30-minute
shift, midnight in Santiago, quarter hours in Amsterdam). The DAG's intervals are read three ways
through the real CLI: `next-runs` on the file, a backfill's dry-run plan over the same range, and
the runs the scheduler creates (noop executor, `--until-idle` at an injected `--now`).

Issue 30 adds fires inside spring-forward gaps (a wall time the gap skips, not its start), with
catchup on (the same three-way agreement) and off: at instants from the gap's end to the next day,
`dags next-runs` on the file, the runs the scheduler creates and `next-runs` on the stored DAG all
take the latest interval complete at `--now` on the timeline a backfill plans over the same days.
The old catch-up skip looped forever there; every test here has a minute (`pytestmark`).
"""

from __future__ import annotations

import datetime as dt
import json
import zoneinfo

import pytest
from click.testing import CliRunner

from dagline.cli import main

pytestmark = pytest.mark.timeout(60)

COUNT = 8

# (zone, schedule, local start date)
CASES = [
    ("America/New_York", "0 0,12 * * *", "2026-03-06T00:00:00"),  # twice daily across spring forward
    ("America/New_York", "30 1 * * *", "2026-10-29T00:00:00"),  # 01:30 happens twice on 2026-11-01
    ("Australia/Lord_Howe", "0 * * * *", "2026-10-04T00:00:00"),  # a 30-minute spring-forward gap
    ("America/Santiago", "0 0 * * *", "2026-09-04T00:00:00"),  # midnight does not exist on 2026-09-06
    ("Europe/Amsterdam", "*/15 * * * *", "2026-10-25T01:30:00"),  # 02:00-02:59 twice
    # issue 30: wall times inside spring-forward gaps, not at their start
    ("America/New_York", "30 2 * * *", "2026-03-05T00:00:00"),  # 02:30 -> 03:30 EDT on 03-08
    ("Europe/Amsterdam", "59 2 * * *", "2026-03-26T00:00:00"),  # 02:59 -> 03:59 CEST on 03-29
    ("Australia/Sydney", "45 2 * * *", "2026-10-01T00:00:00"),  # 02:45 -> 03:45 AEDT on 10-04
    ("America/Santiago", "15 0 * * *", "2026-09-03T00:00:00"),  # 00:15 -> 01:15 on 09-06 (midnight gap)
    ("Australia/Lord_Howe", "15 2 * * *", "2026-10-01T00:00:00"),  # 02:15 -> 02:45 (30-minute gap)
    ("Pacific/Chatham", "30 3 * * *", "2026-09-24T00:00:00"),  # 03:30 -> 04:30 +13:45 (gap 02:45-03:45)
]

SPEC = """
apiVersion: dagline.io/v1alpha1
kind: DAG
metadata: {{name: {name}}}
spec:
  schedule: "{schedule}"
  timezone: {zone}
  startDate: "{start}"
  catchup: {catchup}
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
    path.write_text(SPEC.format(name="dst", schedule=schedule, zone=zone, start=start, catchup="true"))

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


# (zone, cron inside the gap, local start date, local instants to evaluate catchup off at, in order)
GAP_CATCHUP_OFF = [
    ("America/New_York", "30 2 * * *", "2026-03-04T00:00:00",
     ["2026-03-08T03:15:00", "2026-03-08T08:00:00", "2026-03-09T02:29:00", "2026-03-09T12:00:00"]),
    ("Europe/Amsterdam", "15 2 * * *", "2026-03-25T00:00:00",
     ["2026-03-29T03:00:00", "2026-03-29T12:00:00", "2026-03-30T12:00:00"]),
    ("Australia/Sydney", "59 2 * * *", "2026-09-30T00:00:00",
     ["2026-10-04T03:30:00", "2026-10-04T12:00:00", "2026-10-05T12:00:00"]),
    ("America/Santiago", "30 0 * * *", "2026-09-02T00:00:00",
     ["2026-09-06T01:10:00", "2026-09-06T12:00:00", "2026-09-07T12:00:00"]),
    ("Australia/Lord_Howe", "15 2 * * *", "2026-09-30T00:00:00",
     ["2026-10-04T02:40:00", "2026-10-04T12:00:00", "2026-10-05T12:00:00"]),
    ("Pacific/Chatham", "15 3 * * *", "2026-09-23T00:00:00",
     ["2026-09-27T04:00:00", "2026-09-27T12:00:00", "2026-09-28T12:00:00"]),
]


def utc(local: str, zone: str) -> str:
    """A local wall time (valid there) as a UTC ISO instant, the form `--now` and the JSON output use."""
    instant = dt.datetime.fromisoformat(local).replace(tzinfo=zoneinfo.ZoneInfo(zone)).astimezone(dt.timezone.utc)
    return instant.isoformat()


@pytest.mark.parametrize("zone,schedule,start,nows", GAP_CATCHUP_OFF, ids=[f"{z}:{s}" for z, s, _, _ in GAP_CATCHUP_OFF])
def test_catchup_off_inside_a_gap_takes_the_latest_complete_interval_on_every_path(db, tmp_path, zone, schedule,
                                                                                    start, nows):
    path = tmp_path / "dag.yaml"
    path.write_text(SPEC.format(name="gap", schedule=schedule, zone=zone, start=start, catchup="false"))
    first_now = utc(nows[0], zone)
    # The timeline, as a backfill over the days around the gap plans it (catchup plays no part there).
    cli(db, "dags", "apply", str(path), "--now", first_now)
    cli(db, "dags", "unpause", "gap", "--now", first_now)
    last_day = utc(nows[-1], zone)
    plan = json.loads(cli(db, "backfill", "create", "gap", "--start", utc(start, zone), "--end", last_day,
                          "--dry-run", "--json", "--now", last_day))
    timeline = intervals(plan["runs"])
    assert [start for _, start, _ in timeline] == [logical for logical, _, _ in timeline]
    assert len(timeline) >= 5

    created_before: list = []
    for local_now in nows:
        now = utc(local_now, zone)
        latest = max(i for i, (_, _, end) in enumerate(timeline) if end <= now)  # complete at `now`
        expected = timeline[latest:latest + 2]

        from_file = intervals(json.loads(cli(db, "dags", "next-runs", str(path), "--now", now, "--count", "2",
                                              "--json")))
        assert from_file == expected, f"next-runs FILE at {local_now} {zone}"

        cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", now)
        runs = json.loads(cli(db, "runs", "list", "gap", "--json"))
        created = sorted(intervals([r for r in runs if r["run_type"] == "scheduled"]))
        assert created[:len(created_before)] == created_before and created[-1] == expected[0], (
            f"run creation at {local_now} {zone}")
        created_before = created

        stored = intervals(json.loads(cli(db, "dags", "next-runs", "gap", "--now", now, "--count", "1", "--json")))
        assert stored == expected[1:], f"next-runs on the stored DAG at {local_now} {zone}"


def test_the_issue_s_instant_in_new_york(db, tmp_path):
    """The report: `30 2 * * *` in New York at 2026-03-08T12:00Z (08:00 EDT) looped forever."""
    path = tmp_path / "dag.yaml"
    path.write_text(SPEC.format(name="gap", schedule="30 2 * * *", zone="America/New_York",
                                start="2026-03-01T00:00:00", catchup="false"))
    rows = json.loads(cli(db, "dags", "next-runs", str(path), "--now", "2026-03-08T12:00:00Z", "--count", "2",
                          "--json"))
    assert intervals(rows) == [
        ("2026-03-07T07:30:00+00:00", "2026-03-07T07:30:00+00:00", "2026-03-08T07:30:00+00:00"),  # 03:30 EDT
        ("2026-03-08T07:30:00+00:00", "2026-03-08T07:30:00+00:00", "2026-03-09T06:30:00+00:00"),
    ]
