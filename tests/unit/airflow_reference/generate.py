"""Write the intervals Apache Airflow's own timetables give for dagline's comparison cases.

    python tests/unit/airflow_reference/generate.py          # installs Airflow into a throwaway venv

The script creates a temporary virtualenv, installs the pinned Apache Airflow release into it, runs
itself there (`--inside`) and writes `airflow_timetables.json` beside this file: for every case its
inputs (zone, schedule, start date, catchup, the instant "now", the previous run) and the data
intervals Airflow's `CronDataIntervalTimetable` / `DeltaDataIntervalTimetable` produce when the
scheduler asks `next_dagrun_info` one run after another. tests/unit/test_timetable_airflow.py
compares dagline's timetable with that file. Nothing of Airflow is imported by dagline or its tests.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import zoneinfo

AIRFLOW = "apache-airflow==3.3.2"
HERE = pathlib.Path(__file__).resolve().parent
OUTPUT = HERE / "airflow_timetables.json"

# (zone, the local date of a 2026 transition, direction). The dates are checked against the zone's rules below.
TRANSITIONS = [
    ("America/New_York", "2026-03-08", "spring"), ("America/New_York", "2026-11-01", "fall"),
    ("Europe/Amsterdam", "2026-03-29", "spring"), ("Europe/Amsterdam", "2026-10-25", "fall"),
    ("Australia/Sydney", "2026-10-04", "spring"), ("Australia/Sydney", "2026-04-05", "fall"),
    ("America/Santiago", "2026-09-06", "spring"), ("America/Santiago", "2026-04-05", "fall"),  # at midnight
    ("Australia/Lord_Howe", "2026-10-04", "spring"), ("Australia/Lord_Howe", "2026-04-05", "fall"),  # 30-minute shift
    ("Pacific/Chatham", "2026-09-27", "spring"), ("Pacific/Chatham", "2026-04-05", "fall"),  # +12:45 / +13:45
]
# Fewer crons in these: midnight changes, a half-hour zone, 45-minute and 30-minute offsets without DST.
EXTRA_TRANSITIONS = [
    ("Asia/Beirut", "2026-03-29", "spring"), ("Asia/Beirut", "2026-10-25", "fall"),  # at midnight
    ("America/Havana", "2026-03-08", "spring"), ("America/Havana", "2026-11-01", "fall"),  # at midnight
    ("America/St_Johns", "2026-03-08", "spring"), ("America/St_Johns", "2026-11-01", "fall"),  # -3:30 / -2:30
    ("Australia/Adelaide", "2026-10-04", "spring"), ("Australia/Adelaide", "2026-04-05", "fall"),  # +9:30 / +10:30
]
NO_DST = ["Asia/Kathmandu", "Asia/Kolkata", "Australia/Eucla"]

# Spring-forward gaps (issue 30): crons whose wall time lies inside the gap, not at its start, in both
# hemispheres, at midnight (Santiago, Beirut, Havana), with 30-minute (Lord Howe) and 45-minute (Chatham)
# offsets. `_gap_crons` picks the crons at :15, :30, :45 and :59 that fall inside each zone's gap.
GAPS = [
    ("America/New_York", "2026-03-08"), ("Europe/Amsterdam", "2026-03-29"), ("America/St_Johns", "2026-03-08"),
    ("Asia/Beirut", "2026-03-29"), ("America/Havana", "2026-03-08"),
    ("Australia/Sydney", "2026-10-04"), ("America/Santiago", "2026-09-06"), ("Australia/Lord_Howe", "2026-10-04"),
    ("Pacific/Chatham", "2026-09-27"), ("Australia/Adelaide", "2026-10-04"),
]
GAP_MINUTES = (15, 30, 45, 59)

DAILY = ["0 0 * * *", "30 0 * * *", "30 1 * * *", "0 2 * * *", "30 2 * * *", "0 3 * * *", "30 23 * * *"]
ALL_CRONS = DAILY + ["0 0,12 * * *", "0 * * * *", "*/15 * * * *", "0 0 * * 0", "45 2 * * *"]
EXTRA_CRONS = ["0 0 * * *", "30 0 * * *", "0 2 * * *", "30 2 * * *", "0 * * * *", "*/15 * * * *"]


def _transition_instant(zone: str, day: str) -> dt.datetime:
    """The UTC instant of the offset change on a local date (fails if there is none)."""
    tz = zoneinfo.ZoneInfo(zone)
    start = dt.datetime.fromisoformat(day).replace(tzinfo=tz) - dt.timedelta(hours=6)
    start = start.astimezone(dt.timezone.utc)
    step = dt.timedelta(minutes=15)
    offset = start.astimezone(tz).utcoffset()
    instant = start
    for _ in range(4 * 48):
        instant += step
        if instant.astimezone(tz).utcoffset() != offset:
            return instant
    raise SystemExit(f"no offset change in {zone} around {day}: fix TRANSITIONS")


def _gap(zone: str, day: str) -> tuple[dt.datetime, dt.datetime]:
    """The local wall times [first skipped, first valid after) of the spring-forward gap on a local date."""
    instant = _transition_instant(zone, day)
    tz = zoneinfo.ZoneInfo(zone)
    before = (instant - dt.timedelta(minutes=1)).astimezone(tz).utcoffset()
    after = instant.astimezone(tz).utcoffset()
    if after <= before:
        raise SystemExit(f"{zone} on {day} is not a spring-forward day: fix GAPS")
    start = (instant + before).replace(tzinfo=None)
    return start, start + (after - before)


def _gap_crons(zone: str, day: str) -> list[tuple[str, dt.datetime]]:
    """(cron, its wall time) of the daily crons at GAP_MINUTES whose wall time lies inside the gap, not at its start."""
    first, end = _gap(zone, day)
    found = []
    wall = first.replace(minute=0)
    while wall < end:
        for minute in GAP_MINUTES:
            at = wall.replace(minute=minute)
            if first < at < end:
                found.append((f"{minute} {at.hour} * * *", at))
        wall += dt.timedelta(hours=1)
    if not found:
        raise SystemExit(f"no cron at {GAP_MINUTES} inside the gap of {zone} on {day}")
    return found


def _gap_instants(zone: str, day: str, wall: dt.datetime) -> list[dt.datetime]:
    """Local wall times (all valid) to evaluate `catchup: false` at, for a fire at `wall` inside the gap:
    the gap's end, between it and the shifted fire, the shifted fire, just after it, midday, and just
    before and after the next day's fire."""
    first, end = _gap(zone, day)
    shifted = wall + (end - first)
    between = end + dt.timedelta(minutes=(shifted - end).seconds // 120)  # half way, on a whole minute
    nxt = wall + dt.timedelta(days=1)
    instants = [end, between, shifted, wall.replace(hour=12, minute=0), nxt - dt.timedelta(minutes=1),
                nxt + dt.timedelta(minutes=1)]
    return sorted(set(instants))


def _gap_schedules(zone: str, day: str) -> list[tuple[str, dt.datetime]]:
    """The daily crons inside the gap, each with its wall time, and, where the gap is a whole clock hour,
    every quarter of that hour (four fires inside the gap; the last one's wall time).

    Not for gaps that are not a whole clock hour (Lord Howe's 30 minutes, Chatham's 02:45-03:45): there
    several fires of one cron inside the gap shift past real fires of the same cron, and the timeline
    Airflow's steps make has a hole (Lord Howe) or an overlap (Chatham, where dagline has a hole);
    that is a defect of its own, not the catch-up skip's."""
    first, end = _gap(zone, day)
    crons = _gap_crons(zone, day)
    if first.minute == 0 and end - first == dt.timedelta(hours=1):
        crons.append((f"*/15 {first.hour} * * *", first.replace(minute=45)))
    return crons


def _window(cron: str, zone: str, day: str) -> tuple[str, int]:
    """A local naive start and an interval count that cover the transition for this kind of cron."""
    date = dt.date.fromisoformat(day)
    if cron.startswith("*/15"):
        moment = _transition_instant(zone, day).astimezone(zoneinfo.ZoneInfo(zone)).replace(tzinfo=None)
        return (moment - dt.timedelta(hours=3)).replace(minute=0).isoformat(), 40
    if cron.split()[1] == "*":
        return (date - dt.timedelta(days=1)).isoformat() + "T00:00:00", 60
    if cron.endswith("* * 0"):
        return (date - dt.timedelta(days=15)).isoformat() + "T00:00:00", 5
    return (date - dt.timedelta(days=3)).isoformat() + "T00:00:00", 8 if "," not in cron else 14


def cases() -> list[dict]:
    out: list[dict] = []

    def add(case_id, zone, schedule, start, count, catchup=True, now=None, last=None, end=None):
        out.append({"id": case_id, "timezone": zone, "schedule": schedule, "start": start, "count": count,
                    "catchup": catchup, "now": now, "last": last, "end": end})

    def slug(cron: str) -> str:
        return re.sub(r"[^0-9a-z]+", "_", cron.replace("*/", "every").replace("*", "x")).strip("_")

    for zone, day, direction in TRANSITIONS:
        for cron in ALL_CRONS:
            start, count = _window(cron, zone, day)
            add(f"{zone}:{direction}:{slug(cron)}", zone, cron, start, count)
    for zone, day, direction in EXTRA_TRANSITIONS:
        for cron in EXTRA_CRONS:
            start, count = _window(cron, zone, day)
            add(f"{zone}:{direction}:{slug(cron)}", zone, cron, start, count)
    for zone in [z for z, _, d in TRANSITIONS if d == "spring"] + NO_DST:
        add(f"{zone}:year:monthly_29", zone, "0 0 29 * *", "2026-01-01T00:00:00", 13)
    for zone in NO_DST:
        add(f"{zone}:daily_0230", zone, "30 2 * * *", "2026-03-01T00:00:00", 5)
        add(f"{zone}:hourly", zone, "@hourly", "2026-03-01T00:00:00", 5)

    # Unaligned start dates: the first interval starts at the first fire at or after them.
    add("unaligned:new_york:daily_0200", "America/New_York", "0 2 * * *", "2026-03-06T13:17:00", 5)
    add("unaligned:amsterdam:hourly", "Europe/Amsterdam", "0 * * * *", "2026-10-24T23:59:30", 6)
    add("unaligned:sydney:every15", "Australia/Sydney", "*/15 * * * *", "2026-10-04T01:07:00", 12)
    add("unaligned:chatham:daily_0245", "Pacific/Chatham", "45 2 * * *", "2026-09-26T02:46:00", 4)
    add("unaligned:santiago:weekly", "America/Santiago", "@weekly", "2026-08-30T00:00:01", 3)
    add("aligned:utc:daily", "UTC", "@daily", "2026-03-01T00:00:00", 4)
    add("end_date:amsterdam:daily", "Europe/Amsterdam", "0 2 * * *", "2026-03-27T00:00:00", 8,
        end="2026-03-30T02:00:00")

    # catchup off: the latest complete interval at `now` (local naive), then the ones after it.
    for zone, cron, now in [
        ("America/New_York", "30 1 * * *", "2026-11-01T01:45:00"),
        ("America/New_York", "30 1 * * *", "2026-11-01T02:00:00"),
        ("America/New_York", "30 1 * * *", "2026-11-02T01:30:00"),
        ("America/New_York", "0 2 * * *", "2026-03-08T03:00:00"),
        ("America/New_York", "0 2 * * *", "2026-03-08T03:30:00"),
        ("Europe/Amsterdam", "0 * * * *", "2026-10-25T02:30:00"),
        ("Europe/Amsterdam", "*/15 * * * *", "2026-03-29T03:00:00"),
        ("America/Santiago", "0 0 * * *", "2026-09-06T01:00:00"),
        ("America/Santiago", "0 0 * * *", "2026-04-05T12:00:00"),
        ("Australia/Lord_Howe", "0 * * * *", "2026-10-04T02:30:00"),
        ("Pacific/Chatham", "45 2 * * *", "2026-09-27T04:00:00"),
        ("Asia/Kathmandu", "0 0 * * *", "2026-06-01T00:00:00"),
    ]:
        add(f"catchup_off:{zone}:{slug(cron)}:{now}", zone, cron, "2026-01-01T00:00:00", 3, catchup=False, now=now)
    add("catchup_off_after_old_run:New_York:daily_0200", "America/New_York", "0 2 * * *",
        "2026-01-01T00:00:00", 3, catchup=False, now="2026-03-08T12:00:00",
        last=["2026-01-10T02:00:00", "2026-01-11T02:00:00"])

    # Fires inside spring-forward gaps (issue 30): across the gap with catchup on; with catchup off at
    # instants from the gap's end to just after the next day's fire, and after an old run.
    for zone, day in GAPS:
        date = dt.date.fromisoformat(day)
        before = (date - dt.timedelta(days=3)).isoformat() + "T00:00:00"
        for cron, wall in _gap_schedules(zone, day):
            prefix = f"gap:{zone}:{slug(cron)}"
            add(f"{prefix}:catchup_on", zone, cron, before, 32 if cron.startswith("*/15") else 8)  # 8 days
            for now in _gap_instants(zone, day, wall):
                add(f"{prefix}:catchup_off:{now.isoformat()}", zone, cron, before, 3, catchup=False,
                    now=now.isoformat())
            old = [(wall - dt.timedelta(days=d)).isoformat() for d in (3, 2)]  # a run that ended two days before
            add(f"{prefix}:catchup_off_after_old_run", zone, cron, before, 3, catchup=False,
                now=wall.replace(hour=12, minute=0).isoformat(), last=old)

    # Durations: real time on the UTC clock, months on the UTC calendar.
    add("delta:amsterdam:PT6H:spring", "Europe/Amsterdam", "PT6H", "2026-03-28T01:00:00", 8)
    add("delta:amsterdam:P1D:spring", "Europe/Amsterdam", "P1D", "2026-03-27T02:00:00", 5)
    add("delta:new_york:P1D:fall", "America/New_York", "P1D", "2026-10-30T01:30:00", 5)
    add("delta:sydney:PT90M:spring", "Australia/Sydney", "PT90M", "2026-10-03T23:00:00", 6)
    add("delta:lord_howe:P1W", "Australia/Lord_Howe", "P1W", "2026-09-20T00:00:00", 4)
    add("delta:utc:P1M", "UTC", "P1M", "2026-01-15T00:00:00", 5)
    add("delta:utc:P1M:month_end", "UTC", "P1M", "2026-01-31T00:00:00", 5)
    add("delta:utc:PT6H:catchup_off", "UTC", "PT6H", "2026-01-01T01:00:00", 3, catchup=False,
        now="2026-03-10T14:00:00")
    return out


# --------------------------------------------------------------------------- inside the Airflow venv


def _delta(schedule: str):
    import datetime as _dt

    from dateutil.relativedelta import relativedelta

    m = re.fullmatch(r"P(?:(\d+)M)?(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?)?", schedule)
    months, weeks, days, hours, minutes = (int(g) if g else 0 for g in m.groups())
    if months:
        return relativedelta(months=months, weeks=weeks, days=days, hours=hours, minutes=minutes)
    return _dt.timedelta(weeks=weeks, days=days, hours=hours, minutes=minutes)


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def compute(all_cases: list[dict]) -> list[dict]:
    import pendulum
    from airflow.timetables import interval as interval_module
    from airflow.timetables.base import DataInterval, TimeRestriction
    from airflow.timetables.interval import CronDataIntervalTimetable, DeltaDataIntervalTimetable

    def local(text, zone):
        if text is None:
            return None
        naive = dt.datetime.fromisoformat(text)
        return pendulum.datetime(naive.year, naive.month, naive.day, naive.hour, naive.minute, naive.second,
                                 tz=zone).in_timezone("UTC")

    results = []
    for case in all_cases:
        zone = case["timezone"]
        start, end, now = (local(case[k], zone) for k in ("start", "end", "now"))
        if case["schedule"].startswith("P"):
            table = DeltaDataIntervalTimetable(_delta(case["schedule"]))
            kind = "DeltaDataIntervalTimetable"
        else:
            table = CronDataIntervalTimetable(case["schedule"], zone)
            kind = "CronDataIntervalTimetable"
        interval_module.utcnow = lambda n=now: n  # what Airflow's catch-up skip reads as "now"
        restriction = TimeRestriction(earliest=start, latest=end, catchup=case["catchup"])
        last = None
        if case["last"]:
            last = DataInterval(local(case["last"][0], zone), local(case["last"][1], zone))
        intervals, error = [], None
        for _ in range(case["count"]):
            try:
                info = table.next_dagrun_info(last_automated_data_interval=last, restriction=restriction)
            except (ValueError, AssertionError) as exc:  # Airflow's scheduler would stop on this DAG
                error = f"{type(exc).__name__}: {exc}"
                break
            if info is None:
                break
            intervals.append([info.data_interval.start.isoformat(), info.data_interval.end.isoformat()])
            last = info.data_interval
        results.append({**case, "airflow_timetable": kind, "start_utc": _iso(start), "end_utc": _iso(end),
                        "now_utc": _iso(now),
                        "last_utc": [_iso(local(t, zone)) for t in case["last"]] if case["last"] else None,
                        "intervals": intervals, "airflow_error": error})
    return results


def main() -> None:
    if "--inside" in sys.argv:
        from importlib.metadata import version

        data = {"airflow": version("apache-airflow"), "generated_by": "tests/unit/airflow_reference/generate.py",
                "cases": compute(cases())}
        lines = [json.dumps(case, sort_keys=True) for case in data["cases"]]  # one case a line: readable diffs
        OUTPUT.write_text(f'{{"airflow": "{data["airflow"]}", "generated_by": "{data["generated_by"]}", "cases": [\n'
                          + ",\n".join(lines) + "\n]}\n")
        print(f"{len(data['cases'])} cases from Apache Airflow {data['airflow']} -> {OUTPUT}")
        return
    with tempfile.TemporaryDirectory(prefix="dagline-airflow-") as tmp:
        venv = pathlib.Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", AIRFLOW],
                       check=True)
        env = dict(os.environ, AIRFLOW_HOME=str(pathlib.Path(tmp) / "airflow_home"))
        subprocess.run([python, __file__, "--inside"], check=True, env=env)


if __name__ == "__main__":
    main()
