"""`catchup: false` at the instant an interval ends, on both sides of it, through the commands a user runs:
`dagline scheduler --until-idle --now` (noop executor) and `dagline dags next-runs --now`.

An interval is complete when its end has come: one microsecond before its end it is not yet (neither
created, nor where a DAG that fell behind skips to), at its end it is. Two DAGs: a daily one in UTC and
one firing at 06:30 in Paris (its interval ends at 05:30 UTC in March, before the spring-forward day)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.cli import cli
from tests.helpers.dags import dag, task, write


def _times(day_start: str) -> dict[str, str]:
    """The instants of a DAG whose intervals start every day at `day_start` (UTC time of day, in March)."""
    return {"first": f"2026-03-01T{day_start}+00:00", "first_end": f"2026-03-02T{day_start}+00:00",
            "before": f"2026-03-08T{day_start}+00:00", "latest": f"2026-03-09T{day_start}+00:00",
            "end": f"2026-03-10T{day_start}+00:00"}


# `latest`: the interval that ends at `end`; `before`: the one before it; `first`: the first after startDate
DAGS = {
    "utc": (dag("nightly", task("a"), schedule="@daily", startDate="2026-03-01", catchup=False),
            {**_times("00:00:00"), "just_before": "2026-03-09T23:59:59.999999+00:00"}),
    "paris": (dag("nightly", task("a"), schedule="30 6 * * *", timezone="Europe/Paris", startDate="2026-03-01",
                  catchup=False),
              {**_times("05:30:00"), "just_before": "2026-03-10T05:29:59.999999+00:00"}),
}


@pytest.fixture(params=sorted(DAGS))
def nightly(request, db, tmp_path):
    document, times = DAGS[request.param]
    cli(db, "dags", "apply", write(tmp_path, document), "--now", "2026-03-01T00:00:00Z")
    return times


def _schedule(db, now: str) -> None:
    cli(db, "scheduler", "--executor", "noop", "--until-idle", "--now", now)


def _logical_dates(db) -> list[str]:
    return [run["logical_date"] for run in json.loads(cli(db, "runs", "list", "nightly", "--json").output)]


def _next_runs(db, now: str) -> list[dict]:
    return json.loads(cli(db, "dags", "next-runs", "nightly", "--now", now, "--count", "2", "--json").output)


def test_the_next_interval_is_created_at_its_end_and_not_a_microsecond_before(db, nightly):
    _schedule(db, nightly["latest"])  # the interval `before` has just ended: the latest complete one
    assert _logical_dates(db) == [nightly["before"]]

    _schedule(db, nightly["just_before"])
    assert _logical_dates(db) == [nightly["before"]]  # not yet
    assert _next_runs(db, nightly["just_before"])[0] == {
        "logical_date": nightly["latest"], "data_interval_start": nightly["latest"],
        "data_interval_end": nightly["end"], "run_after": nightly["end"]}

    _schedule(db, nightly["end"])
    assert _logical_dates(db) == [nightly["before"], nightly["latest"]]  # created at its end
    assert _next_runs(db, nightly["end"])[0]["logical_date"] == nightly["end"]


@pytest.mark.parametrize("fell_behind", [False, True], ids=["new_dag", "fell_behind"])
@pytest.mark.parametrize("at_the_end", [False, True], ids=["a_microsecond_before", "at_the_end"])
def test_a_dag_behind_skips_to_the_latest_complete_interval_and_creates_it_alone(db, nightly, fell_behind,
                                                                              at_the_end):
    """A new DAG, or one whose scheduler was down since its first run: at `end` the latest complete
    interval is `latest`; a microsecond before, it is still `before`. Only that one is created."""
    history = []
    if fell_behind:
        _schedule(db, nightly["first_end"])
        history = [nightly["first"]]
        assert _logical_dates(db) == history
    now = nightly["end"] if at_the_end else nightly["just_before"]
    skipped_to = nightly["latest"] if at_the_end else nightly["before"]
    assert _next_runs(db, now)[0]["logical_date"] == skipped_to
    _schedule(db, now)
    assert _logical_dates(db) == [*history, skipped_to]


def test_the_schedulers_clock_decides_what_is_due_whatever_clock_planned_the_dag(db, tmp_path):
    """A `catchup: false` DAG applied without `--now` (planned at the wall clock, months later), then a
    scheduler at a past `--now`: it creates the run `dags next-runs --now` lists as due then."""
    document, times = DAGS["utc"]
    cli(db, "dags", "apply", write(tmp_path, document))
    listed = _next_runs(db, times["latest"])[0]
    assert listed["logical_date"] == times["before"] and listed["run_after"] == times["latest"]
    _schedule(db, times["latest"])
    assert _logical_dates(db) == [times["before"]]
