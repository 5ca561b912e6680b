"""dagline's intervals against Apache Airflow's own timetables, case by case.

`airflow_reference/airflow_timetables.json` is written by `airflow_reference/generate.py`, which
installs Apache Airflow into a throwaway virtualenv and asks its `CronDataIntervalTimetable` /
`DeltaDataIntervalTimetable` for consecutive runs, as Airflow's scheduler does. Here dagline walks
the same cases with `Timetable.upcoming`, the path its scheduler, `dags next-runs` and backfills
take, and must give the same intervals.

The few cases where dagline differs on purpose are named in `DELIBERATE`, each with the reason
(docs/explanation/time.md says the same); for those the test asserts that dagline gives its own
documented answer, so neither side can drift unnoticed.

The `gap:` cases (issue 30) have a fire inside a spring-forward gap. With catchup off, Airflow's skip
often picks an interval that has not ended yet (`CATCHUP_SKIP`); there dagline takes the latest
interval complete at `now` on Airflow's own catchup-on timeline (the `gap:...:catchup_on` case of
the same zone and cron), and that rule, not a list of intervals, is what is checked.
"""

from __future__ import annotations

import datetime as dt
import json
import pathlib

import pytest

from dagline.domain.timetable import make_timetable

pytestmark = pytest.mark.timeout(20)  # a search that loops fails here in seconds

DATA = json.loads((pathlib.Path(__file__).parent / "airflow_reference" / "airflow_timetables.json").read_text())
CASES = {case["id"]: case for case in DATA["cases"]}

CATCHUP_SKIP = ("Airflow's catch-up skip steps back with its _get_prev, which on a spring-forward day returns "
                "the shifted fire itself, so it skips the interval that has just ended; dagline recomputes "
                "the skip on every run-creation step and would lose that run, so it takes the latest "
                "complete interval by its end")
# case id -> (why dagline differs, dagline's intervals from the first one that differs, as UTC ISO strings)
DELIBERATE = {
    "catchup_off:America/New_York:0_2_x_x_x:2026-03-08T03:00:00": (CATCHUP_SKIP, [
        ("2026-03-07T07:00:00+00:00", "2026-03-08T07:00:00+00:00")]),
    "catchup_off:America/New_York:0_2_x_x_x:2026-03-08T03:30:00": (CATCHUP_SKIP, [
        ("2026-03-07T07:00:00+00:00", "2026-03-08T07:00:00+00:00")]),
    "catchup_off_after_old_run:New_York:daily_0200": (CATCHUP_SKIP, [
        ("2026-03-07T07:00:00+00:00", "2026-03-08T07:00:00+00:00")]),
    "catchup_off:America/Santiago:0_0_x_x_x:2026-09-06T01:00:00": (CATCHUP_SKIP, [
        ("2026-09-05T04:00:00+00:00", "2026-09-06T04:00:00+00:00")]),
    "catchup_off:Pacific/Chatham:45_2_x_x_x:2026-09-27T04:00:00": (CATCHUP_SKIP, [
        ("2026-09-25T14:00:00+00:00", "2026-09-26T14:00:00+00:00")]),
    "Australia/Lord_Howe:fall:0_x_x_x_x": (
        "Lord Howe falls back by 30 minutes: Airflow's real-hour step lands on 01:30, a wall time "
        "'0 * * * *' does not name, and its scheduler then stops on the DAG ('did not advance'); "
        "dagline fires at the next instant showing minute 0 (02:00 +10:30) and goes on", [
            ("2026-04-04T14:00:00+00:00", "2026-04-04T15:30:00+00:00"),
            ("2026-04-04T15:30:00+00:00", "2026-04-04T16:30:00+00:00")]),
    "delta:utc:P1M:month_end": (
        "Airflow chains relativedelta(months=1), so a month-end start drifts (Jan 31 -> Feb 28 -> "
        "Mar 28); dagline counts every fire from the start date (Mar 31, Apr 30)", [
            ("2026-02-28T00:00:00+00:00", "2026-03-31T00:00:00+00:00"),
            ("2026-03-31T00:00:00+00:00", "2026-04-30T00:00:00+00:00")]),
    "delta:utc:PT6H:catchup_off": (
        "with catchup off, Airflow rounds a duration schedule to the Unix epoch's grid; dagline keeps "
        "the start date's grid, so intervals stay where catchup on puts them", [
            ("2026-03-10T07:00:00+00:00", "2026-03-10T13:00:00+00:00")]),
}


def _instant(text: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(text) if text else None


def airflow_intervals(case: dict) -> list[tuple[str, str]]:
    return [(_instant(s).isoformat(), _instant(e).isoformat()) for s, e in case["intervals"]]


def _gap_timeline(case: dict) -> list[tuple[str, str]] | None:
    """For a `gap:` catchup-off case, Airflow's catchup-on intervals of the same zone and cron."""
    if not case["id"].startswith("gap:") or case["catchup"]:
        return None
    return airflow_intervals(CASES[case["id"].split(":catchup_off")[0] + ":catchup_on"])


def latest_complete_on_timeline(case: dict) -> list[tuple[str, str]]:
    """The intervals dagline must give for a gap catchup-off case: from the latest interval of Airflow's
    catchup-on timeline that is complete at `now` (its end at or before it), as many as the case asks."""
    timeline = _gap_timeline(case)
    now = _instant(case["now_utc"])
    latest = max(i for i, (_, end) in enumerate(timeline) if _instant(end) <= now)
    expected = timeline[latest:latest + case["count"]]
    assert len(expected) == case["count"], "the catchup_on case's window is too short for this instant"
    return expected


GAP_CATCHUP_OFF = sorted(case_id for case_id, case in CASES.items() if _gap_timeline(case) is not None)
# Where Airflow's skip does not take the latest complete interval (CATCHUP_SKIP); worked out from Airflow's
# data alone, so a change on either side shows.
GAP_SKIPS = {case_id for case_id in GAP_CATCHUP_OFF
             if airflow_intervals(CASES[case_id]) != latest_complete_on_timeline(CASES[case_id])}


def dagline_intervals(case: dict, count: int) -> list[tuple[str, str]]:
    table = make_timetable(case["schedule"], case["timezone"], _instant(case["start_utc"]), _instant(case["end_utc"]))
    after = _instant(case["last_utc"][1]) if case["last_utc"] else None
    out = []
    for info in table.upcoming(after, catchup=case["catchup"], now=_instant(case["now_utc"])):
        if len(out) == count:
            break
        assert info.logical_date == info.data_interval.start and info.run_after == info.data_interval.end
        out.append((info.data_interval.start.isoformat(), info.data_interval.end.isoformat()))
    return out


def test_the_reference_covers_what_the_issue_asks():
    assert DATA["airflow"].startswith("3.")
    assert len(CASES) >= 40
    zones = {case["timezone"] for case in CASES.values()}
    for zone in ["America/New_York", "Australia/Sydney", "America/Santiago", "Asia/Beirut",  # both hemispheres,
                 "Australia/Adelaide", "America/St_Johns", "Pacific/Chatham", "Asia/Kathmandu"]:  # midnight, :30, :45
        assert zone in zones
    ids = " ".join(CASES)
    assert ":spring:" in ids and ":fall:" in ids and "unaligned:" in ids
    assert {case["catchup"] for case in CASES.values()} == {True, False}
    assert set(DELIBERATE) <= set(CASES)


def test_the_reference_has_fires_inside_gaps():
    """Issue 30: fires inside spring-forward gaps, not only at their start."""
    gaps = [case for case in CASES.values() if case["id"].startswith("gap:")]
    assert {case["timezone"] for case in gaps} >= {
        "America/New_York", "Europe/Amsterdam", "Australia/Sydney",  # both hemispheres
        "America/Santiago", "Asia/Beirut",  # changes at midnight
        "Australia/Lord_Howe", "Pacific/Chatham"}  # 30- and 45-minute offsets
    minutes = {case["schedule"].split()[0] for case in gaps}
    assert {"15", "30", "45", "59", "*/15"} <= minutes
    assert {case["catchup"] for case in gaps} == {True, False}
    assert any(case["last"] for case in gaps if not case["catchup"])
    assert len(GAP_CATCHUP_OFF) >= 200 and 0 < len(GAP_SKIPS) < len(GAP_CATCHUP_OFF)


@pytest.mark.parametrize("case_id", sorted(set(CASES) - set(DELIBERATE) - GAP_SKIPS))
def test_same_intervals_as_airflow(case_id):
    case = CASES[case_id]
    expected = airflow_intervals(case)
    got = dagline_intervals(case, case["count"])
    if case["airflow_error"]:
        # Airflow's scheduler stopped on this DAG part way; dagline agrees up to there and goes on.
        assert got[:len(expected)] == expected
        assert len(got) == case["count"]
    else:
        assert got == expected


@pytest.mark.parametrize("case_id", sorted(DELIBERATE))
def test_deliberate_differences_from_airflow(case_id):
    case = CASES[case_id]
    _why, ours = DELIBERATE[case_id]
    expected = airflow_intervals(case)
    got = dagline_intervals(case, case["count"])
    first = got.index(ours[0])
    assert got[first:first + len(ours)] == ours
    assert got[:first] == expected[:first]  # the same as Airflow up to the documented difference
    assert first >= len(expected) or expected[first] != got[first]  # still a difference, or drop the case here


@pytest.mark.parametrize("case_id", GAP_CATCHUP_OFF)
def test_catchup_off_in_a_gap_takes_the_latest_complete_interval(case_id):
    """A fire inside a spring-forward gap, catchup off: dagline takes the latest interval complete at `now`
    and goes on along Airflow's catchup-on timeline. Where Airflow differs, it is CATCHUP_SKIP: Airflow's
    first interval has not ended at `now`, and it skipped the latest complete one."""
    case = CASES[case_id]
    expected = latest_complete_on_timeline(case)
    assert dagline_intervals(case, case["count"]) == expected
    if case_id in GAP_SKIPS:
        airflow_first = airflow_intervals(case)[0]
        assert _instant(airflow_first[1]) > _instant(case["now_utc"])  # not complete yet
        assert _instant(airflow_first[0]) >= _instant(expected[0][1])  # and past the latest complete one
